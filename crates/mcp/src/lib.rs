//! mcp: the catalog served to MCP clients over stdio or streamable HTTP (the official `rmcp`
//! SDK), at every revision rmcp knows: 2025-11-25 and older with the `initialize` handshake
//! and sessions, and 2026-07-28 statelessly (`server/discover`, each request's own `_meta`;
//! rmcp routes each request by the revision it names). `tools/list` reads the live catalog,
//! in pages ([`tools`]), with a cache hint ([`TOOLS_TTL`]); `tools/call` goes through
//! [`Host::invoke`], so validation, dedup (scoped by [`scope`]), limits and audit hold as for
//! every caller. After each swap of the live catalog that changes the tools, every session
//! is sent `notifications/tools/list_changed`, and so is every open `subscriptions/listen`
//! stream that asked for tool list changes; sessions also get the host's own log messages as
//! `notifications/message` (see [`log`]). A tool's progress, sampling and elicitation go back
//! to the request that called it ([`talk`]); at 2026-07-28 a call that asks does so in rounds
//! of `input_required` answers and follow-up requests ([`rounds`]). How one `tools/call` runs
//! is [`calls`], in a server span that continues the caller's trace ([`traced`]).
//!
//! Beside the tools, the ensembles' prompts ([`prompts`]: `prompts/list`, `prompts/get`,
//! completion of their arguments) and resources ([`resources`]: `resources/list`,
//! `resources/templates/list`, `resources/read`, subscriptions, completion of paths), with
//! their list changes and resource updates sent as [`notify`] says.
//!
//! Over stdio the messages are read and written by [`stdio`]: a request too large or too
//! deep to read is answered with an error instead of dropped.
//!
//! The other direction, external MCP servers whose tools join the catalog, is a backend:
//! `toolhost-import`.

// MCP logging is deprecated from the 2026-07-28 revision on (SEP-2577), but it is part of
// the revisions before it, which this server speaks too, and clients rely on it there.
#![allow(deprecated)]

mod calls;
pub mod direct;
pub mod log;
mod notify;
pub mod prompts;
pub mod resources;
pub mod rounds;
pub mod scope;
pub mod stdio;
mod streams;
pub mod talk;
pub mod tasks;
pub mod tools;
mod traced;
mod twins;

use log::{LogRelay, relay_logs};
use resources::Subscriptions;
use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CancelTaskParams, CompleteRequestParams,
    CompleteResult, GetPromptRequestParams, GetPromptResponse, GetTaskParams, GetTaskResult,
    Implementation, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, ServerCapabilities, ServerConfig,
    SubscribeRequestParams, SubscriptionFilter, UnsubscribeRequestParams, UpdateTaskParams,
};
use rmcp::model::{LoggingLevel, SetLevelRequestParams};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use scope::Conversations;
use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;
pub use streams::{StreamSlot, StreamSlots};
use tasks::Tasks;
use tokio::task::AbortHandle;
use toolhost_contract::IdentityKind;
use toolhost_core::invoke::{Caller, Host, Session};
use tools::ToolList;
use traced::Target;

/// How long a client may reuse a `tools/list` answer (its `ttlMs`, 2026-07-28): a reload
/// takes effect about 0.1 s after a file settles (the watcher's debounce), so a client that
/// polls sees it within about a second; clients that hold a `subscriptions/listen` stream are
/// told at once. Longer would save little: listing is answered from a listing built once per
/// catalog version.
pub const TOOLS_TTL: Duration = Duration::from_secs(1);

/// How long a list waits, at most, for the host's first load to end (components compiling
/// into a fresh cache, imported servers starting): the shipped ensembles compile in about a
/// second and a Python component in about 5 s, and common MCP clients give a request 60 s.
/// Past it the list has what is loaded so far, and `notifications/tools/list_changed`
/// follows as the rest joins.
pub const FIRST_LIST_WAIT: Duration = Duration::from_secs(30);

/// `subscriptions/listen` streams open at once, at most, on one stdio connection (over
/// HTTP the cap is `max-mcp-sessions`, shared by every client).
pub const MAX_LISTENERS_PER_CONNECTION: usize = 16;

/// How long a stdio connection keeps a conversation nobody uses once its table is full.
const CONVERSATION_IDLE: Duration = Duration::from_secs(30 * 60);

/// What the servers of one transport share: the conversations (dedup scopes named in
/// `_meta`), the tasks, and the count of open `subscriptions/listen` streams with its cap.
pub struct Shared {
    conversations: Conversations,
    tasks: Tasks,
    listeners: AtomicUsize,
    max_listeners: usize,
    /// Over HTTP, the long-lived streams of every kind, which a listen stream is one of.
    streams: Option<Arc<StreamSlots>>,
    /// Turns true when the host's first load has ended ([`FIRST_LIST_WAIT`]).
    first_load: Option<tokio::sync::watch::Receiver<bool>>,
    /// Calls at 2026-07-28 waiting for their clients' answers.
    rounds: Arc<rounds::Rounds>,
    /// Over HTTP, the open sessions whose requests `direct` may answer.
    twins: Option<twins::Twins>,
}

impl Shared {
    /// For the servers of one transport: conversations named `<prefix>-conv-...`, idle after
    /// `idle`; at most `max_listeners` subscriptions open at once.
    pub fn new(prefix: &str, idle: Duration, max_listeners: usize) -> Self {
        Shared {
            conversations: Conversations::new(prefix, idle),
            tasks: Tasks::default(),
            listeners: AtomicUsize::new(0),
            max_listeners,
            streams: None,
            first_load: None,
            rounds: Arc::default(),
            twins: None,
        }
    }

    /// The requests of an open session may be answered directly ([`direct`]): for at most
    /// `max` sessions, each closed by rmcp after `idle` without a request.
    pub fn with_twins(mut self, max: usize, idle: Duration) -> Self {
        self.twins = Some(twins::Twins::new(max, idle));
        self
    }

    /// Lists wait (at most [`FIRST_LIST_WAIT`]) until `loaded` turns true: the first load.
    pub fn with_first_load(mut self, loaded: tokio::sync::watch::Receiver<bool>) -> Self {
        self.first_load = Some(loaded);
        self
    }

    /// Each `subscriptions/listen` stream also takes one of `streams` (`max-http-streams`).
    pub fn with_streams(mut self, streams: Arc<StreamSlots>) -> Self {
        self.streams = Some(streams);
        self
    }
}

/// One open subscription, counted until it ends.
struct Listening<'a>(&'a AtomicUsize);

impl Drop for Listening<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One MCP session's view of the host. Each session (the stdio connection, each HTTP session,
/// each session-less HTTP request) gets its own, and so its own dedup memory and audit
/// session id, unless a request names a conversation ([`scope`]).
pub struct McpServer {
    host: Arc<Host>,
    shared: Arc<Shared>,
    /// The tool listing, shared by the sessions of the host.
    tools: Arc<ToolList>,
    /// The resources this session subscribed to (`resources/subscribe`).
    subscriptions: Arc<Subscriptions>,
    logs: Option<LogRelay>,
    /// The session's id in audit records.
    id: String,
    /// Made at the first request, for its caller: over HTTP the guard lets no other identity
    /// use this session. Shared with the session's twin ([`twins`]).
    session: Arc<std::sync::OnceLock<Arc<Session>>>,
    /// Dropped with the session's server: its twin answers only while this lives.
    alive: Arc<()>,
    /// The session's requests answered directly and still running (for their cancellation).
    in_flight: Arc<twins::InFlight>,
    /// The least severe level this session wants relayed (`logging/setLevel`).
    log_level: Arc<AtomicU8>,
    /// The session's relay tasks (tool list changes, log lines), stopped when it ends: a task
    /// that only noticed at its next send would outlive a quiet session for good.
    tasks: Mutex<Vec<AbortHandle>>,
    /// Turns true when the host's first load has ended; lists wait for it.
    first_load: Option<tokio::sync::watch::Receiver<bool>>,
}

impl Drop for McpServer {
    fn drop(&mut self) {
        let tasks = self.tasks.get_mut().unwrap_or_else(PoisonError::into_inner);
        for task in tasks.drain(..) {
            task.abort();
        }
    }
}

impl McpServer {
    /// A server for one MCP session, named `id` in audit records.
    pub fn new(host: Arc<Host>, id: String) -> Self {
        let shared = Shared::new(&id, CONVERSATION_IDLE, MAX_LISTENERS_PER_CONNECTION);
        McpServer::with_tools(host, Arc::default(), Arc::new(shared), id)
    }

    fn with_tools(host: Arc<Host>, tools: Arc<ToolList>, shared: Arc<Shared>, id: String) -> Self {
        // The host's watch of its resource directories runs from the first session on, so
        // that a change right after a subscription's first request is seen.
        drop(host.resource_events());
        McpServer {
            first_load: shared.first_load.clone(),
            id,
            session: Arc::default(),
            alive: Arc::new(()),
            in_flight: Arc::default(),
            host,
            shared,
            tools,
            subscriptions: Arc::default(),
            logs: None,
            log_level: Arc::new(AtomicU8::new(log::severity(LoggingLevel::Warning))),
            tasks: Mutex::default(),
        }
    }

    /// Lists wait (at most [`FIRST_LIST_WAIT`]) until `loaded` turns true: the first load.
    pub fn with_first_load(mut self, loaded: tokio::sync::watch::Receiver<bool>) -> Self {
        self.first_load = Some(loaded);
        self
    }

    /// Until the host's first load has ended, or [`FIRST_LIST_WAIT`] has passed: a client
    /// that lists right after `initialize` gets the tools, not the empty catalog of a host
    /// still compiling them. Once it has ended (every later reload), nothing waits.
    async fn first_load_ended(&self) {
        let Some(mut loaded) = self.first_load.clone() else {
            return;
        };
        if *loaded.borrow() {
            return;
        }
        let ended = loaded.wait_for(|loaded| *loaded);
        if tokio::time::timeout(FIRST_LIST_WAIT, ended).await.is_err() {
            tracing::info!(
                "the first load has not ended after {} s: tools/list answers with the tools \
                 loaded so far, and notifications/tools/list_changed follows as others join",
                FIRST_LIST_WAIT.as_secs()
            );
        }
    }

    /// A server that shares this one's session (what its requests run with, its identity,
    /// dedup memory, subscriptions and log level) but none of its relay tasks, and does not
    /// keep it alive: its twin, which answers its requests directly ([`twins`]).
    fn twin(&self) -> McpServer {
        McpServer {
            host: self.host.clone(),
            shared: self.shared.clone(),
            tools: self.tools.clone(),
            subscriptions: self.subscriptions.clone(),
            logs: None,
            id: self.id.clone(),
            session: self.session.clone(),
            alive: Arc::new(()),
            in_flight: self.in_flight.clone(),
            log_level: self.log_level.clone(),
            tasks: Mutex::default(),
            first_load: self.first_load.clone(),
        }
    }

    /// Relays the host's log messages from `logs` to this session.
    pub fn with_logs(mut self, logs: LogRelay) -> Self {
        self.logs = Some(logs);
        self
    }

    /// A factory of servers with numbered session ids (`<prefix>-1`, `<prefix>-2`, ...),
    /// sharing `shared`'s conversations and subscription cap.
    pub fn factory(
        host: Arc<Host>,
        logs: Option<LogRelay>,
        prefix: &str,
        shared: Arc<Shared>,
    ) -> impl Fn() -> McpServer + Send + Sync + Clone + 'static {
        let counter = Arc::new(AtomicU64::new(0));
        let prefix = format!("{prefix}-{}", std::process::id());
        let tools = Arc::new(ToolList::default());
        move || {
            let n = counter.fetch_add(1, Ordering::Relaxed) + 1;
            let id = format!("{prefix}-{n}");
            let server = McpServer::with_tools(host.clone(), tools.clone(), shared.clone(), id);
            match &logs {
                Some(logs) => server.with_logs(logs.clone()),
                None => server,
            }
        }
    }

    /// The session a call's results are remembered in: the conversation its `_meta` names
    /// (among the requests with the same credentials), or this server's own.
    fn session_for(&self, context: &RequestContext<RoleServer>) -> Result<Arc<Session>, ErrorData> {
        let caller = caller(context);
        let Some(id) = scope::conversation_id(&context.meta)? else {
            return Ok(self.own_session(caller));
        };
        Ok(self
            .shared
            .conversations
            .session(&self.host, &credentials(context), id, caller))
    }

    /// This server's own session, made for the caller of its first request and following
    /// the grant of each later one.
    fn own_session(&self, caller: Option<Caller>) -> Arc<Session> {
        let session = self.session.get_or_init(|| {
            let session = self.host.session(self.id.clone(), Default::default());
            Arc::new(match &caller {
                Some(caller) => session.for_caller(caller.clone()),
                None => session,
            })
        });
        if let Some(caller) = &caller {
            session.follow(caller);
        }
        Arc::clone(session)
    }
}

/// The caller the HTTP guard found for a request (none over stdio: the local operator).
fn caller(context: &RequestContext<RoleServer>) -> Option<Caller> {
    context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|request| request.extensions.get::<Caller>())
        .cloned()
}

/// Who a request comes from, as far as conversations and tasks go: over HTTP, the identity
/// the guard found (every token of one identity alike, any two identities apart; the local
/// operator's requests told apart by their Authorization header, as when no token is set);
/// over stdio, nobody in particular (the connection's conversations and tasks are its own).
pub(crate) fn credentials(context: &RequestContext<RoleServer>) -> [u8; 32] {
    let parts = context.extensions.get::<http::request::Parts>();
    match parts.and_then(|request| request.extensions.get::<Caller>()) {
        Some(caller) if caller.identity.kind != IdentityKind::Local => caller.identity.key(),
        _ => parts
            .and_then(|request| request.headers.get(http::header::AUTHORIZATION))
            .map_or([0; 32], |value| *blake3::hash(value.as_bytes()).as_bytes()),
    }
}

impl ServerHandler for McpServer {
    /// Every revision rmcp knows: the handshake revisions with their sessions, and
    /// 2026-07-28 without (tool list changes through `subscriptions/listen`).
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::LATEST))
    }

    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_logging()
            .enable_completions()
            .enable_prompts()
            .enable_prompts_list_changed()
            .enable_resources()
            .enable_resources_list_changed()
            .enable_resources_subscribe()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_tasks()
            .build();
        let mut config = ServerConfig::new(capabilities);
        config.server_info = Implementation::new("toolhost", env!("CARGO_PKG_VERSION"));
        config.instructions = Some(
            "Tools run in a sandbox. A failed call returns isError with `<kind>: <message>`; \
             for invalid-arguments the message lists each problem with its JSON pointer."
                .into(),
        );
        config
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        traced::served("tools/list", Target::None, &context, async {
            self.first_load_ended().await;
            let catalog = self.host.catalog().snapshot();
            let cursor = request.as_ref().and_then(|r| r.cursor.as_deref());
            let session = self.own_session(caller(&context));
            let (tools, next) = self.tools.page(&catalog, &session, cursor);
            let mut result = ListToolsResult::with_all_items(tools);
            result.next_cursor = next;
            // 2026-07-28's cache hints (rmcp leaves them out for older revisions). Private: the
            // list is the same for every client, but it is for those that may call (the token),
            // not for a shared cache in between.
            result.ttl_ms = Some(TOOLS_TTL.as_millis() as u64);
            result.cache_scope = Some(CacheScope::Private);
            Ok(result)
        })
        .await
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        traced::served("prompts/list", Target::None, &context, async {
            self.first_load_ended().await;
            let catalog = self.host.catalog().snapshot();
            let session = self.own_session(caller(&context));
            let cursor = request.as_ref().and_then(|r| r.cursor.as_deref());
            let (prompts, next) = prompts::page(&catalog, &session, cursor);
            let mut result = ListPromptsResult::with_all_items(prompts);
            result.next_cursor = next;
            result.ttl_ms = Some(TOOLS_TTL.as_millis() as u64);
            result.cache_scope = Some(CacheScope::Private);
            Ok(result)
        })
        .await
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let name = request.name.clone();
        traced::served("prompts/get", Target::Prompt(&name), &context, async {
            let session = self.own_session(caller(&context));
            let arguments = request.arguments.unwrap_or_default();
            prompts::get(&self.host, &session, &request.name, &arguments)
                .await
                .map(Into::into)
        })
        .await
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        traced::served("resources/list", Target::None, &context, async {
            self.first_load_ended().await;
            let catalog = self.host.catalog().snapshot();
            let session = self.own_session(caller(&context));
            let cursor = request.as_ref().and_then(|r| r.cursor.as_deref());
            let (listed, next) = resources::page(&catalog, &session, cursor).await;
            let mut result = ListResourcesResult::with_all_items(listed);
            result.next_cursor = next;
            result.ttl_ms = Some(TOOLS_TTL.as_millis() as u64);
            result.cache_scope = Some(CacheScope::Private);
            Ok(result)
        })
        .await
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        traced::served("resources/templates/list", Target::None, &context, async {
            self.first_load_ended().await;
            let catalog = self.host.catalog().snapshot();
            let session = self.own_session(caller(&context));
            let templates = resources::templates(&catalog, &session).await;
            Ok(ListResourceTemplatesResult::with_all_items(templates))
        })
        .await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri.clone();
        traced::served("resources/read", Target::Resource(&uri), &context, async {
            let session = self.own_session(caller(&context));
            let contents = self
                .host
                .read_resource(&session, &request.uri)
                .await
                .map_err(resources::refusal)?;
            let contents = contents.into_iter().map(prompts::resource).collect();
            Ok(ReadResourceResult::new(contents).into())
        })
        .await
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let uri = request.uri.clone();
        traced::served(
            "resources/subscribe",
            Target::Resource(&uri),
            &context,
            async {
                let catalog = self.host.catalog().snapshot();
                let session = self.own_session(caller(&context));
                self.subscriptions
                    .subscribe(&catalog, &session, &request.uri)
                    .await
            },
        )
        .await
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.subscriptions.unsubscribe(&request.uri);
        Ok(())
    }

    /// Values of a prompt's argument (its `values`), or paths of a resource set's template.
    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let session = self.own_session(caller(&context));
        let completed = prompts::complete(&self.host, &session, &request);
        traced::served("completion/complete", Target::None, &context, completed).await
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        calls::call_tool(self, request, context).await
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        self.shared
            .tasks
            .get(credentials(&context), &request.task_id)
    }

    /// toolhost never asks for input during a task: responses are ignored, as the Tasks
    /// extension says for keys that are not outstanding.
    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.shared
            .tasks
            .get(credentials(&context), &request.task_id)
            .map(drop)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.shared
            .tasks
            .cancel(credentials(&context), &request.task_id)
    }

    /// List changes (tools, prompts, resources) and up to [`resources::MAX_SUBSCRIPTIONS`]
    /// resources' updates are what a client may subscribe to.
    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let uris = requested.resource_subscriptions.iter().flatten();
        let uris = uris
            .filter(|uri| uri.len() <= toolhost_core::resources::MAX_URI_BYTES)
            .take(resources::MAX_SUBSCRIPTIONS)
            .cloned();
        Some(
            SubscriptionFilter::builder()
                .tools_list_changed()
                .prompts_list_changed()
                .resources_list_changed()
                .resource_subscriptions(uris)
                .build(),
        )
    }

    /// Sends list changes and the accepted resources' updates on the stream, until the
    /// client cancels it or the host shuts down (then the stream ends with its final result).
    /// Ended with an error past the cap of open streams.
    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        notify::listen(self, context).await
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.log_level
            .store(log::severity(request.level), Ordering::Relaxed);
        Ok(())
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        // Over HTTP, the session is open now: its requests may be answered directly.
        let session_id = (context.extensions.get::<http::request::Parts>())
            .and_then(|request| request.headers.get("mcp-session-id"))
            .and_then(|id| id.to_str().ok());
        if let (Some(twins), Some(id)) = (&self.shared.twins, session_id) {
            let twin = twins::Twin::new(self.twin(), context.peer.clone(), &self.alive);
            twins.register(id, twin);
        }
        let mut tasks = self.tasks.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(logs) = &self.logs {
            tasks.push(relay_logs(
                logs.subscribe(),
                context.peer.clone(),
                self.log_level.clone(),
                self.id.clone(),
            ));
        }
        tasks.push(notify::relay_changes(&self.host, context.peer.clone()));
        tasks.push(notify::relay_updates(self, context.peer.clone()));
    }

    async fn on_cancelled(
        &self,
        notification: rmcp::model::CancelledNotificationParam,
        _context: NotificationContext<RoleServer>,
    ) {
        // rmcp cancels the requests it runs itself; these are the ones answered directly.
        if let Some(id) = &notification.request_id {
            self.in_flight.cancel(id);
        }
    }
}
