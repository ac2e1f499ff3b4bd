//! `toolhost status`: what a running `toolhost serve` loaded, when, with which component
//! hashes, what it refused, and the audit log's state. `serve` publishes this to the status
//! file after every reload, and when the audit log's state changes.

use super::settings::Settings;
use super::terminal::safe;
use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use toolhost::audit::AuditHealth;
use toolhost::invoke::Host;
use toolhost::reload::{ReloadStatus, Reloader};
use toolhost::runtime::{CompileProgress, ComponentState, PreparedUsage, Runtime, StockState};

/// The status file: the host's pid and its last reload status.
#[derive(Serialize, Deserialize)]
struct Published {
    pid: u32,
    ensembles_dir: PathBuf,
    status: ReloadStatus,
    /// Compiles in progress when this was written.
    #[serde(default)]
    compiles: Vec<CompileProgress>,
    /// The components loaded, each with the compiler tier it runs on and its compiles
    /// (absent from a file an older host wrote).
    #[serde(default)]
    components: Vec<ComponentState>,
    /// The audit log's path and state, when one is configured.
    #[serde(default)]
    audit: Option<PublishedAudit>,
    /// Instances prepared ahead of calls (absent from a file an older host wrote).
    #[serde(default)]
    prepared: Option<PublishedPrepared>,
    /// The engines the fleet shares state on (`[fleet]`'s Redis, `[chat]`'s PostgreSQL), and
    /// whether each answers.
    #[serde(default)]
    shared: Vec<PublishedEngine>,
}

#[derive(Serialize, Deserialize, PartialEq)]
struct PublishedEngine {
    engine: String,
    up: bool,
    error: Option<String>,
    /// What fails while it does not answer (the rest serves).
    #[serde(default)]
    stops: String,
}

fn engines(shared: &toolhost::state::Shared) -> Vec<PublishedEngine> {
    let mut engines: Vec<PublishedEngine> = (shared.health().into_iter())
        .map(|health| PublishedEngine {
            engine: health.engine.to_string(),
            up: health.up,
            error: health.error,
            stops: health.stops.to_string(),
        })
        .collect();
    // The collector traces go to, shared by the fleet as they are.
    if let Some((up, error)) = toolhost::trace::collector() {
        engines.push(PublishedEngine {
            engine: "OTLP collector".into(),
            up,
            error,
            stops: toolhost::trace::COLLECTOR_STOPS.into(),
        });
    }
    engines
}

#[derive(Serialize, Deserialize, PartialEq)]
struct PublishedPrepared {
    #[serde(flatten)]
    usage: PreparedUsage,
    stocks: Vec<StockState>,
}

impl PublishedPrepared {
    fn of(runtime: &Runtime) -> Self {
        PublishedPrepared {
            usage: runtime.prepared(),
            stocks: runtime.stocks(),
        }
    }

    /// Whether what it holds differs from `published` (not the counts since start, which
    /// every call moves).
    fn differs(&self, published: Option<&Self>) -> bool {
        let held = |p: &Self| (p.usage.instances, p.usage.bytes);
        published.is_none_or(|other| held(self) != held(other) || self.stocks != other.stocks)
    }
}

#[derive(Serialize, Deserialize, PartialEq)]
struct PublishedAudit {
    path: PathBuf,
    #[serde(flatten)]
    health: AuditHealth,
}

/// How often the audit log's state is looked at for a change worth publishing.
const AUDIT_LOOK_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// Writes the status now, after every reload (and every second while a compile runs), and
/// when the audit log's state, the prepared instances or a shared engine's state changed
/// (looked at every 2 s), until the returned task is dropped.
pub(crate) fn publish(
    reloader: Arc<Reloader>,
    runtime: Arc<Runtime>,
    host: Arc<Host>,
    shared: Arc<toolhost::state::Shared>,
    path: PathBuf,
) -> super::service::AbortOnDrop {
    use tokio::sync::broadcast::error::RecvError;
    let mut changes = reloader.subscribe();
    let audit = move || {
        host.audit_log().map(|log| PublishedAudit {
            path: log.path().to_path_buf(),
            health: log.health(),
        })
    };
    super::service::AbortOnDrop(tokio::spawn(async move {
        loop {
            let compiles = runtime.compiles();
            let compiling = !compiles.is_empty();
            let published = Published {
                pid: std::process::id(),
                ensembles_dir: std::path::absolute(reloader.dir())
                    .unwrap_or_else(|_| reloader.dir().to_path_buf()),
                status: reloader.status(),
                compiles,
                components: runtime.components(),
                audit: audit(),
                prepared: Some(PublishedPrepared::of(&runtime)),
                shared: engines(&shared),
            };
            if let Err(e) = write(&path, &published) {
                tracing::warn!("cannot write the status file {}: {e:#}", path.display());
            }
            // Until a reload, a compile's progress, a change of the audit log's state or of
            // the prepared instances.
            let audit_changed = async {
                loop {
                    tokio::time::sleep(AUDIT_LOOK_EVERY).await;
                    if audit() != published.audit
                        || PublishedPrepared::of(&runtime).differs(published.prepared.as_ref())
                        || engines(&shared) != published.shared
                        || runtime.components() != published.components
                    {
                        return;
                    }
                }
            };
            let change = async {
                tokio::select! {
                    received = changes.recv() => match received {
                        Ok(_) | Err(RecvError::Lagged(_)) => true,
                        Err(RecvError::Closed) => false,
                    },
                    () = audit_changed => true,
                }
            };
            let going_on = if compiling {
                tokio::time::timeout(std::time::Duration::from_secs(1), change)
                    .await
                    .unwrap_or(true)
            } else {
                change.await
            };
            if !going_on {
                return;
            }
        }
    }))
}

/// The prepared instances, in a line, and a line per stock that holds, wants or failed.
fn print_prepared(prepared: &PublishedPrepared) {
    let usage = &prepared.usage;
    if usage.max_instances == 0 {
        outln!(
            "prepared instances: off ([host] max-prepared = 0, or max-concurrent-calls below 2)"
        );
        return;
    }
    outln!(
        "prepared instances: {} of at most {}, {:.1} MiB of at most {} MiB; since start {} made, \
         {} used by calls, {} given up for calls, {} failed",
        usage.instances,
        usage.max_instances,
        usage.bytes as f64 / f64::from(1 << 20),
        usage.max_bytes >> 20,
        usage.made,
        usage.used,
        usage.evicted,
        usage.failed
    );
    for stock in &prepared.stocks {
        let timed = stock
            .instantiate_us
            .map(|us| format!(", instantiates in {:.2} ms", us as f64 / 1000.0))
            .unwrap_or_default();
        let failed = (stock.failed.as_deref())
            .map(|e| format!("; not prepared: {}", safe(e)))
            .unwrap_or_default();
        outln!(
            "  {} ready {} of {}{timed}{failed}",
            safe(&stock.component),
            stock.ready,
            stock.target
        );
    }
}

/// A component's line: the tier whose code it runs, and how it got each tier's code.
fn print_component(component: &ComponentState) {
    let compiles: Vec<String> = (component.compiles.iter())
        .map(|c| {
            let how = if c.cached {
                "from the cache"
            } else {
                "compiled"
            };
            format!("{} {how} in {:.2} s", c.tier, c.seconds)
        })
        .collect();
    let why = (component.note.as_deref())
        .map(|note| format!("; {}", safe(note)))
        .unwrap_or_default();
    outln!(
        "component {} ({}): runs {}'s code ({}){why}",
        component.path.display(),
        &component.hash[..12.min(component.hash.len())],
        component.tier,
        compiles.join(", then ")
    );
}

fn write(path: &Path, published: &Published) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let temp =
        toolhost::config::write_new(dir, "status", &[&serde_json::to_vec_pretty(published)?])?;
    std::fs::rename(&temp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&temp);
    })?;
    Ok(())
}

pub(crate) fn run(settings: &Settings, json: bool) -> anyhow::Result<ExitCode> {
    let path = settings
        .status_file
        .as_ref()
        .context("no status file is configured (set [host] status-file or --status-file)")?;
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            super::logging::say(
                tracing::Level::WARN,
                &format!(
                    "no status at {}: no `toolhost serve` has run with this configuration",
                    path.display()
                ),
            );
            return Ok(ExitCode::from(1));
        }
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let published: Published = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a status file", path.display()))?;
    let running = Path::new(&format!("/proc/{}", published.pid)).exists();
    let status = &published.status;
    if json {
        let report = serde_json::json!({ "pid": published.pid, "running": running, "ensembles_dir": published.ensembles_dir, "status": status, "compiles": published.compiles, "components": published.components, "audit": published.audit, "prepared": published.prepared, "shared": published.shared });
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        let state = if running {
            "running"
        } else {
            "not running (last status shown)"
        };
        outln!(
            "host pid {} {state}; {} reload(s), last at {}",
            published.pid,
            status.generation,
            status.reloaded_at
        );
        outln!("ensembles from {}", published.ensembles_dir.display());
        for ensemble in &status.ensembles {
            let components: Vec<&str> = ensemble
                .components
                .iter()
                .map(|h| &h[..12.min(h.len())])
                .collect();
            outln!(
                "  {:20} {:8} loaded {}  components {}  tools {}",
                ensemble.name,
                if ensemble.enabled {
                    "enabled"
                } else {
                    "disabled"
                },
                ensemble.loaded_at,
                components.join(","),
                ensemble.tools.len()
            );
            for source in ensemble.sources.iter().filter(|s| s.starts_with("oci://")) {
                outln!("    from {}", safe(source));
            }
        }
        for compile in &published.compiles {
            outln!(
                "compiling: {} with {} ({:.0} s so far)",
                compile.path.display(),
                compile.tier,
                compile.seconds
            );
        }
        for component in &published.components {
            print_component(component);
        }
        for loading in &status.loading {
            let mut waits = Vec::new();
            if !loading.components.is_empty() {
                let components: Vec<String> = (loading.components.iter())
                    .map(|p| p.display().to_string())
                    .collect();
                waits.push(format!("{} to compile", components.join(", ")));
            }
            for server in &loading.servers {
                waits.push(format!(
                    "MCP server `{}` to start",
                    super::terminal::safe(server)
                ));
            }
            outln!(
                "loading: {} (waits for {}; its previous version, if any, serves)",
                loading.file.display(),
                waits.join(" and ")
            );
        }
        for engine in &published.shared {
            match &engine.error {
                None => outln!("{}: answers (shared by the fleet)", engine.engine),
                Some(error) => outln!(
                    "{}: does not answer ({}); {}",
                    engine.engine,
                    super::terminal::safe(error),
                    super::terminal::safe(&engine.stops)
                ),
            }
        }
        if let Some(audit) = &published.audit {
            let health = &audit.health;
            match &health.error {
                None => outln!(
                    "audit log {}: ok ({} lost)",
                    audit.path.display(),
                    health.lost
                ),
                Some(error) => outln!(
                    "audit log {}: cannot be written ({}); {} record(s) held, {} lost",
                    audit.path.display(),
                    super::terminal::safe(error),
                    health.held,
                    health.lost
                ),
            }
            if let Some(error) = &health.reopen_error {
                outln!(
                    "audit log {}: the last reopen failed ({}); still writing to the file opened before ({} failed reopen(s))",
                    audit.path.display(),
                    super::terminal::safe(error),
                    health.reopen_failures
                );
            }
        }
        if let Some(prepared) = &published.prepared {
            print_prepared(prepared);
        }
        let signing_in = status.refused.iter().filter(|r| r.needs_sign_in()).count();
        if signing_in > 0 {
            outln!(
                "needs sign-in: {signing_in} ensemble(s) import a server nobody has signed in \
                 to (or whose sign-in ended): `toolhost login ENSEMBLE` (their refusals follow)"
            );
        }
        for refused in &status.refused {
            let what = if refused.kept_previous {
                "its previous version is serving"
            } else {
                "not loaded"
            };
            outln!("refused: {} ({what})", refused.file.display());
            for error in &refused.errors {
                outln!("{}", super::terminal::safe(error));
            }
        }
    }
    Ok(if status.refused.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
