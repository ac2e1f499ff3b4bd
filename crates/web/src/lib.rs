//! web: the host's agent loop over HTTP, and the page that shows it. `toolhost serve --http`
//! mounts [`router`] beside `/mcp`, behind the same guard (token, Origin, Host).
//!
//! A chat request starts a run ([`api`], [`chat_run`]): the agent loop over one
//! conversation, its events streamed back as Server-Sent Events ([`sse`]) while the run goes
//! on, and the conversation with its log saved when it ends ([`store`], SQLite). A destructive call waits for the
//! person's decision, which comes back by another request naming the call ([`runs`]); the
//! catalog and its reload status are served as JSON and as a stream that follows every reload
//! ([`catalog`]); the ensembles' prompts and resources are listed for the page and brought
//! into a run by a request's `prompt` and `resources` ([`offers`]); the page's assets are in
//! the binary ([`page`]).
//!
//! Decisions the design leaves open (docs/chat-api.md says them for users): a run belongs to
//! the stream that started it, so a client that goes away cancels it; dedup is scoped to one
//! run (a request's allow list may differ from the last); a forced tool choice holds for the
//! first model call; a conversation is its starter's identity's (another gets 404), and the
//! page signs people in through `/auth/...` (host/src/cli/sign_in.rs) or takes a token.

mod api;
mod api_error;
mod catalog;
mod chat_run;
mod offers;
mod page;
pub mod runs;
mod sse;
pub mod store;

use axum::routing::{get, post};
use std::sync::Arc;
use std::time::Duration;
use toolhost_agent::RunLimits;
use toolhost_agent::provider::{ProviderSettings, ToolChoice};
use toolhost_core::invoke::{CallPolicy, Host};
use toolhost_core::reload::Reloader;

pub use store::{RunRecord, Store, StoreError, StoreLimits};

/// What `[chat]` permits a chat request, and the model it talks to.
#[derive(Debug, Clone)]
pub struct ChatSettings {
    /// The model, or why there is none (no `[chat] model`, no key).
    pub provider: Result<ProviderSettings, String>,
    /// Models a request may name besides the provider's.
    pub models: Vec<String>,
    /// The most (and the default) model calls of one run.
    pub max_iterations: u32,
    pub max_parallel_calls: usize,
    pub tool_choice: ToolChoice,
    /// `[chat] allow` and `deny`: a request may narrow them, never widen them.
    pub policy: CallPolicy,
    /// `[chat] auto-approve`.
    pub auto_approve: Vec<String>,
    pub approval_timeout: Duration,
    pub max_runs: usize,
    pub system: Option<String>,
    /// What one run may hold and send; `max_conversation_bytes` also refuses a continuation.
    pub limits: RunLimits,
}

impl Default for ChatSettings {
    fn default() -> Self {
        ChatSettings {
            provider: Err("no model is configured: set [chat] model in toolhost.toml".into()),
            models: Vec::new(),
            max_iterations: 10,
            max_parallel_calls: 4,
            tool_choice: ToolChoice::Auto,
            policy: CallPolicy::default(),
            auto_approve: Vec::new(),
            approval_timeout: DEFAULT_APPROVAL_TIMEOUT,
            max_runs: DEFAULT_MAX_RUNS,
            system: None,
            limits: RunLimits::default(),
        }
    }
}

/// How long a destructive call waits for a person's decision, by default.
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(300);
/// Runs at once, by default.
pub const DEFAULT_MAX_RUNS: usize = 16;
/// Conversations kept, by default.
pub const DEFAULT_MAX_CONVERSATIONS: usize = 10_000;
/// The chat database's size in use, at most, by default (MiB).
pub const DEFAULT_MAX_DATABASE_MIB: u64 = 1024;

/// Everything the chat API serves from.
pub struct Web {
    host: Arc<Host>,
    reloader: Arc<Reloader>,
    chat: ChatSettings,
    /// The database, or why it could not be opened (the chat answers 503 with it).
    store: Result<Store, String>,
    runs: Arc<runs::Runs>,
    described: catalog::Described,
}

impl Web {
    pub fn new(
        host: Arc<Host>,
        reloader: Arc<Reloader>,
        chat: ChatSettings,
        store: Result<Store, StoreError>,
    ) -> Arc<Web> {
        let runs = runs::Runs::new(chat.max_runs);
        Arc::new(Web {
            host,
            reloader,
            chat,
            store: store.map_err(|e| e.to_string()),
            runs,
            described: catalog::Described::default(),
        })
    }
}

impl Web {
    /// In a fleet with `[fleet] advertise`: the runs of this replica are said in `routes`, so
    /// that a request about a conversation running here reaches this replica from any other.
    pub fn route_runs(&self, routes: Arc<toolhost_state::routes::Routes>) {
        self.runs.route(routes);
    }

    /// Whether a run of `conversation` goes on on this replica.
    pub fn is_running(&self, conversation: &str) -> bool {
        self.runs.is_running(conversation)
    }
}

/// The conversation a request of the chat API is about (`/api/conversations/{id}[/...]`).
pub fn conversation_of(path: &str) -> Option<&str> {
    let rest = path.strip_prefix("/api/conversations/")?;
    let id = rest.split('/').next()?;
    (!id.is_empty()).then_some(id)
}

/// True for a request of the page's own files: they hold nothing secret (the page asks for
/// the token and sends it with its API requests), so a browser may load them without one.
pub fn is_page_asset(method: &axum::http::Method, path: &str) -> bool {
    method == axum::http::Method::GET && page::PATHS.contains(&path)
}

/// True for the paths [`router`] serves (the page and `/api/...`).
pub fn is_web_path(path: &str) -> bool {
    page::PATHS.contains(&path) || path.starts_with("/api/")
}

/// The most a request body may be.
const MAX_BODY: usize = 1 << 20;

/// The chat API under `/api`, and with `page` the page at `/`.
pub fn router(web: Arc<Web>, page: bool) -> axum::Router {
    let api = axum::Router::new()
        .route("/api/settings", get(api::settings))
        .route(
            "/api/conversations",
            get(api::list).post(api::start_conversation),
        )
        .route(
            "/api/conversations/{id}",
            get(api::read).delete(api::delete),
        )
        .route(
            "/api/conversations/{id}/messages",
            post(api::continue_conversation),
        )
        .route(
            "/api/conversations/{id}/approvals/{call}",
            post(api::decide),
        )
        .route(
            "/api/conversations/{id}/elicitations/{question}",
            post(api::answer),
        )
        .route("/api/prompts", get(offers::prompts))
        .route("/api/resources", get(offers::resources))
        .route("/api/catalog", get(catalog::catalog))
        .route("/api/catalog/events", get(catalog::events))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
        .with_state(web);
    if page { api.merge(page::router()) } else { api }
}
