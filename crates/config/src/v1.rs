//! `schema-version = 1` of the descriptor files, as raw serde types: they only deserialize.
//! Defaults are applied, paths resolved and schemas compiled later, in `resolve`.

use super::names::{
    Access, AllowedHost, ApprovalTimeoutS, BackendToolName, Blake3Hex, CacheKeep, ChatMib,
    CompileCpuSeconds, CompileMemoryMib, CompileTimeoutS, CoreInstancesPerCall, DedupMib,
    DedupMode, DescribeTimeoutMs, DrainTimeoutS, EnsembleName, EnvVarName, GuestPath,
    HttpBodyTimeoutS, HttpHeaderTimeoutMs, KeepResidentMib, MaxAttempts, MaxBlobMib,
    MaxCallsPerAnswer, MaxComponentMib, MaxConcurrency, MaxConcurrentCalls, MaxConversations,
    MaxDatabaseMib, MaxHttpConnections, MaxHttpStreams, MaxIterations, MaxManifestKib,
    MaxMcpSessions, MaxOutputBytes, MaxParallelCalls, MaxParallelCompiles, MaxPrepared,
    MaxPreparedMib, MaxQueue, MaxResponseBytes, MaxResponseMib, MaxRuns, MaxTokens, MaxTools,
    McpSessionIdleS, MemoriesPerCall, MemoryMib, Prepared, PullTimeoutS, RequestTimeoutS,
    ResolveTimeoutMs, RetryDelayMs, TablesPerCall, TimeoutMs, ToolName,
};
use super::names::{ArgumentName, MaxFileKib, MaxResourceFiles, UriPrefix};
pub use crate::fleet::FleetSection;
use schemars::JsonSchema;
use serde::Deserialize;
use toml::Spanned;

fn yes() -> bool {
    true
}

/// `ensembles/<name>.toml`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct EnsembleFile {
    #[schemars(range(min = 1, max = 1))]
    pub schema_version: u32,
    pub ensemble: EnsembleSection,
    #[serde(default)]
    pub defaults: Defaults,
    #[serde(default)]
    pub grants: Grants,
    #[serde(default)]
    #[schemars(with = "Vec<InvokerEntry>")]
    pub invokers: Vec<Spanned<InvokerEntry>>,
    /// Prompts written here, offered to MCP clients (`prompts/list`, `prompts/get`).
    #[serde(default)]
    #[schemars(with = "Vec<PromptEntry>")]
    pub prompts: Vec<Spanned<PromptEntry>>,
    /// Directories whose files are offered as resources (`resources/list`, `resources/read`).
    #[serde(default)]
    #[schemars(with = "Vec<ResourcesEntry>")]
    pub resources: Vec<Spanned<ResourcesEntry>>,
}

/// `[ensemble]`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct EnsembleSection {
    #[schemars(with = "EnsembleName")]
    pub name: Spanned<EnsembleName>,
    #[serde(default = "yes")]
    pub enabled: bool,
    pub description: Option<String>,
    #[schemars(with = "Option<String>")]
    pub component: Option<Spanned<String>>,
    #[schemars(with = "Option<Blake3Hex>")]
    pub blake3: Option<Spanned<Blake3Hex>>,
    /// Its components must be `oci://` references signed by a key of `[trust]`.
    #[serde(default)]
    pub require_signature: bool,
    #[schemars(with = "Option<ToolName>")]
    pub prefix: Option<Spanned<ToolName>>,
    /// An MCP server whose tools this ensemble imports, instead of a component.
    #[schemars(with = "Option<McpSection>")]
    pub mcp: Option<Spanned<McpSection>>,
}

/// `[ensemble.mcp]`: a server started as a child process (`command`, `args`, `env`) or
/// reached over streamable HTTP (`url`).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct McpSection {
    #[schemars(with = "Option<String>")]
    pub command: Option<Spanned<String>>,
    #[serde(default)]
    pub args: Vec<String>,
    /// Variables set for the server process (its environment is otherwise empty but for
    /// `PATH` and what `inherit-env` names).
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
    /// Host variables passed through with the host's values (tokens, say), so that their
    /// values need not be written here.
    #[serde(default)]
    #[schemars(with = "Vec<EnvVarName>")]
    pub inherit_env: Vec<Spanned<EnvVarName>>,
    #[schemars(with = "Option<String>")]
    pub url: Option<Spanned<String>>,
    /// How long starting the server and listing its tools may take (default 10000).
    pub startup_timeout_ms: Option<TimeoutMs>,
    /// The most tools taken from the server (default 1000); more refuses the ensemble.
    pub max_tools: Option<MaxTools>,
    /// A server (`url`) that needs an OAuth access token: toolhost gets one by client
    /// credentials from the authorization server the server's metadata names.
    #[schemars(with = "Option<McpOauthSection>")]
    pub oauth: Option<Spanned<McpOauthSection>>,
    /// Whether the server may sample the model of whoever calls its tools (default false).
    #[serde(default)]
    pub sampling: bool,
    /// Whether the server may ask the person behind whoever calls its tools (default false).
    #[serde(default)]
    pub elicitation: bool,
}

/// `[ensemble.mcp] oauth`: this host's client at the imported server's authorization server,
/// registered there beforehand. It proves itself with a secret (`client-secret-env`) or a
/// private key (`private-key-env`, `private_key_jwt`); neither is ever written here, only the
/// variable that holds it.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct McpOauthSection {
    /// This host's client ID there: registered beforehand (required for client credentials;
    /// with `sign-in`, left out to register dynamically).
    pub client_id: Option<String>,
    /// A person signs in once (`toolhost login ENSEMBLE`: the authorization code flow with
    /// PKCE), and the host keeps and renews the tokens; without it the host gets its tokens
    /// by client credentials.
    #[serde(default)]
    pub sign_in: bool,
    /// With `sign-in`: the HTTPS URL of this host's client ID metadata document, published by
    /// the operator; an authorization server that takes such documents knows the client by
    /// it, without registering one.
    #[schemars(with = "Option<String>")]
    pub client_metadata_url: Option<Spanned<String>>,
    /// The variable that holds the client's secret (`client_secret_post`, or
    /// `client_secret_basic` where that is all the authorization server takes).
    #[schemars(with = "Option<EnvVarName>")]
    pub client_secret_env: Option<Spanned<EnvVarName>>,
    /// The variable that holds the client's private key, PEM (`private_key_jwt`, RFC 7523:
    /// a signed assertion instead of a secret).
    #[schemars(with = "Option<EnvVarName>")]
    pub private_key_env: Option<Spanned<EnvVarName>>,
    /// The assertion's signature algorithm: ES256 (default), ES384, RS256, RS384 or RS512.
    #[schemars(with = "Option<String>")]
    pub algorithm: Option<Spanned<String>>,
    /// Scopes asked for (default: none named; the authorization server decides).
    #[serde(default)]
    pub scopes: Vec<String>,
}

/// `[defaults]`: what each invoker inherits unless it sets its own.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Defaults {
    pub timeout_ms: Option<TimeoutMs>,
    pub memory_mib: Option<MemoryMib>,
    pub max_output_bytes: Option<MaxOutputBytes>,
    pub max_response_bytes: Option<MaxResponseBytes>,
    pub max_concurrency: Option<MaxConcurrency>,
    pub max_queue: Option<MaxQueue>,
    /// Instances kept instantiated ahead of calls (default: one if the component takes
    /// 250 µs or more to instantiate, none otherwise).
    pub prepared: Option<Prepared>,
    pub dedup: Option<DedupMode>,
    /// The capabilities of the tools the ensemble offers without `[[invokers]]` (every
    /// export of its component), each within `[grants]`; written invokers name their own
    /// (an ensemble with invokers is warned that these give nothing).
    #[schemars(with = "Option<Capabilities>")]
    pub capabilities: Option<Spanned<Capabilities>>,
}

/// `[grants]`: the ceiling of what the ensemble's invokers may be given.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Grants {
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub network: Vec<Spanned<String>>,
    #[serde(default)]
    #[schemars(with = "Vec<FileGrant>")]
    pub files: Vec<Spanned<FileGrant>>,
    #[serde(default)]
    #[schemars(with = "Vec<EnvVarName>")]
    pub env: Vec<Spanned<EnvVarName>>,
    /// Whether invokers may sample the caller's model (`toolhost:plugin@0.2.0`'s `sample`).
    #[schemars(with = "Option<bool>")]
    pub sampling: Option<Spanned<bool>>,
    /// Whether invokers may ask the person behind the caller (`elicit`).
    #[schemars(with = "Option<bool>")]
    pub elicitation: Option<Spanned<bool>>,
    /// Settings a component reads through `wasi:config/store`, by key: a value, or
    /// `{ env = "VAR" }` to take it from the host's environment (never shown).
    #[serde(default)]
    #[schemars(with = "std::collections::BTreeMap<String, ConfigGrant>")]
    pub config: std::collections::BTreeMap<String, Spanned<toml::Value>>,
}

/// A setting granted in `[grants] config`: its value, or the host variable that holds it.
#[derive(Debug, JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum ConfigGrant {
    Value(String),
    Env {
        #[schemars(with = "EnvVarName")]
        env: String,
    },
}

/// One granted directory: `{ host = "data/", guest = "/data", access = "read" }`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct FileGrant {
    #[schemars(with = "String")]
    pub host: Spanned<String>,
    pub guest: GuestPath,
    pub access: Access,
}

/// One `[[invokers]]` entry: `{ source = "web/fetch.toml" }`; the tables of an invoker
/// file inline (`invoker`, `limits`, `capabilities`, `arguments`); or flat, the `[invoker]`
/// keys written in the entry itself (`name = "read_file"`, `description = ...`) beside
/// `limits`, `capabilities` and `arguments`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct InvokerEntry {
    #[schemars(with = "Option<String>")]
    pub source: Option<Spanned<String>>,
    pub invoker: Option<InvokerSection>,
    // The flat form: the keys of `[invoker]`, each optional here (`name` is then required).
    #[schemars(with = "Option<ToolName>")]
    pub name: Option<Spanned<ToolName>>,
    #[schemars(with = "Option<BackendToolName>")]
    pub tool: Option<Spanned<BackendToolName>>,
    #[schemars(with = "Option<bool>")]
    pub enabled: Option<Spanned<bool>>,
    #[schemars(with = "Option<String>")]
    pub description: Option<Spanned<String>>,
    #[schemars(with = "Option<bool>")]
    pub destructive: Option<Spanned<bool>>,
    #[schemars(with = "Option<DedupMode>")]
    pub dedup: Option<Spanned<DedupMode>>,
    #[schemars(with = "Option<String>")]
    pub component: Option<Spanned<String>>,
    #[schemars(with = "Option<Blake3Hex>")]
    pub blake3: Option<Spanned<Blake3Hex>>,
    pub limits: Option<Limits>,
    pub capabilities: Option<Capabilities>,
    #[schemars(with = "Option<serde_json::Value>")]
    pub arguments: Option<Spanned<toml::Value>>,
}

/// `ensembles/<ensemble>/<invoker>.toml`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct InvokerFile {
    #[schemars(range(min = 1, max = 1))]
    pub schema_version: u32,
    pub invoker: InvokerSection,
    #[serde(default)]
    pub limits: Limits,
    #[serde(default)]
    pub capabilities: Capabilities,
    #[schemars(with = "Option<serde_json::Value>")]
    pub arguments: Option<Spanned<toml::Value>>,
}

/// `[invoker]`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct InvokerSection {
    #[schemars(with = "ToolName")]
    pub name: Spanned<ToolName>,
    #[schemars(with = "Option<BackendToolName>")]
    pub tool: Option<Spanned<BackendToolName>>,
    #[serde(default = "yes")]
    pub enabled: bool,
    pub description: Option<String>,
    #[serde(default)]
    pub destructive: bool,
    pub dedup: Option<DedupMode>,
    #[schemars(with = "Option<String>")]
    pub component: Option<Spanned<String>>,
    #[schemars(with = "Option<Blake3Hex>")]
    pub blake3: Option<Spanned<Blake3Hex>>,
}

/// `[limits]` of an invoker.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Limits {
    pub timeout_ms: Option<TimeoutMs>,
    pub memory_mib: Option<MemoryMib>,
    pub max_output_bytes: Option<MaxOutputBytes>,
    pub max_response_bytes: Option<MaxResponseBytes>,
    pub max_concurrency: Option<MaxConcurrency>,
    pub max_queue: Option<MaxQueue>,
    /// Instances kept instantiated ahead of calls (default: one if the component takes
    /// 250 µs or more to instantiate, none otherwise).
    pub prepared: Option<Prepared>,
}

/// `[capabilities]`: what the invoker needs; each must lie within the ensemble's grants.
#[derive(Debug, Default, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Capabilities {
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub network: Vec<Spanned<String>>,
    #[serde(default)]
    #[schemars(with = "Vec<FileCapability>")]
    pub files: Vec<Spanned<FileCapability>>,
    #[serde(default)]
    #[schemars(with = "Vec<EnvVarName>")]
    pub env: Vec<Spanned<EnvVarName>>,
    /// `host.log` lines reach the host's log and the caller (default true).
    pub log: Option<bool>,
    /// Progress reports reach the caller (default true).
    pub progress: Option<bool>,
    /// May sample the caller's model; needs the ensemble's grant (default false).
    #[schemars(with = "Option<bool>")]
    pub sampling: Option<Spanned<bool>>,
    /// May ask the person behind the caller; needs the ensemble's grant (default false).
    #[schemars(with = "Option<bool>")]
    pub elicitation: Option<Spanned<bool>>,
    /// Keys of the ensemble's `[grants] config` the invoker reads through `wasi:config/store`.
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub config: Vec<Spanned<String>>,
}

/// A directory the invoker needs, by its guest path: `{ guest = "/data", access = "read" }`.
/// The host directory comes from the ensemble's grant of that guest path (or of a parent).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct FileCapability {
    pub guest: GuestPath,
    pub access: Access,
}

/// `toolhost.toml`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct HostFile {
    #[schemars(range(min = 1, max = 1))]
    pub schema_version: u32,
    #[serde(default)]
    pub host: HostSection,
    #[serde(default)]
    pub chat: ChatSection,
    #[serde(default)]
    pub registry: RegistrySection,
    #[serde(default)]
    pub trust: TrustSection,
    /// Who may reach `serve --http`, and what each identity may list and call.
    #[serde(default)]
    pub access: crate::access::AccessSection,
    /// What the replicas of a fleet share, and where (nothing: each host keeps its own).
    #[serde(default)]
    pub fleet: crate::fleet::FleetSection,
    /// Where traces and metrics go over OTLP (nothing: none are exported).
    #[serde(default)]
    pub telemetry: crate::telemetry::TelemetrySection,
}

/// `[trust]` of `toolhost.toml`: the cosign public keys `oci://` components may be signed
/// with, and whether every one must be.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct TrustSection {
    /// PEM public keys (`cosign.pub`), relative to `toolhost.toml`.
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub keys: Vec<Spanned<String>>,
    /// Every `oci://` component must be signed by one of `keys`.
    #[serde(default)]
    #[schemars(with = "Option<bool>")]
    pub require_signatures: Option<Spanned<bool>>,
}

/// `[registry]` of `toolhost.toml`: how `oci://` components are fetched. Credentials are
/// never read from this file (the environment or a Docker `config.json`).
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RegistrySection {
    /// Registries reached over plain HTTP (`host:port`); those on loopback always are.
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub insecure: Vec<Spanned<String>>,
    /// The largest manifest read, in KiB (default 1024).
    pub max_manifest_kib: Option<MaxManifestKib>,
    /// The largest component pulled, in MiB (default 64; never more than
    /// `[host] max-component-mib`).
    pub max_blob_mib: Option<MaxBlobMib>,
    /// How long resolving a tag may take (default 5000).
    pub resolve_timeout_ms: Option<ResolveTimeoutMs>,
    /// How long pulling one component may take (default 120).
    pub pull_timeout_s: Option<PullTimeoutS>,
}

/// `[host]` of `toolhost.toml`; relative paths are relative to that file.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct HostSection {
    pub ensembles: Option<String>,
    pub cache_dir: Option<String>,
    pub audit: Option<String>,
    pub status_file: Option<String>,
    pub max_concurrent_calls: Option<MaxConcurrentCalls>,
    /// The compile worker's address space (default 2048).
    pub compile_memory_mib: Option<CompileMemoryMib>,
    /// The compile worker's CPU time (default 120).
    pub compile_cpu_seconds: Option<CompileCpuSeconds>,
    /// How long one compile may take on the clock (default 180).
    pub compile_timeout_s: Option<CompileTimeoutS>,
    /// Compiles at once (default: the number of cores).
    pub max_parallel_compiles: Option<MaxParallelCompiles>,
    /// Compiled components that no ensemble uses kept in the cache, the most recently used
    /// (default 8); the others are removed as `serve` reloads.
    pub cache_keep: Option<CacheKeep>,
    /// MiB of each instance's linear memory kept resident between calls (default 1; 0 gives
    /// every page back): no unmapping and faulting in per call, faster calls of large
    /// components (Python, JavaScript) with more, memory held by idle pool slots.
    pub keep_resident_mib: Option<KeepResidentMib>,
    /// One call's share of the instance pool, read at start (defaults 32, 2 and 32): a
    /// component that needs more (a large componentize-py build) is refused, naming these.
    pub core_instances_per_call: Option<CoreInstancesPerCall>,
    /// At most 20,000 memories in the pool (`max-concurrent-calls` times this): each
    /// reserves 4 GiB of address space.
    #[schemars(with = "Option<MemoriesPerCall>")]
    pub memories_per_call: Option<Spanned<MemoriesPerCall>>,
    pub tables_per_call: Option<TablesPerCall>,
    /// Instances held prepared ahead of calls, all invokers together (default 32, at most
    /// half of `max-concurrent-calls`; 0 turns preparation off).
    pub max_prepared: Option<MaxPrepared>,
    /// Linear memory those instances hold at once, in MiB (default 512).
    pub max_prepared_mib: Option<MaxPreparedMib>,
    /// Compile a component new to the cache with Winch first, serve its calls on that code,
    /// and swap to Cranelift's code when its compile in the background ends (default true
    /// where Winch exists: x86_64). Read at start.
    pub tiered_compile: Option<bool>,
    /// The largest component file accepted (default 256).
    pub max_component_mib: Option<MaxComponentMib>,
    /// How long a component's `describe()` may take when it is loaded (default 2000).
    pub describe_timeout_ms: Option<DescribeTimeoutMs>,
    /// Results one session may remember for dedup, in MiB (default 64).
    pub dedup_session_mib: Option<DedupMib>,
    /// Results all sessions together may remember, in MiB (default 256).
    pub dedup_total_mib: Option<DedupMib>,
    /// MCP sessions open at once over HTTP (default 1000).
    pub max_mcp_sessions: Option<MaxMcpSessions>,
    /// An MCP session idle this long over HTTP is closed (default 300).
    pub mcp_session_idle_s: Option<McpSessionIdleS>,
    /// HTTP connections open at once (default 1024).
    pub max_http_connections: Option<MaxHttpConnections>,
    /// Long-lived responses (event streams: MCP's GET streams and `subscriptions/listen`,
    /// chat runs, the catalog's stream) open at once; at most half of the connections
    /// (default 256, or half of `max-http-connections` if that is less).
    #[schemars(with = "Option<MaxHttpStreams>")]
    pub max_http_streams: Option<Spanned<MaxHttpStreams>>,
    /// How long a connection may take to send a request's headers (default 10000).
    pub http_header_timeout_ms: Option<HttpHeaderTimeoutMs>,
    /// How long a request's body may take once its headers arrived (default 30).
    pub http_body_timeout_s: Option<HttpBodyTimeoutS>,
    /// Host names `/mcp` answers besides loopback and the address it listens on (the name
    /// of a Kubernetes Service, a load balancer's): any other Host header is refused, so
    /// that a DNS rebinding page cannot reach the tools.
    #[serde(default)]
    pub allowed_hosts: Vec<AllowedHost>,
    /// How long a shutdown (SIGTERM, SIGINT) waits for calls in flight before cancelling
    /// them (default 20).
    pub drain_timeout_s: Option<DrainTimeoutS>,
    /// What happens while the audit log cannot be written: `refuse` calls (the default) or
    /// `continue` and count what is lost.
    pub on_audit_error: Option<toolhost_audit::OnAuditError>,
}

/// `[chat]` of `toolhost.toml`: the agent loop's model and limits. API keys are never read
/// from this file: `api-key-env` names the environment variable that holds the key.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ChatSection {
    /// `openai`, `anthropic` or `prompted`.
    pub provider: Option<super::ProviderKind>,
    pub model: Option<String>,
    pub base_url: Option<String>,
    /// The environment variable that holds the base URL instead (one of the two).
    #[schemars(with = "Option<EnvVarName>")]
    pub base_url_env: Option<Spanned<EnvVarName>>,
    pub api_key_env: Option<EnvVarName>,
    /// Accepted only to be refused with a message that says where keys go.
    // Left out of the schema, so that an editor marks it as the host does.
    #[schemars(skip)]
    pub api_key: Option<Spanned<toml::Value>>,
    pub stream: Option<bool>,
    pub max_tokens: Option<MaxTokens>,
    pub max_iterations: Option<MaxIterations>,
    pub max_parallel_calls: Option<MaxParallelCalls>,
    pub request_timeout_s: Option<RequestTimeoutS>,
    /// The most one model answer may bring, streamed or whole, in MiB (default 16).
    pub max_response_mib: Option<MaxResponseMib>,
    /// Tool calls of one model answer that run; the rest are refused (default 32).
    pub max_calls_per_answer: Option<MaxCallsPerAnswer>,
    /// Bytes of tool results one run keeps, in MiB; past them results are cut (default 8).
    pub max_run_result_mib: Option<ChatMib>,
    /// The largest request sent to the model, in MiB; older parts are cut to fit (default 8).
    pub max_request_mib: Option<ChatMib>,
    /// The largest a conversation may grow, in MiB; past it, it cannot go on (default 16).
    pub max_conversation_mib: Option<ChatMib>,
    pub max_attempts: Option<MaxAttempts>,
    pub retry_delay_ms: Option<RetryDelayMs>,
    pub system: Option<String>,
    pub allow: Option<Vec<String>>,
    #[serde(default)]
    pub deny: Vec<String>,
    /// Destructive tools that run without asking (names, or prefixes ending in `*`).
    #[serde(default)]
    pub auto_approve: Vec<String>,
    /// Whether the model may (`auto`, the default), must (`required`, or a tool's name) or
    /// must not (`none`) call a tool on a run's first model call.
    pub tool_choice: Option<super::ToolChoice>,
    /// Models an HTTP chat request may name besides `model`.
    #[serde(default)]
    pub models: Vec<String>,
    /// The chat database: a SQLite file, relative to `toolhost.toml` (default
    /// `chat.sqlite3` in the state directory), or a PostgreSQL every replica shares,
    /// `postgres://user@host:port/database`, without a password (a URL with one goes in the
    /// environment variable `database-env` names).
    #[schemars(with = "Option<String>")]
    pub database: Option<Spanned<String>>,
    /// The environment variable that holds the PostgreSQL URL (it may carry a password).
    #[schemars(with = "Option<EnvVarName>")]
    pub database_env: Option<Spanned<EnvVarName>>,
    /// Runs of the HTTP chat API at once (default 16).
    pub max_runs: Option<MaxRuns>,
    /// Conversations the database keeps (default 10000).
    pub max_conversations: Option<MaxConversations>,
    /// MiB the database may use (default 1024): past it, no conversation starts or goes on
    /// until some are deleted.
    pub max_database_mib: Option<MaxDatabaseMib>,
    /// How long a destructive call waits for a person's answer in the HTTP chat API
    /// (default 300).
    pub approval_timeout_s: Option<ApprovalTimeoutS>,
}

/// `[[prompts]]`: a prompt, with its arguments and its messages. Each message's `text` (or
/// the URI of its `resource` or `image`) is a template that takes the arguments by name:
/// `"Review {{ path }}"`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct PromptEntry {
    /// The name clients ask for (with the ensemble's `prefix`, as tools have).
    #[schemars(with = "ToolName")]
    pub name: Spanned<ToolName>,
    pub title: Option<String>,
    /// What the prompt is for, shown to the person who picks it.
    pub description: String,
    #[serde(default)]
    pub arguments: Vec<PromptArgumentEntry>,
    #[schemars(with = "Vec<PromptMessageEntry>")]
    pub messages: Vec<Spanned<PromptMessageEntry>>,
}

/// `[[prompts.arguments]]`: one argument of a prompt (always a string).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct PromptArgumentEntry {
    #[schemars(with = "ArgumentName")]
    pub name: Spanned<ArgumentName>,
    pub description: Option<String>,
    /// A `prompts/get` without it is refused (default false: it is then undefined, which
    /// `{% if name is defined %}` tells).
    #[serde(default)]
    pub required: bool,
    /// Values offered by `completion/complete` (those starting with what was typed).
    #[serde(default)]
    pub values: Vec<String>,
}

/// Who says a message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum MessageRole {
    #[default]
    User,
    Assistant,
}

/// `[[prompts.messages]]`: a message, one of `text`, `resource` (a resource embedded whole,
/// by its URI) or `image` (a resource whose MIME type is `image/*`, by its URI).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct PromptMessageEntry {
    #[serde(default)]
    pub role: MessageRole,
    #[schemars(with = "Option<String>")]
    pub text: Option<Spanned<String>>,
    #[schemars(with = "Option<String>")]
    pub resource: Option<Spanned<String>>,
    #[schemars(with = "Option<String>")]
    pub image: Option<Spanned<String>>,
}

/// `[[resources]]`: the files under a directory, read-only, each at `uri-prefix` followed by
/// its path below the directory.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ResourcesEntry {
    /// The set's name (what access rules and allow lists match, with the ensemble's prefix).
    #[schemars(with = "ToolName")]
    pub name: Spanned<ToolName>,
    pub description: Option<String>,
    /// The directory, relative to this file.
    #[schemars(with = "String")]
    pub directory: Spanned<String>,
    /// What each file's URI starts with: `docs://handbook/` offers `guide/intro.md` as
    /// `docs://handbook/guide/intro.md`.
    #[schemars(with = "UriPrefix")]
    pub uri_prefix: Spanned<UriPrefix>,
    /// MIME types by path pattern (`"*.md" = "text/markdown"`, `"logo" = "image/png"`; an
    /// exact path first, else the longest pattern that matches); a path no pattern matches
    /// gets the type of its extension, else `text/plain` when it is
    /// UTF-8 text and `application/octet-stream` otherwise.
    #[serde(default)]
    #[schemars(with = "std::collections::BTreeMap<String, String>")]
    pub mime_types: std::collections::BTreeMap<String, Spanned<String>>,
    /// The largest file served, in KiB (default 1024); larger ones are listed but refused.
    pub max_file_kib: Option<MaxFileKib>,
    /// The most files listed (default 1000); past it the listing says it was cut.
    pub max_files: Option<MaxResourceFiles>,
}
