//! Host settings: `toolhost.toml`, then environment variables and flags over it.

use super::Cli;
use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use toolhost::audit::AuditLog;
use toolhost::catalog::LiveCatalog;
use toolhost::config::v1::{ChatSection, HostFile};
use toolhost::config::{Diagnostic, FileKind, SourceFile};
use toolhost::invoke::Host;
use toolhost::resolve::{Resolved, Resolver};
use toolhost::runtime::{CompileSettings, Runtime, RuntimeSettings};

/// The bounds of `serve --http`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HttpLimits {
    pub(crate) max_sessions: usize,
    pub(crate) session_idle: std::time::Duration,
    pub(crate) max_connections: usize,
    pub(crate) header_timeout: std::time::Duration,
}

/// Everything the commands need to build a host.
#[derive(Debug)]
pub(crate) struct Settings {
    pub(crate) ensembles: PathBuf,
    pub(crate) cache_dir: Option<PathBuf>,
    pub(crate) audit: Option<PathBuf>,
    pub(crate) status_file: Option<PathBuf>,
    pub(crate) max_instances: u32,
    /// How components are compiled and bounded, and how long `describe()` may take.
    pub(crate) compile: CompileSettings,
    pub(crate) describe_timeout: std::time::Duration,
    /// Bytes of results sessions may remember: each, and all together.
    pub(crate) dedup: (usize, usize),
    /// MCP sessions over HTTP at once, how long one may stay idle, and connections at once.
    pub(crate) http: HttpLimits,
    /// `[chat]`, for `toolhost chat`.
    pub(crate) chat: ChatSection,
}

impl Settings {
    pub(crate) fn from_cli(cli: &Cli) -> anyhow::Result<Self> {
        let config_path = cli.config.clone().or_else(|| {
            let default = PathBuf::from("toolhost.toml");
            default.is_file().then_some(default)
        });
        let (host, chat, base) = match &config_path {
            Some(path) => {
                let source =
                    SourceFile::read(path, FileKind::Host).map_err(|d| anyhow::anyhow!("{d}"))?;
                let file: HostFile = source
                    .parse(FileKind::Host)
                    .map_err(|d| anyhow::anyhow!("\n{d}"))?;
                if let Some(key) = &file.chat.api_key {
                    let diagnostic = Diagnostic::new(
                        source.at(key.span()),
                        "API keys are never read from toolhost.toml: put the key in an \
                         environment variable and name it with `api-key-env`",
                    );
                    bail!("\n{diagnostic}");
                }
                (
                    file.host,
                    file.chat,
                    path.parent().unwrap_or(Path::new(".")).to_path_buf(),
                )
            }
            None => (Default::default(), Default::default(), PathBuf::from(".")),
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
        let audit = cli.audit.clone().or_else(|| from_file(&host.audit));
        let status_file = cli
            .status_file
            .clone()
            .or_else(|| from_file(&host.status_file))
            .or_else(default_status_file);
        let max_instances = host
            .max_concurrent_calls
            .unwrap_or(RuntimeSettings::default().max_instances);
        if max_instances == 0 {
            bail!("[host] max-concurrent-calls must be at least 1");
        }
        let positive = |value: Option<u64>, key: &str, default: u64| -> anyhow::Result<u64> {
            match value {
                Some(0) => bail!("[host] {key} must be at least 1"),
                Some(value) => Ok(value),
                None => Ok(default),
            }
        };
        let defaults = CompileSettings::default();
        let compile = CompileSettings {
            // The compile worker is this very program.
            worker: std::env::current_exe().ok(),
            memory_mib: positive(
                host.compile_memory_mib,
                "compile-memory-mib",
                defaults.memory_mib,
            )?,
            cpu_seconds: positive(
                host.compile_cpu_seconds,
                "compile-cpu-seconds",
                defaults.cpu_seconds,
            )?,
            timeout: std::time::Duration::from_secs(positive(
                host.compile_timeout_s,
                "compile-timeout-s",
                defaults.timeout.as_secs(),
            )?),
            parallel: positive(
                host.max_parallel_compiles.map(u64::from),
                "max-parallel-compiles",
                defaults.parallel as u64,
            )? as usize,
            max_component_bytes: positive(
                host.max_component_mib,
                "max-component-mib",
                defaults.max_component_bytes >> 20,
            )? << 20,
        };
        let describe_timeout = std::time::Duration::from_millis(positive(
            host.describe_timeout_ms,
            "describe-timeout-ms",
            RuntimeSettings::default().describe_timeout.as_millis() as u64,
        )?);
        let http = HttpLimits {
            max_sessions: positive(host.max_mcp_sessions, "max-mcp-sessions", 1000)? as usize,
            session_idle: std::time::Duration::from_secs(positive(
                host.mcp_session_idle_s,
                "mcp-session-idle-s",
                300,
            )?),
            max_connections: positive(
                host.max_http_connections,
                "max-http-connections",
                super::http::DEFAULT_MAX_CONNECTIONS as u64,
            )? as usize,
            header_timeout: std::time::Duration::from_millis(positive(
                host.http_header_timeout_ms,
                "http-header-timeout-ms",
                super::http::DEFAULT_HEADER_TIMEOUT.as_millis() as u64,
            )?),
        };
        let dedup = (
            (positive(
                host.dedup_session_mib,
                "dedup-session-mib",
                toolhost::invoke::DEFAULT_DEDUP_SESSION_MIB as u64,
            )? << 20) as usize,
            (positive(
                host.dedup_total_mib,
                "dedup-total-mib",
                toolhost::invoke::DEFAULT_DEDUP_TOTAL_MIB as u64,
            )? << 20) as usize,
        );
        Ok(Settings {
            ensembles,
            cache_dir,
            audit,
            status_file,
            max_instances,
            compile,
            describe_timeout,
            dedup,
            http,
            chat,
        })
    }

    /// Starts the runtime (engine, component cache).
    pub(crate) fn runtime(&self) -> anyhow::Result<Arc<Runtime>> {
        if !self.ensembles.is_dir() {
            bail!(
                "the ensembles directory {} does not exist (set --ensembles or [host] ensembles)",
                self.ensembles.display()
            );
        }
        let settings = RuntimeSettings {
            cache_dir: self.cache_dir.clone(),
            max_instances: self.max_instances,
            compile: self.compile.clone(),
            describe_timeout: self.describe_timeout,
        };
        Ok(Arc::new(Runtime::new(&settings)?))
    }

    /// Starts the runtime and resolves the ensembles directory.
    pub(crate) async fn load(&self) -> anyhow::Result<(Arc<Runtime>, Resolved)> {
        let runtime = self.runtime()?;
        let resolved = Resolver::new(runtime.clone())
            .resolve_dir(&self.ensembles)
            .await;
        Ok((runtime, resolved))
    }

    /// The dedup budget of `[host]`.
    pub(crate) fn dedup_budget(&self) -> toolhost::invoke::DedupBudget {
        toolhost::invoke::DedupBudget::new(self.dedup.0, self.dedup.1)
    }

    /// The audit log, if one is configured.
    pub(crate) fn audit_log(&self) -> anyhow::Result<Option<AuditLog>> {
        match &self.audit {
            Some(path) => Ok(Some(
                AuditLog::open(path).context("cannot open the audit log")?,
            )),
            None => Ok(None),
        }
    }

    /// A host over the resolved catalog, with the audit log if one is configured. Refused
    /// ensembles are reported in one line each on stderr.
    pub(crate) async fn host(&self) -> anyhow::Result<Host> {
        let (_runtime, resolved) = self.load().await?;
        for refused in &resolved.refused {
            let count = refused.diagnostics.len();
            eprintln!(
                "warning: {} was refused ({count} error(s)); run `toolhost check` for details",
                refused.file.display()
            );
        }
        let audit = self.audit_log()?;
        let catalog = Arc::new(LiveCatalog::new(resolved.catalog));
        Ok(Host::new(catalog, audit).with_dedup_budget(self.dedup_budget()))
    }
}

/// `$XDG_STATE_HOME/toolhost/status.json`, or `~/.local/state/toolhost/status.json`.
fn default_status_file() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".local/state"))
        })?;
    Some(base.join("toolhost/status.json"))
}

fn default_cache_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))?;
    Some(base.join("toolhost"))
}
