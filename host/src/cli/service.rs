//! Running as a service: signals, systemd's readiness protocol, and the shutdown that every
//! long-running command (`serve` over stdio or HTTP, `chat`) shares.
//!
//! - SIGTERM or SIGINT: stop taking calls, let the calls in flight finish up to
//!   `[host] drain-timeout-s`, cancel what is left (each `cancelled`, audited), close the audit
//!   log; exit 0, or [`EXIT_CANCELLED`] when calls had to be cancelled. A second signal
//!   cancels at once and exits with 128 + its number.
//! - SIGHUP (`serve`): reload the configuration now and reopen the audit log (logrotate).
//! - systemd (`Type=notify`): READY=1 once serving, RELOADING=1 ... READY=1 around a SIGHUP
//!   reload, STOPPING=1 at the first signal; nothing when `NOTIFY_SOCKET` is unset.

use anyhow::Context;
use sd_notify::NotifyState;
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tokio::signal::unix::{Signal, SignalKind, signal};
use toolhost::invoke::{DrainReport, Host};
use toolhost::reload::Reloader;

/// The exit code of a shutdown that had to cancel calls at the drain deadline.
pub(crate) const EXIT_CANCELLED: u8 = 4;

/// How often `serve` and `chat` make the audit log durable (`fdatasync`) when it was written.
const AUDIT_SYNC_EVERY: Duration = Duration::from_secs(1);

/// SIGTERM and SIGINT, caught from the moment this is made: a signal that comes while the
/// host is still loading waits here instead of killing it.
pub(crate) struct Signals {
    terminate: Signal,
    interrupt: Signal,
}

impl Signals {
    pub(crate) fn install() -> anyhow::Result<Self> {
        Ok(Signals {
            terminate: signal(SignalKind::terminate()).context("cannot catch SIGTERM")?,
            interrupt: signal(SignalKind::interrupt()).context("cannot catch SIGINT")?,
        })
    }

    /// The next SIGTERM or SIGINT, as its number.
    async fn next(&mut self) -> i32 {
        tokio::select! {
            _ = self.terminate.recv() => libc_signal::TERM,
            _ = self.interrupt.recv() => libc_signal::INT,
        }
    }
}

/// Signal numbers, for exit codes (128 + the number) and messages.
mod libc_signal {
    pub(super) const INT: i32 = 2;
    pub(super) const TERM: i32 = 15;

    pub(super) fn name(number: i32) -> &'static str {
        if number == INT { "SIGINT" } else { "SIGTERM" }
    }
}

/// Tells systemd `state`; nothing happens when `NOTIFY_SOCKET` is unset.
pub(crate) fn notify(state: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(false, state) {
        tracing::warn!("cannot notify the service manager: {e}");
    }
}

/// Waits for the first signal, then shuts the host's calling side down: the calls in flight
/// finish or are cancelled at `deadline`. A second signal cancels them at once and exits.
pub(crate) async fn drain_on_signal(
    host: Arc<Host>,
    mut signals: Signals,
    deadline: Duration,
) -> DrainReport {
    let first = signals.next().await;
    notify(&[NotifyState::Stopping]);
    tracing::warn!(
        "{}: taking no new calls; waiting up to {}s for the calls in flight (a second signal cancels them now)",
        libc_signal::name(first),
        deadline.as_secs()
    );
    let report = tokio::select! {
        report = host.shutdown(deadline) => report,
        second = signals.next() => {
            tracing::warn!(
                "{} again: cancelling the calls in flight now",
                libc_signal::name(second)
            );
            host.shutdown(Duration::ZERO).await;
            close_audit(&host);
            std::process::exit(128 + second);
        }
    };
    if report.cancelled > 0 {
        tracing::warn!(
            "{} call(s) were still running at the drain deadline and were cancelled",
            report.cancelled
        );
    }
    report
}

/// The exit code of a shutdown: 0, or [`EXIT_CANCELLED`] when calls were cancelled.
pub(crate) fn exit_code(report: DrainReport) -> ExitCode {
    if report.cancelled > 0 {
        ExitCode::from(EXIT_CANCELLED)
    } else {
        ExitCode::SUCCESS
    }
}

/// Writes what the audit log still holds, syncs it, and prints any record it could not take
/// to stderr: the last place it can go.
pub(crate) fn close_audit(host: &Host) {
    let Some(log) = host.audit_log() else { return };
    let unwritten = log.close();
    if unwritten.is_empty() {
        return;
    }
    super::logging::say(
        tracing::Level::ERROR,
        &format!(
            "toolhost: {} audit record(s) could not be written to {}; they follow, one per line:",
            unwritten.len(),
            log.path().display()
        ),
    );
    // Each record is one JSON object on its line already, whatever the log format.
    let mut stderr = std::io::stderr().lock();
    for line in unwritten {
        let _ = stderr.write_all(&line);
    }
}

/// Makes the audit log durable once a second while something is written. Stops when dropped.
pub(crate) fn sync_audit(host: Arc<Host>) -> AbortOnDrop {
    AbortOnDrop(tokio::spawn(async move {
        if host.audit_log().is_none() {
            return;
        }
        let mut every = tokio::time::interval(AUDIT_SYNC_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let host = host.clone();
            let synced = tokio::task::spawn_blocking(move || {
                host.audit_log().map_or(Ok(()), |log| log.sync())
            })
            .await;
            if let Ok(Err(e)) = synced {
                tracing::error!("{e}");
            }
        }
    }))
}

/// SIGHUP, caught from the moment this is called (before, it would end the process).
pub(crate) fn catch_hangup() -> anyhow::Result<Signal> {
    signal(SignalKind::hangup()).context("cannot catch SIGHUP")
}

/// On SIGHUP: reload the configuration now (the ensembles, and what `also` reads again) and
/// reopen the audit log, telling systemd RELOADING=1 and READY=1 around it. Stops when
/// dropped.
pub(crate) fn reload_on_hangup(
    mut hangup: Signal,
    reloader: Arc<Reloader>,
    host: Arc<Host>,
    also: impl Fn() + Send + 'static,
) -> AbortOnDrop {
    // A reopen whose open(2) hangs (a stuck network file system) is left to finish on its own
    // thread; SIGHUP goes on reloading, and starts no second reopen meanwhile.
    let reopening = Arc::new(std::sync::atomic::AtomicBool::new(false));
    AbortOnDrop(tokio::spawn(async move {
        while hangup.recv().await.is_some() {
            notify(&[
                NotifyState::Reloading,
                NotifyState::monotonic_usec_now().unwrap_or(NotifyState::Status("reloading")),
            ]);
            reopen_audit(&host, &reopening).await;
            also();
            let change = reloader.reload().await;
            tracing::info!(
                generation = change.generation,
                "SIGHUP: reloaded the configuration ({} refused)",
                reloader.status().refused.len()
            );
            notify(&[NotifyState::Ready]);
        }
    }))
}

/// How long a SIGHUP waits for the audit log's reopen before it reloads anyway.
const REOPEN_WAIT: Duration = Duration::from_secs(5);

/// Reopens the audit log off the async threads (opening and syncing touch the disk), waiting
/// at most [`REOPEN_WAIT`]; every outcome is logged, a failure counted in the log's health.
async fn reopen_audit(host: &Arc<Host>, reopening: &Arc<std::sync::atomic::AtomicBool>) {
    use std::sync::atomic::Ordering;
    let Some(log) = host.audit_log() else {
        return;
    };
    let path = log.path().display().to_string();
    if reopening.swap(true, Ordering::SeqCst) {
        tracing::error!(
            "SIGHUP: the last reopen of the audit log {path} has not finished; still writing to the old file"
        );
        return;
    }
    let (host, flag) = (host.clone(), reopening.clone());
    let reopened = tokio::task::spawn_blocking(move || {
        let reopened = host.audit_log().map_or(Ok(()), |log| log.reopen());
        flag.store(false, Ordering::SeqCst);
        reopened
    });
    match tokio::time::timeout(REOPEN_WAIT, reopened).await {
        Ok(Ok(Ok(()))) => tracing::info!("SIGHUP: reopened the audit log {path}"),
        Ok(Ok(Err(e))) => tracing::error!(
            "SIGHUP: cannot reopen the audit log, still writing to the old file: {e}"
        ),
        Ok(Err(e)) => tracing::error!("SIGHUP: reopening the audit log failed: {e}"),
        Err(_) => tracing::error!(
            "SIGHUP: reopening the audit log {path} did not finish within {} s; still writing to the old file",
            REOPEN_WAIT.as_secs()
        ),
    }
}

/// Aborts its task when dropped.
pub(crate) struct AbortOnDrop(pub(crate) tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
