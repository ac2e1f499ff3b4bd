//! `toolhost status`: what a running `toolhost serve` loaded, when, with which component
//! hashes, and what it refused. `serve` publishes this to the status file after every reload.

use super::settings::Settings;
use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use toolhost::reload::{ReloadStatus, Reloader};
use toolhost::runtime::{CompileProgress, Runtime};

/// The status file: the host's pid and its last reload status.
#[derive(Serialize, Deserialize)]
struct Published {
    pid: u32,
    ensembles_dir: PathBuf,
    status: ReloadStatus,
    /// Compiles in progress when this was written.
    #[serde(default)]
    compiles: Vec<CompileProgress>,
}

/// Writes the status now and after every reload (and every second while a compile runs),
/// until the returned task is dropped.
pub(crate) fn publish(
    reloader: Arc<Reloader>,
    runtime: Arc<Runtime>,
    path: PathBuf,
) -> tokio::task::JoinHandle<()> {
    use tokio::sync::broadcast::error::RecvError;
    let mut changes = reloader.subscribe();
    tokio::spawn(async move {
        loop {
            let compiles = runtime.compiles();
            let compiling = !compiles.is_empty();
            let published = Published {
                pid: std::process::id(),
                ensembles_dir: std::path::absolute(reloader.dir())
                    .unwrap_or_else(|_| reloader.dir().to_path_buf()),
                status: reloader.status(),
                compiles,
            };
            if let Err(e) = write(&path, &published) {
                tracing::warn!("cannot write the status file {}: {e:#}", path.display());
            }
            let change = async {
                match changes.recv().await {
                    Ok(_) | Err(RecvError::Lagged(_)) => true,
                    Err(RecvError::Closed) => false,
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
    })
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
        toolhost::runtime::write_new(dir, "status", &[&serde_json::to_vec_pretty(published)?])?;
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
            eprintln!(
                "no status at {}: no `toolhost serve` has run with this configuration",
                path.display()
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
        let report = serde_json::json!({ "pid": published.pid, "running": running, "ensembles_dir": published.ensembles_dir, "status": status, "compiles": published.compiles });
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        let state = if running {
            "running"
        } else {
            "not running (last status shown)"
        };
        println!(
            "host pid {} {state}; {} reload(s), last at {}",
            published.pid, status.generation, status.reloaded_at
        );
        println!("ensembles from {}", published.ensembles_dir.display());
        for ensemble in &status.ensembles {
            let components: Vec<&str> = ensemble
                .components
                .iter()
                .map(|h| &h[..12.min(h.len())])
                .collect();
            println!(
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
        }
        for compile in &published.compiles {
            println!(
                "compiling: {} ({:.0} s so far)",
                compile.path.display(),
                compile.seconds
            );
        }
        for loading in &status.loading {
            println!(
                "loading: {} (waits for {} to compile; its previous version, if any, serves)",
                loading.file.display(),
                loading
                    .components
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        for refused in &status.refused {
            let what = if refused.kept_previous {
                "its previous version is serving"
            } else {
                "not loaded"
            };
            println!("refused: {} ({what})", refused.file.display());
            for error in &refused.errors {
                println!("{}", super::terminal::safe(error));
            }
        }
    }
    Ok(if status.refused.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
