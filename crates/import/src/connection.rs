//! connection: one imported server's session over time. It is started when first needed,
//! found gone when its process exits or its connection closes (and started again), and a
//! failed start waits out a doubling backoff (1 s up to 60 s). A server a person signs in
//! to follows the sign-in on disk: a session is made with the client the tokens were issued
//! to, and when the tokens change hands (`toolhost login` registered another client) the
//! session starts again with the new sign-in whole; when they are gone (`toolhost logout`)
//! the session ends and every use says "needs sign-in" until someone signs in again, which
//! ends the wait at once.

use crate::{McpImport, Watcher, alive, sign_in, sign_in_target, watcher};
use rmcp::RoleClient;
use rmcp::service::RunningService;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant, SystemTime};
use toolhost_core::import::McpError;

/// The first wait after a failed start; it doubles with each further failure.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// The live session, or when to try again.
#[derive(Default)]
pub(crate) struct Connection {
    pub(crate) service: Option<Arc<RunningService<RoleClient, Watcher>>>,
    /// Over 2026-07-28, the `subscriptions/listen` stream that reports tool list changes.
    pub(crate) _listening: Option<crate::AbortOnDrop>,
    /// For a server a person signs in to: the client the session's tokens were issued to.
    pub(crate) signed_in_as: Option<String>,
    /// Failed starts in a row.
    pub(crate) failures: u32,
    pub(crate) retry_at: Option<Instant>,
    /// When the last start failed (a sign-in written after it ends the backoff).
    pub(crate) failed_at: Option<SystemTime>,
    pub(crate) last_error: Option<String>,
}

/// A file as last looked at: its time and size, or `None` when it was not there.
pub(crate) type FileStamp = Option<(Option<SystemTime>, u64)>;

/// What the live session is, now.
pub(crate) enum Live {
    Running(Arc<RunningService<RoleClient, Watcher>>),
    /// Ended because no one is signed in any more: why.
    SignedOut(McpError),
    /// None (never started, gone, or ended for a new sign-in): one may be started.
    None,
}

/// Who is signed in now, against the session's own sign-in.
enum SignIn {
    /// As when the session started (or the server takes no sign-in).
    Same,
    /// No one: the tokens are gone.
    Out,
    /// Another client's tokens.
    Other,
}

impl McpImport {
    /// The running session, started now if there is none (unless a failed start is still in
    /// its backoff, or no one is signed in).
    pub(crate) async fn session(
        &self,
    ) -> Result<Arc<RunningService<RoleClient, Watcher>>, McpError> {
        let mut connection = self.connection.lock().await;
        match self.live(&mut connection) {
            Live::Running(service) => return Ok(service),
            Live::SignedOut(why) => return Err(why),
            Live::None => {}
        }
        if let Some(at) = connection.retry_at
            && Instant::now() < at
            && !self.signed_in_since_failure(&connection)
        {
            let wait = at.saturating_duration_since(Instant::now());
            let why = (connection.last_error.as_deref()).unwrap_or("it failed to start");
            // A sign-in's refusal says what to do, not when to try: trying will not help.
            return Err(self.error(match why.starts_with(sign_in::NEEDS_SIGN_IN) {
                true => why.to_string(),
                false => format!(
                    "is unavailable ({why}); the next try is in {} s",
                    wait.as_secs().max(1)
                ),
            }));
        }
        let mut signed_in_as = None;
        let started = self.start(&mut signed_in_as);
        match tokio::time::timeout(self.spec.startup_timeout, started).await {
            Ok(Ok((service, watcher))) => {
                self.up.store(true, Ordering::Relaxed);
                // A new connection holds none of the old one's subscriptions.
                (self
                    .subscribed
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner))
                .clear();
                *self
                    .listening
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = None;
                *self
                    .sign_in_seen
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = None;
                let service = Arc::new(service);
                *connection = Connection {
                    _listening: watcher::listen_for_changes(&service, watcher),
                    service: Some(Arc::clone(&service)),
                    signed_in_as,
                    ..Connection::default()
                };
                Ok(service)
            }
            failed => {
                let reason = match failed {
                    Ok(Err(reason)) => reason,
                    _ => format!(
                        "did not start within {} ms",
                        self.spec.startup_timeout.as_millis()
                    ),
                };
                Err(self.failed(&mut connection, reason))
            }
        }
    }

    /// The session as it is now: running; ended because its server is gone (said once) or
    /// because another sign-in took its place; or ended for a sign-out, which is then the
    /// failure every use says.
    pub(crate) fn live(&self, connection: &mut Connection) -> Live {
        let Some(service) = connection.service.clone() else {
            return Live::None;
        };
        if !alive(&service) {
            tracing::warn!(
                "MCP server `{}` is gone; starting it again",
                self.spec.describe()
            );
            self.end(connection);
            return Live::None;
        }
        match self.sign_in_now(connection) {
            SignIn::Same => Live::Running(service),
            SignIn::Other => {
                tracing::info!(
                    "MCP server `{}`: a new sign-in (another client); its session starts again",
                    self.spec.describe()
                );
                self.end(connection);
                Live::None
            }
            SignIn::Out => {
                self.end(connection);
                let why = self.failed(connection, sign_in::signed_out());
                tracing::warn!("{why}");
                Live::SignedOut(why)
            }
        }
    }

    /// Ends the session (its server is gone, or its sign-in is over).
    fn end(&self, connection: &mut Connection) {
        connection.service = None;
        connection._listening = None;
        connection.signed_in_as = None;
        self.up.store(false, Ordering::Relaxed);
    }

    /// Counts a failed start (or a sign-in that ended), for `reason`: the next try waits a
    /// doubling backoff, or for a new sign-in.
    pub(crate) fn failed(&self, connection: &mut Connection, reason: String) -> McpError {
        connection.failures += 1;
        let backoff = FIRST_BACKOFF
            .saturating_mul(2u32.saturating_pow(connection.failures - 1))
            .min(MAX_BACKOFF);
        connection.retry_at = Some(Instant::now() + backoff);
        connection.failed_at = Some(SystemTime::now());
        connection.last_error = Some(reason.clone());
        self.error(reason)
    }

    /// Whether a person signed in (`toolhost login` wrote the tokens) since the last failure:
    /// it ends the backoff.
    pub(crate) fn signed_in_since_failure(&self, connection: &Connection) -> bool {
        let Some((url, dir)) = sign_in_target(&self.spec, self.sign_in_dir.as_deref()) else {
            return false;
        };
        let written = std::fs::metadata(sign_in::store_path(dir, url)).and_then(|m| m.modified());
        connection
            .failed_at
            .is_some_and(|failed| written.is_ok_and(|written| written > failed))
    }

    /// For a server a person signs in to, what `error` (of a request on `service`) means for
    /// the sign-in: `Some` "needs sign-in" when no one is signed in any more or the server
    /// refused the tokens (their renewal included). The session then ends and the failure is
    /// what `status`, `/readyz` and every later use say, at once (a reload is asked for);
    /// `None` for any other error.
    pub(crate) async fn refused_sign_in(
        &self,
        service: &Arc<RunningService<RoleClient, Watcher>>,
        error: &rmcp::ServiceError,
    ) -> Option<McpError> {
        let (url, dir) = sign_in_target(&self.spec, self.sign_in_dir.as_deref())?;
        let reason = match sign_in::signed_in(dir, url) {
            Ok(None) => sign_in::signed_out(),
            _ if sign_in::asks_for_sign_in(error) => sign_in::refused_tokens(),
            _ => return None,
        };
        let mut connection = self.connection.lock().await;
        let current = connection.service.as_ref();
        if current.is_some_and(|current| Arc::ptr_eq(current, service)) {
            self.end(&mut connection);
        }
        let why = self.failed(&mut connection, reason);
        drop(connection);
        tracing::warn!("{why}");
        // The reloader follows: the ensemble is said to need a sign-in (its last good
        // version stays, its calls saying so).
        let _ = self.started.send(self.spec.describe());
        Some(why)
    }

    /// Who is signed in now, against the session's sign-in: read again only when the token
    /// file changed (its size and time), which this host's own renewals do too.
    fn sign_in_now(&self, connection: &Connection) -> SignIn {
        let (Some(as_client), Some((url, dir))) = (
            connection.signed_in_as.as_deref(),
            sign_in_target(&self.spec, self.sign_in_dir.as_deref()),
        ) else {
            return SignIn::Same;
        };
        let stamp = std::fs::metadata(sign_in::store_path(dir, url))
            .ok()
            .map(|m| (m.modified().ok(), m.len()));
        {
            let mut seen = self
                .sign_in_seen
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if seen.as_ref() == Some(&stamp) {
                return SignIn::Same;
            }
            *seen = Some(stamp);
        }
        match sign_in::signed_in(dir, url) {
            Ok(None) => SignIn::Out,
            Ok(Some(client)) if client != as_client => SignIn::Other,
            // The same client's new tokens (a renewal, a sign-in again) are the session's
            // own: its client reads them at its next request. A file that cannot be read
            // fails that request, saying why.
            Ok(Some(_)) | Err(_) => SignIn::Same,
        }
    }
}
