//! Host settings: `toolhost.toml`, then environment variables and flags over it.

use super::Cli;
use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use toolhost::audit::{AuditLog, OnAuditError};
use toolhost::catalog::LiveCatalog;
use toolhost::config::access::{AccessSettings, Unset};
use toolhost::config::v1::{ChatSection, HostFile};
use toolhost::config::{Diagnostic, FileKind, SourceFile, written_or};
use toolhost::import::ImportedServers;
use toolhost::invoke::Host;
use toolhost::registry::{Credentials, Fetch, Registry, RegistrySettings};
use toolhost::resolve::{Resolved, Resolver};
use toolhost::runtime::{CompileSettings, Runtime, RuntimeSettings};

/// Everything the commands need to build a host.
#[derive(Debug)]
pub(crate) struct Settings {
    pub(crate) ensembles: PathBuf,
    pub(crate) cache_dir: Option<PathBuf>,
    /// Compiled components no ensemble uses that the cache keeps.
    pub(crate) cache_keep: usize,
    pub(crate) audit: Option<PathBuf>,
    /// What happens while the audit log cannot be written.
    pub(crate) on_audit_error: OnAuditError,
    /// How long a shutdown waits for calls in flight.
    pub(crate) drain_timeout: Duration,
    pub(crate) status_file: Option<PathBuf>,
    /// The chat database of `serve --http`.
    pub(crate) chat_database: Option<PathBuf>,
    /// What it keeps: conversations, and bytes.
    pub(crate) chat_store: toolhost::web::StoreLimits,
    pub(crate) max_instances: u32,
    /// How components are compiled and bounded, and how long `describe()` may take.
    pub(crate) compile: CompileSettings,
    pub(crate) describe_timeout: std::time::Duration,
    /// Bytes of each linear memory kept resident between calls.
    pub(crate) keep_resident: usize,
    /// Whether components are compiled in tiers (`[host] tiered-compile`).
    pub(crate) tiering: toolhost::runtime::Tiering,
    /// One call's share of the instance pool.
    pub(crate) share: toolhost::runtime::PoolShare,
    /// How many instances may be held prepared ahead of calls, in all.
    pub(crate) prepared: toolhost::runtime::PreparedLimits,
    /// Bytes of results sessions may remember: each, and all together.
    pub(crate) dedup: (usize, usize),
    /// MCP sessions over HTTP at once, how long one may stay idle, and connections at once.
    pub(crate) http: toolhost::http::Limits,
    /// Host header values `/mcp` takes besides loopback and the listening address.
    pub(crate) allowed_hosts: Vec<String>,
    /// `[chat]`, for `toolhost chat`.
    pub(crate) chat: ChatSection,
    /// How `oci://` components are fetched and where they are kept.
    pub(crate) registry: RegistrySettings,
    /// `[access]`, checked: who may reach `serve --http` and what each identity may use.
    pub(crate) access: AccessSettings,
    /// `toolhost.toml`, when one was read (a reload reads its `[access]` again).
    pub(crate) config_path: Option<PathBuf>,
    /// Where the tokens of imported servers a person signs in to are kept (`toolhost login`).
    pub(crate) sign_in_dir: Option<PathBuf>,
    /// `[fleet]`, checked: the engines the replicas share state on (none: this process).
    pub(crate) fleet: toolhost::state::FleetSettings,
    /// Variables `toolhost.toml` names that are not set, which a local command does without
    /// (`serve` refuses to start): rendered as warnings, for `check` to print.
    pub(crate) unset: Vec<String>,
}

/// The host file the command reads: `--config`, else `./toolhost.toml` if there is one.
pub(crate) fn config_path(cli: &Cli) -> Option<PathBuf> {
    cli.config.clone().or_else(|| {
        let default = PathBuf::from("toolhost.toml");
        default.is_file().then_some(default)
    })
}

impl Settings {
    pub(crate) fn from_cli(cli: &Cli) -> anyhow::Result<Self> {
        let config_path = config_path(cli);
        // Only `serve` authenticates anyone or reaches Redis: the other commands do without
        // the variables those need, and `check` says which are not set.
        let serving = matches!(cli.command, super::Command::Serve { .. });
        let mut unset = Vec::new();
        let (host, chat, registry, trust, base, access, fleet) = match &config_path {
            Some(path) => {
                let file = super::host_file::read(path, serving)?;
                unset = file.unset;
                (
                    file.host,
                    file.chat,
                    file.registry,
                    file.trust,
                    file.base,
                    file.access,
                    file.fleet,
                )
            }
            None => (
                Default::default(),
                Default::default(),
                Default::default(),
                (Vec::new(), false),
                PathBuf::from("."),
                AccessSettings::default(),
                Default::default(),
            ),
        };
        let from_file = |value: &Option<String>| value.as_ref().map(|v| base.join(v));
        let ensembles = cli
            .ensembles
            .clone()
            .or_else(|| from_file(&host.ensembles))
            .unwrap_or_else(|| "ensembles".into());
        let cache_dir = if cli.no_cache {
            None
        } else {
            cli.cache_dir
                .clone()
                .or_else(|| from_file(&host.cache_dir))
                .or_else(default_cache_dir)
        };
        let cache_keep = cli
            .cache_keep
            .unwrap_or_else(|| written_or(host.cache_keep, DEFAULT_CACHE_KEEP));
        let audit = cli.audit.clone().or_else(|| from_file(&host.audit));
        let status_file = cli
            .status_file
            .clone()
            .or_else(|| from_file(&host.status_file))
            .or_else(|| default_status_file(config_path.as_deref(), &ensembles));
        // A PostgreSQL named in `[chat]` is in `fleet.postgres`: no file then.
        let chat_database = match &chat.database {
            _ if fleet.postgres.is_some() => None,
            Some(path) => Some(base.join(path.get_ref())),
            None => state_dir().map(|d| d.join("chat.sqlite3")),
        };
        let chat_store = toolhost::web::StoreLimits {
            max_conversations: written_or(
                chat.max_conversations,
                toolhost::web::DEFAULT_MAX_CONVERSATIONS,
            ),
            max_bytes: written_or(
                chat.max_database_mib,
                toolhost::web::DEFAULT_MAX_DATABASE_MIB << 20,
            ),
        };
        // Every number was range-checked while `toolhost.toml` was read (file:line on error).
        let max_instances = written_or(
            host.max_concurrent_calls,
            RuntimeSettings::default().max_instances,
        );
        let defaults = CompileSettings::default();
        let compile = CompileSettings {
            // The compile worker is this very program: the running binary itself, even when
            // an upgrade has replaced the file since it started (a newer compiler's artifacts
            // would not load in this host).
            worker: Some(std::path::PathBuf::from("/proc/self/exe")),
            memory_mib: written_or(host.compile_memory_mib, defaults.memory_mib),
            cpu_seconds: written_or(host.compile_cpu_seconds, defaults.cpu_seconds),
            timeout: written_or(host.compile_timeout_s, defaults.timeout),
            parallel: written_or(host.max_parallel_compiles, defaults.parallel),
            max_component_bytes: written_or(host.max_component_mib, defaults.max_component_bytes),
        };
        let describe_timeout = written_or(
            host.describe_timeout_ms,
            RuntimeSettings::default().describe_timeout,
        );
        let max_connections = written_or(
            host.max_http_connections,
            toolhost::http::DEFAULT_MAX_CONNECTIONS,
        );
        let http = toolhost::http::Limits {
            max_sessions: written_or(host.max_mcp_sessions, toolhost::http::DEFAULT_MAX_SESSIONS),
            session_idle: written_or(
                host.mcp_session_idle_s,
                toolhost::http::DEFAULT_SESSION_IDLE,
            ),
            max_connections,
            max_streams: written_or(
                host.max_http_streams.as_ref().map(|v| *v.get_ref()),
                toolhost::http::DEFAULT_MAX_STREAMS
                    .min(max_connections / 2)
                    .max(1),
            ),
            body_timeout: written_or(
                host.http_body_timeout_s,
                toolhost::http::DEFAULT_BODY_TIMEOUT,
            ),
            header_timeout: written_or(
                host.http_header_timeout_ms,
                toolhost::http::DEFAULT_HEADER_TIMEOUT,
            ),
        };
        let dedup = (
            written_or(
                host.dedup_session_mib,
                toolhost::invoke::DEFAULT_DEDUP_SESSION_MIB << 20,
            ),
            written_or(
                host.dedup_total_mib,
                toolhost::invoke::DEFAULT_DEDUP_TOTAL_MIB << 20,
            ),
        );
        let keep_resident = written_or(
            host.keep_resident_mib,
            toolhost::runtime::DEFAULT_KEEP_RESIDENT,
        );
        let shares = toolhost::runtime::PoolShare::default();
        let share = toolhost::runtime::PoolShare {
            core_instances: written_or(host.core_instances_per_call, shares.core_instances),
            memories: written_or(
                host.memories_per_call.as_ref().map(|v| *v.get_ref()),
                shares.memories,
            ),
            tables: written_or(host.tables_per_call, shares.tables),
        };
        let prepared_defaults = toolhost::runtime::PreparedLimits::default();
        let prepared = toolhost::runtime::PreparedLimits {
            max_instances: written_or(host.max_prepared, prepared_defaults.max_instances),
            max_bytes: written_or(host.max_prepared_mib, prepared_defaults.max_bytes),
        };
        let drain_timeout = written_or(host.drain_timeout_s, DEFAULT_DRAIN_TIMEOUT);
        let mut registry = registry_settings(&registry, cache_dir.as_deref(), &compile);
        (registry.trusted_keys, registry.require_signatures) = trust;
        let tiering =
            toolhost::runtime::Tiering::where_available(host.tiered_compile != Some(false));
        Ok(Settings {
            registry,
            keep_resident,
            tiering,
            share,
            prepared,
            on_audit_error: host.on_audit_error.unwrap_or_default(),
            drain_timeout,
            ensembles,
            cache_dir,
            cache_keep,
            audit,
            status_file,
            chat_database,
            chat_store,
            max_instances,
            compile,
            describe_timeout,
            dedup,
            http,
            allowed_hosts: (host.allowed_hosts.iter())
                .map(|h| h.as_str().to_string())
                .collect(),
            chat,
            access,
            config_path,
            sign_in_dir: state_dir().map(|dir| dir.join("sign-in")),
            fleet,
            unset,
        })
    }

    /// Starts the runtime (engine, component cache) of `serve`: in tiers, a component new to
    /// the cache runs Winch's code until Cranelift's replaces it.
    pub(crate) fn runtime(&self) -> anyhow::Result<Arc<Runtime>> {
        self.runtime_tiered(self.tiering)
    }

    /// The runtime of a command that ends once it has answered (`check`, `call`, `list`,
    /// `chat`, ...): in tiers, what is not cached is compiled by Winch alone (and cached, so
    /// that the next command answers at once; `serve` compiles Cranelift's code). A second
    /// compile in the background would only compete with the command for the cores, and be
    /// killed at its end.
    pub(crate) fn one_shot_runtime(&self) -> anyhow::Result<Arc<Runtime>> {
        self.runtime_tiered(self.one_shot_tiering())
    }

    /// In tiers, the first alone: what a command that ends once it has answered compiles.
    fn one_shot_tiering(&self) -> toolhost::runtime::Tiering {
        use toolhost::runtime::Tiering;
        match self.tiering {
            Tiering::On => Tiering::FirstOnly,
            other => other,
        }
    }

    fn runtime_tiered(&self, tiering: toolhost::runtime::Tiering) -> anyhow::Result<Arc<Runtime>> {
        if !self.ensembles.is_dir() {
            bail!(
                "the ensembles directory {} does not exist (set --ensembles or [host] ensembles)",
                self.ensembles.display()
            );
        }
        self.bare_runtime_tiered(tiering)
    }

    /// The runtime alone, for commands that need no ensembles (`describe`, which only needs
    /// to know what a component is: in tiers, Winch alone compiles what is not cached).
    pub(crate) fn bare_runtime(&self) -> anyhow::Result<Arc<Runtime>> {
        self.bare_runtime_tiered(self.one_shot_tiering())
    }

    fn bare_runtime_tiered(
        &self,
        tiering: toolhost::runtime::Tiering,
    ) -> anyhow::Result<Arc<Runtime>> {
        let settings = RuntimeSettings {
            tiering,
            cache_dir: self.cache_dir.clone(),
            max_instances: self.max_instances,
            compile: self.compile.clone(),
            describe_timeout: self.describe_timeout,
            keep_resident: self.keep_resident,
            prepared: self.prepared,
            share: self.share,
        };
        Ok(Arc::new(Runtime::new(&settings)?))
    }

    /// A resolver on `runtime` that fetches `oci://` components as far as `fetch` allows.
    pub(crate) fn resolver(&self, runtime: Arc<Runtime>, fetch: Fetch) -> Resolver {
        let registry = Arc::new(Registry::new(self.registry.clone()));
        let servers = match &self.sign_in_dir {
            Some(dir) => ImportedServers::default().with_sign_in_dir(dir.clone()),
            None => ImportedServers::default(),
        };
        Resolver::new(runtime)
            .with_registry(registry, fetch)
            .with_importer(Arc::new(servers))
    }

    /// Starts the runtime and resolves the ensembles directory.
    pub(crate) async fn load(&self) -> anyhow::Result<(Arc<Runtime>, Resolved)> {
        let (runtime, resolved, _) = self.load_with(Fetch::Missing).await?;
        Ok((runtime, resolved))
    }

    /// As [`Settings::load`], fetching as far as `fetch` allows; with the resolver, which
    /// knows what each `oci://` reference came to. For a command that ends once it has
    /// answered ([`Settings::one_shot_runtime`]).
    pub(crate) async fn load_with(
        &self,
        fetch: Fetch,
    ) -> anyhow::Result<(Arc<Runtime>, Resolved, Resolver)> {
        let runtime = self.one_shot_runtime()?;
        let resolver = self.resolver(runtime.clone(), fetch);
        let resolve = resolver.resolve_dir(&self.ensembles);
        // A compile that takes a while is shown on stderr while it runs.
        let resolved = tokio::select! {
            resolved = resolve => resolved,
            never = super::progress::show_compiles(&runtime) => match never {},
        };
        super::progress::clear();
        Ok((runtime, resolved, resolver))
    }

    /// The dedup budget of `[host]`.
    fn dedup_budget(&self) -> toolhost::invoke::DedupBudget {
        toolhost::invoke::DedupBudget::new(self.dedup.0, self.dedup.1)
    }

    /// The audit log, if one is configured.
    pub(crate) fn audit_log(&self) -> anyhow::Result<Option<AuditLog>> {
        match &self.audit {
            Some(path) => Ok(Some(
                AuditLog::open(path, self.on_audit_error).context("cannot open the audit log")?,
            )),
            None => Ok(None),
        }
    }

    /// A host over the resolved catalog, with the audit log if one is configured. Refused
    /// ensembles are reported in one line each on stderr.
    pub(crate) async fn host(&self) -> anyhow::Result<Host> {
        let (_runtime, resolved) = self.load().await?;
        for refused in &resolved.refused {
            // The first reason, so that a tool missing from it is explained where it is
            // called (a core module instead of a component, say).
            let first = (refused.diagnostics.first())
                .map(|d| format!(": {}", d.message.replace('\n', " ")))
                .unwrap_or_default();
            super::logging::say(
                tracing::Level::WARN,
                &format!(
                    "warning: {} was refused{}; its tools are not served ({} error(s): \
                     `toolhost check` shows each at its line)",
                    refused.file.display(),
                    super::terminal::safe(&first),
                    refused.diagnostics.len()
                ),
            );
        }
        self.host_over(Arc::new(LiveCatalog::new(resolved.catalog)))
    }

    /// A host over `catalog` with this configuration's audit log and dedup budget: every
    /// command builds its host here.
    pub(crate) fn host_over(&self, catalog: Arc<LiveCatalog>) -> anyhow::Result<Host> {
        Ok(Host::new(catalog, self.audit_log()?).with_dedup_budget(self.dedup_budget()))
    }
}

/// `$XDG_STATE_HOME/toolhost/status-<hash>.json` (or under `~/.local/state/toolhost`), one
/// per configuration: the hash is of the absolute path of `toolhost.toml`, or of the
/// ensembles directory without one, so that the hosts of two projects keep their own status
/// and `toolhost status` in a project reads its own host's.
fn default_status_file(config: Option<&Path>, ensembles: &Path) -> Option<PathBuf> {
    let named = config.unwrap_or(ensembles);
    let absolute = std::path::absolute(named).unwrap_or_else(|_| named.to_path_buf());
    let hash = blake3::hash(absolute.as_os_str().as_encoded_bytes()).to_hex();
    Some(state_dir()?.join(format!("status-{}.json", &hash[..12])))
}

/// `$XDG_STATE_HOME/toolhost`, or `~/.local/state/toolhost`.
fn state_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".local/state"))
        })?;
    Some(base.join("toolhost"))
}

/// How long a shutdown waits for calls in flight, by default: well inside the 30 s Kubernetes
/// gives a pod between SIGTERM and SIGKILL, and systemd's 90 s.
const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(20);

/// `[registry]`, the content store under the cache directory, and the credentials of the
/// environment.
fn registry_settings(
    section: &toolhost::config::v1::RegistrySection,
    cache_dir: Option<&Path>,
    compile: &CompileSettings,
) -> RegistrySettings {
    let defaults = RegistrySettings::default();
    // Credentials that cannot be read are said once; registries are then asked anonymously
    // (and answer 401 where they need more), while commands that use none go on.
    let credentials = Credentials::from_environment().unwrap_or_else(|e| {
        tracing::warn!("{e}");
        Credentials::default()
    });
    RegistrySettings {
        store: cache_dir.map(|dir| dir.join("oci")),
        insecure: section
            .insecure
            .iter()
            .map(|r| r.get_ref().clone())
            .collect(),
        max_manifest_bytes: written_or(section.max_manifest_kib, defaults.max_manifest_bytes),
        max_blob_bytes: written_or(section.max_blob_mib, defaults.max_blob_bytes)
            .min(compile.max_component_bytes),
        resolve_timeout: written_or(section.resolve_timeout_ms, defaults.resolve_timeout),
        pull_timeout: written_or(section.pull_timeout_s, defaults.pull_timeout),
        credentials,
        trusted_keys: Vec::new(),
        require_signatures: false,
    }
}

/// Compiled components no ensemble uses that the cache keeps, by default: a few rebuilds to
/// go back to without compiling again.
const DEFAULT_CACHE_KEEP: usize = 8;

fn default_cache_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))?;
    Some(base.join("toolhost"))
}

/// An environment variable's value, if it is set.
pub(super) fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// A diagnostic as a warning (it renders as an error).
pub(crate) fn as_warning(diagnostic: &Diagnostic) -> String {
    let text = diagnostic.to_string();
    match text.strip_prefix("error: ") {
        Some(rest) => format!("warning: {rest}"),
        None => text,
    }
}

/// `[access]` of `path` read again (a reload): the new rules and tokens, or why not.
pub(crate) fn reread_access(path: &Path) -> anyhow::Result<AccessSettings> {
    let source = SourceFile::read(path, FileKind::Host).map_err(|d| anyhow::anyhow!("{d}"))?;
    let file: HostFile = source
        .parse(FileKind::Host)
        .map_err(|d| anyhow::anyhow!("\n{d}"))?;
    super::host_file::check_access(&file.access, &source, Unset::Refuse).map_err(|diagnostics| {
        let all: Vec<String> = diagnostics.iter().map(ToString::to_string).collect();
        anyhow::anyhow!("\n{}", all.join("\n"))
    })
}
