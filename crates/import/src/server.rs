//! server: one imported MCP server ([`McpImport`]): its session (started when first needed,
//! started again after it dies, with a doubling backoff while starting fails), its tools and
//! the calls made on it, as core's [`Backend`].

use crate::Watcher;
use crate::connection::Connection;
use crate::{sign_in, talk};
use rmcp::RoleClient;
use rmcp::model::{CallToolRequestParams, CallToolResponse, ProtocolVersion};
use rmcp::model::{GetPromptResult, Prompt, ReadResourceResult, Resource, ResourceTemplate};
use rmcp::service::{ClientInitializeError, ClientLifecycleMode, ClientServiceExt, RunningService};
use serde_json::Value;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use toolhost_contract::{BoxFuture, RunError, SourceHash, ToolFailure, ToolResult};
use toolhost_core::backend::{Backend, BackendCall, ToolHints, ToolOffer};
use toolhost_core::import::{ImportedServer, McpError};

use crate::stderr::forward_stderr;
use crate::trace_headers::TraceHeaders;
use tokio::sync::broadcast;
use toolhost_config::draft::{McpSpec, McpTarget};

/// The most bytes of tool names, descriptions and schemas taken from one server, however many
/// pages it spreads them over: as much as one component may describe.
pub const MAX_LISTED_BYTES: usize = toolhost_runtime::MAX_DESCRIBED_BYTES;

/// A task stopped when this is dropped.
pub(crate) struct AbortOnDrop(pub(crate) tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One imported MCP server.
pub struct McpImport {
    pub(crate) spec: McpSpec,
    pub(crate) hash: SourceHash,
    /// Where a person's sign-in left its tokens, for a server that needs one.
    pub(crate) sign_in_dir: Option<std::path::PathBuf>,
    pub(crate) connection: tokio::sync::Mutex<Connection>,
    /// The token file of a person's sign-in as last looked at (its time and size; `None`
    /// when absent), so that a session reads it again only when it changed.
    pub(crate) sign_in_seen: Mutex<Option<crate::connection::FileStamp>>,
    /// True while a session is open (as last seen: set when one starts, cleared when one
    /// fails or is found closed).
    pub(crate) up: std::sync::atomic::AtomicBool,
    /// Where its `tools/list_changed` notifications go.
    pub(crate) changes: broadcast::Sender<String>,
    /// True while a start in the background is under way.
    pub(crate) starting: std::sync::atomic::AtomicBool,
    /// True while a reload is scheduled for the end of a failed start's backoff.
    pub(crate) retry_scheduled: std::sync::atomic::AtomicBool,
    /// Told (its description) when a start in the background ended, however it ended.
    pub(crate) started: broadcast::Sender<String>,
    /// Its resources' updates, as its session reports them ([`McpImport::resource_updates`]).
    pub(crate) updates: broadcast::Sender<Option<String>>,
    /// The URIs it was asked to report updates of (`resources/subscribe`), at most
    /// [`offers::MAX_UPSTREAM_SUBSCRIPTIONS`].
    pub(crate) subscribed: Mutex<std::collections::HashSet<String>>,
    /// With a 2026-07-28 server, the stream that reports the subscribed URIs' updates.
    pub(crate) listening: Mutex<Option<AbortOnDrop>>,
    /// The calls running, each with its way back to its caller ([`talk`]).
    pub(crate) routes: Arc<talk::Routes>,
}

impl std::fmt::Debug for McpImport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpImport")
            .field("server", &self.spec.describe())
            .finish_non_exhaustive()
    }
}

/// What the catalog takes of a server's tool.
fn offer(tool: rmcp::model::Tool) -> ToolOffer {
    let annotations = tool.annotations.as_ref();
    // The hints count only when the server sets them: MCP's default for an absent
    // destructiveHint (true) would make nearly every tool ask.
    let hints = ToolHints {
        destructive: annotations.and_then(|a| a.destructive_hint) == Some(true),
        read_only: annotations.and_then(|a| a.read_only_hint) == Some(true),
    };
    ToolOffer {
        alias: None,
        output: None,
        name: tool.name.to_string(),
        description: tool.description.as_deref().unwrap_or_default().into(),
        input_schema: Value::Object((*tool.input_schema).clone()).to_string(),
        hints,
    }
}

impl McpImport {
    pub fn spec(&self) -> &McpSpec {
        &self.spec
    }

    /// An error of this server, for `reason` (a dependency's type paths taken out).
    pub(crate) fn error(&self, reason: impl Into<String>) -> McpError {
        let reason: String = reason.into();
        McpError {
            server: self.spec.describe(),
            reason: toolhost_contract::without_type_paths(&reason).into_owned(),
        }
    }

    /// Starts the server (or connects to it) and opens its MCP session: `server/discover`
    /// first, and the `initialize` handshake for a server that does not know it, or that
    /// answers it with only the handshake revisions (then on a new process or connection:
    /// a failed probe may leave the first one in any state).
    /// For a server a person signs in to, `signed_in_as` is set to the client whose tokens
    /// the session uses.
    pub(crate) async fn start(
        &self,
        signed_in_as: &mut Option<String>,
    ) -> Result<(RunningService<RoleClient, Watcher>, Watcher), String> {
        let watcher = Watcher {
            server: self.spec.describe(),
            changes: self.changes.clone(),
            updates: self.updates.clone(),
            routes: Arc::clone(&self.routes),
            asks: self.spec.talk,
            logged: Arc::default(),
        };
        // A server that may ask the caller (sampling, elicitation) is met with the handshake:
        // at 2026-07-28 a server cannot send a request during a call, which toolhost does
        // not pass on in the other form yet (`InputRequired`).
        let auto = if self.spec.talk.sampling || self.spec.talk.elicitation {
            ClientLifecycleMode::Initialize
        } else {
            ClientLifecycleMode::Auto {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                legacy_version: None,
            }
        };
        let handshake = |e: ClientInitializeError| {
            format!("did not complete the MCP handshake: {}", crate::said(&e))
        };
        let service = match self.connect(&watcher, auto, signed_in_as).await? {
            Err(ClientInitializeError::NoCompatibleProtocolVersion {
                server_supported, ..
            }) if server_supported.iter().any(ProtocolVersion::has_initialize) => {
                let initialize =
                    self.connect(&watcher, ClientLifecycleMode::Initialize, signed_in_as);
                initialize.await?.map_err(handshake)
            }
            // A server that answers `server/discover` with something else than its result
            // (an older server that answers every method it does not know with `{}`) is
            // asked again with `initialize`; both answers are said if that fails too.
            Err(discover @ ClientInitializeError::ExpectedInitResult(_)) => {
                let initialize =
                    self.connect(&watcher, ClientLifecycleMode::Initialize, signed_in_as);
                initialize.await?.map_err(|e| {
                    format!(
                        "{} (and to server/discover: {})",
                        handshake(e),
                        crate::said(&discover)
                    )
                })
            }
            Err(e) => match sign_in::insufficient_scope(&e) {
                Some(required) => Err(format!(
                    "refused the MCP handshake: {}",
                    self.refused_for_scope(&required)
                )),
                None => Err(handshake(e)),
            },
            Ok(service) => Ok(service),
        }?;
        Ok((service, watcher))
    }

    /// One attempt at a session with `lifecycle`: `Err` when the server could not be
    /// started or reached, `Ok(Err)` when it was but the session did not open.
    async fn connect(
        &self,
        watcher: &Watcher,
        lifecycle: ClientLifecycleMode,
        signed_in_as: &mut Option<String>,
    ) -> Result<Result<RunningService<RoleClient, Watcher>, ClientInitializeError>, String> {
        match &self.spec.target {
            McpTarget::Command {
                program,
                args,
                env,
                cwd,
            } => {
                let mut command = tokio::process::Command::new(program);
                command
                    .args(args)
                    .env_clear()
                    .envs(env.iter().cloned())
                    .current_dir(cwd)
                    .kill_on_drop(true);
                let (transport, stderr) = rmcp::transport::TokioChildProcess::builder(command)
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .map_err(|e| format!("could not be started: {e}"))?;
                if let Some(stderr) = stderr {
                    forward_stderr(self.spec.describe(), stderr);
                }
                Ok(watcher
                    .clone()
                    .serve_with_lifecycle(transport, lifecycle)
                    .await)
            }
            McpTarget::Url(url) => {
                toolhost_contract::tls::install_provider();
                let config = rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(url.clone());
                let Some(credentials) = &self.spec.oauth else {
                    let transport = rmcp::transport::StreamableHttpClientTransport::with_client(
                        crate::trace_headers::plain()?,
                        config,
                    );
                    return Ok(watcher
                        .clone()
                        .serve_with_lifecycle(transport, lifecycle)
                        .await);
                };
                if let toolhost_config::draft::McpCredential::SignIn { .. } =
                    &credentials.credential
                {
                    let dir = (self.sign_in_dir.as_deref())
                        .ok_or("needs sign-in, and this host keeps no tokens (no state folder)")?;
                    let (client, client_id) = sign_in::client(url, credentials, dir).await?;
                    *signed_in_as = Some(client_id);
                    let transport = rmcp::transport::StreamableHttpClientTransport::with_client(
                        TraceHeaders(client),
                        config,
                    );
                    return Ok(watcher
                        .clone()
                        .serve_with_lifecycle(transport, lifecycle)
                        .await);
                }
                let client = crate::oauth::client(url, credentials).await?;
                let transport = rmcp::transport::StreamableHttpClientTransport::with_client(
                    TraceHeaders(client),
                    config,
                );
                Ok(watcher
                    .clone()
                    .serve_with_lifecycle(transport, lifecycle)
                    .await)
            }
        }
    }

    /// Forgets `service` after it failed, so that the next call starts the server again.
    async fn forget(&self, service: &Arc<RunningService<RoleClient, Watcher>>) {
        let mut connection = self.connection.lock().await;
        if connection
            .service
            .as_ref()
            .is_some_and(|s| Arc::ptr_eq(s, service))
        {
            connection.service = None;
            self.up.store(false, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// The server's tools, as the catalog takes them.
    pub async fn tools(&self) -> Result<Vec<ToolOffer>, McpError> {
        let service = self.session().await?;
        let max = self.spec.max_tools;
        // Page by page, so that a server that lists too many, or too much, is stopped, not
        // read to the end.
        let list = async {
            let mut tools = Vec::new();
            let mut bytes = 0usize;
            let mut cursor = None;
            loop {
                let page = service
                    .list_tools(Some(
                        rmcp::model::PaginatedRequestParams::default().with_cursor(cursor),
                    ))
                    .await?;
                // Each page becomes what the catalog keeps (name, description, schema, hints)
                // at once: the rest of a tool (output schema, icons, `_meta`) is dropped with
                // the page, and what is kept is what is counted.
                for tool in page.tools {
                    let offer = offer(tool);
                    bytes = bytes.saturating_add(
                        offer.name.len() + offer.description.len() + offer.input_schema.len(),
                    );
                    tools.push(offer);
                }
                if tools.len() > max {
                    return Ok(Err(format!(
                        "offers more than {max} tools ({} so far), the most this ensemble takes \
                         (set `max-tools` in [ensemble.mcp] to take more)",
                        tools.len()
                    )));
                }
                if bytes > MAX_LISTED_BYTES {
                    return Ok(Err(format!(
                        "lists more than {} MiB of tool names, descriptions and schemas ({} \
                         tools so far), the most the host keeps of one server",
                        MAX_LISTED_BYTES >> 20,
                        tools.len()
                    )));
                }
                match page.next_cursor {
                    Some(next) => cursor = Some(next),
                    None => return Ok(Ok(tools)),
                }
            }
        };
        let listed: Result<Result<Vec<_>, String>, rmcp::ServiceError> =
            tokio::time::timeout(self.spec.startup_timeout, list)
                .await
                .map_err(|_| self.error("did not list its tools in time"))?;
        let tools = match listed {
            Ok(Ok(tools)) => tools,
            Ok(Err(too_much)) => return Err(self.error(too_much)),
            Err(e) => {
                if let Some(why) = self.refused_sign_in(&service, &e).await {
                    return Err(why);
                }
                self.forget(&service).await;
                return Err(self.error(format!("could not list its tools: {e}")));
            }
        };
        Ok(tools)
    }

    /// Calls `tool` with `arguments` (a JSON object) within `timeout`, and returns its items.
    /// What a `403 insufficient_scope` for `required` tells the caller: for a sign-in, what
    /// [`sign_in::step_up`] says; for client credentials, the scopes to add.
    fn refused_for_scope(&self, required: &[String]) -> String {
        match sign_in_target(&self.spec, self.sign_in_dir.as_deref()) {
            Some((url, dir)) => sign_in::step_up(dir, url, required),
            _ => format!(
                "it asks for scope `{}`, which this host's token was not granted (`oauth.scopes` \
                 names the scopes asked for)",
                required.join(" ")
            ),
        }
    }

    async fn call_tool(
        &self,
        tool: &str,
        arguments: &Value,
        timeout: Duration,
        max_output_bytes: usize,
        mut route: talk::Registered,
    ) -> Result<ToolResult, RunError> {
        let started = Instant::now();
        let crashed = |message: String| RunError::Crashed { message };
        let service = tokio::time::timeout(timeout, self.session())
            .await
            .map_err(|_| RunError::Timeout { limit: timeout })?
            .map_err(unavailable)?;
        let mut params = CallToolRequestParams::new(tool.to_string());
        if let Value::Object(map) = arguments {
            params = params.with_arguments(map.clone());
        }
        // The call's trace goes on in the imported server: a client span, its context in the
        // request's `_meta` (SEP-414).
        let traced = toolhost_core::trace::step(|| {
            use toolhost_core::trace::{KeyValue, SpanBuilder, SpanKind};
            SpanBuilder::from_name(format!("tools/call {tool}"))
                .with_kind(SpanKind::Client)
                .with_attributes([
                    KeyValue::new("mcp.method.name", "tools/call"),
                    KeyValue::new("gen_ai.tool.name", tool.to_string()),
                    KeyValue::new("gen_ai.operation.name", "execute_tool"),
                ])
        });
        params.meta = (traced.in_scope(toolhost_core::trace::injected)).map(Into::into);
        let left = timeout.saturating_sub(started.elapsed());
        // Sent with its handle, to learn the progress token rmcp gives the request; dropping
        // the wait (a timeout, a cancelled call) sends the server `notifications/cancelled`.
        let asked = async {
            let request = rmcp::model::ClientRequest::CallToolRequest(
                rmcp::model::CallToolRequest::new(params),
            );
            let options = rmcp::service::PeerRequestOptions::no_options();
            let handle = service
                .peer()
                .send_request_with_option(request, options)
                .await?;
            route.bind(&handle.progress_token.0);
            let mut abandoned = talk::Abandoned::new(service.peer().clone(), handle.id.clone());
            let result = handle.await_response().await;
            abandoned.disarm();
            match result? {
                rmcp::model::ServerResult::CallToolResult(result) => {
                    Ok(CallToolResponse::Complete(result))
                }
                _ => Ok(CallToolResponse::Complete(
                    rmcp::model::CallToolResult::error(vec![rmcp::model::ContentBlock::text(
                        "the server asked for input or deferred the call, which toolhost does \
                         not support",
                    )]),
                )),
            }
        };
        let sent = Instant::now();
        let answer: Result<CallToolResponse, rmcp::ServiceError> =
            tokio::time::timeout(left, traced.carry(asked))
                .await
                .map_err(|_| RunError::Timeout { limit: timeout })?;
        let failed = match &answer {
            Ok(CallToolResponse::Complete(result)) if result.is_error == Some(true) => {
                Some("tool_error")
            }
            Ok(_) => None,
            Err(_) => Some("transport_error"),
        };
        let seconds = sent.elapsed().as_secs_f64();
        toolhost_core::trace::measured(false, seconds, "tools/call", Some(tool), failed);
        let result = match answer {
            Ok(CallToolResponse::Complete(result)) => result,
            Ok(_) => {
                return Err(crashed(format!(
                    "MCP server `{}` asked for input or deferred the call, which toolhost does not support",
                    self.spec.describe()
                )));
            }
            Err(e) => {
                if let Some(why) = self.refused_sign_in(&service, &e).await {
                    return Err(unavailable(why));
                }
                if let Some(required) = sign_in::insufficient_scope(&e) {
                    // rmcp ends the session at a 403: the next call opens another.
                    self.forget(&service).await;
                    return Err(crashed(format!(
                        "MCP server `{}` refused the call: {}",
                        self.spec.describe(),
                        self.refused_for_scope(&required)
                    )));
                }
                if service.is_closed() || matches!(e, rmcp::ServiceError::TransportClosed) {
                    self.forget(&service).await;
                    return Err(crashed(format!(
                        "MCP server `{}` exited during the call; it will be started again on the next call",
                        self.spec.describe()
                    )));
                }
                return Err(crashed(format!(
                    "MCP server `{}` failed the call: {}",
                    self.spec.describe(),
                    crate::said(&e)
                )));
            }
        };
        let failed = result.is_error == Some(true);
        let result = toolhost_core::content::from_mcp(result);
        if failed {
            return Err(RunError::Tool(ToolFailure::Failed(
                result.text().into_owned(),
            )));
        }
        let bytes = result.bytes();
        if bytes > max_output_bytes {
            return Err(RunError::OutputLimit {
                bytes,
                limit: max_output_bytes,
            });
        }
        Ok(result)
    }
}

/// A call's error for a server that could not be used: "needs sign-in" where a person has to
/// sign in, else a crash of the server.
fn unavailable(error: McpError) -> RunError {
    let message = error.to_string();
    match error
        .reason
        .starts_with(toolhost_core::import::NEEDS_SIGN_IN)
    {
        true => RunError::NeedsSignIn { message },
        false => RunError::ServerUnavailable { message },
    }
}

/// The URL of the import `spec` describes and the folder of its tokens (`dir`), if a person
/// signs in to it.
pub(crate) fn sign_in_target<'a>(
    spec: &'a McpSpec,
    dir: Option<&'a Path>,
) -> Option<(&'a str, &'a Path)> {
    use toolhost_config::draft::McpCredential;
    match (
        &spec.target,
        spec.oauth.as_ref().map(|o| &o.credential),
        dir,
    ) {
        (McpTarget::Url(url), Some(McpCredential::SignIn { .. }), Some(dir)) => Some((url, dir)),
        _ => None,
    }
}

impl Backend for McpImport {
    fn call<'a>(&'a self, call: BackendCall<'a>) -> BoxFuture<'a, Result<ToolResult, RunError>> {
        Box::pin(async move {
            // Progress and questions go back to this call's caller, within a component
            // call's bounds; the server may ask only what `[ensemble.mcp]` grants.
            let budget = toolhost_runtime::talk::TalkBudget::for_import(
                self.spec.talk,
                Arc::clone(call.link),
            );
            let route = self.routes.register(call.invoker, call.session, budget);
            self.call_tool(
                call.tool,
                call.arguments,
                call.limits.timeout,
                call.limits.max_output_bytes,
                route,
            )
            .await
        })
    }

    fn source_hash(&self) -> SourceHash {
        self.hash
    }

    fn watched_file(&self) -> Option<&Path> {
        None
    }

    fn describe(&self) -> String {
        format!("mcp: {}", self.spec.describe())
    }

    fn is_up(&self) -> Option<bool> {
        // A session that ended since it was last used is down now, if the state can be read
        // without waiting (a start in progress holds it: then as last seen).
        if let Ok(connection) = self.connection.try_lock() {
            let up = (connection.service.as_ref()).is_some_and(|service| alive(service));
            self.up.store(up, std::sync::atomic::Ordering::Relaxed);
        }
        Some(self.up.load(std::sync::atomic::Ordering::Relaxed))
    }
}

#[async_trait::async_trait]
impl ImportedServer for McpImport {
    fn spec(&self) -> &McpSpec {
        &self.spec
    }

    async fn tools(&self) -> Result<Vec<ToolOffer>, McpError> {
        McpImport::tools(self).await
    }

    async fn prompts(&self) -> Result<Vec<Prompt>, McpError> {
        McpImport::prompts(self).await
    }

    async fn get_prompt(
        &self,
        name: &str,
        arguments: &serde_json::Map<String, Value>,
    ) -> Result<GetPromptResult, String> {
        McpImport::get_prompt(self, name, arguments).await
    }

    async fn has_resources(&self) -> bool {
        McpImport::has_resources(self).await
    }

    async fn resources(&self) -> Result<(Vec<Resource>, bool), McpError> {
        McpImport::resources(self).await
    }

    async fn resource_templates(&self) -> Result<Vec<ResourceTemplate>, McpError> {
        McpImport::resource_templates(self).await
    }

    async fn read_resource(&self, uri: &str) -> Result<ReadResourceResult, String> {
        McpImport::read_resource(self, uri).await
    }

    async fn subscribe(&self, uri: &str) -> bool {
        McpImport::subscribe(self, uri).await
    }

    fn resource_updates(&self) -> broadcast::Receiver<Option<String>> {
        McpImport::resource_updates(self)
    }
}

/// True while `service`'s session runs: not cancelled, and its loop still reading (it ends
/// when the server's process exits or its connection closes).
pub(crate) fn alive(service: &RunningService<RoleClient, Watcher>) -> bool {
    !service.is_closed() && !service.peer().is_transport_closed()
}
