//! twins: the open HTTP sessions (the handshake revisions, 2025-11-25 and older) whose
//! requests [`crate::direct`] may answer in the HTTP request that carries them, as it answers
//! session-less ones. rmcp serves a request in a session through the session's worker and its
//! service (a channel each way, a task per request, an event stream for the one answer):
//! about 60 µs of a call of a trivial tool on the project's machine, more than the call.
//!
//! A session's server registers a *twin* here once the session is open
//! (`notifications/initialized`, which names the session in its HTTP request): a server that
//! shares every piece of the session's state (its dedup memory and audit id, the identity
//! its first request bound, its subscriptions and log level) and the session's own peer, so
//! that a request answered directly is the request rmcp would have run. A twin is kept only
//! while its session lives: the session's server holds the one strong reference to the
//! twin's `alive` mark, so a session that ended (deleted, timed out, its service gone)
//! answers nothing here, and rmcp says `404` as before.
//!
//! rmcp closes a session whose worker saw no request for the session's idle time
//! (`mcp-session-idle-s`), and a request answered here is not seen by the worker. So a twin
//! answers only while rmcp saw a request of its session within half that time; past it, the
//! next request goes to rmcp, which keeps the session open, and the twin is touched again.
//!
//! Bounds: one twin per open session (at most `max-mcp-sessions`; past it a session is
//! served by rmcp alone), the dead ones dropped whenever a session opens; one
//! cancellation token per request in flight in a session, dropped when the request ends.

use crate::McpServer;
use rmcp::RoleServer;
use rmcp::model::RequestId;
use rmcp::service::Peer;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// The twins of a transport's open sessions, by session id.
pub(crate) struct Twins {
    max: usize,
    /// Half the sessions' idle time: how long after rmcp last saw a session its twin answers.
    fresh: Duration,
    map: Mutex<HashMap<Arc<str>, Entry>>,
}

struct Entry {
    twin: Twin,
    /// When rmcp last saw a request of this session.
    touched: Instant,
}

/// A session's twin: the server that answers its requests directly, and the session's peer.
#[derive(Clone)]
pub(crate) struct Twin {
    pub(crate) server: Arc<McpServer>,
    pub(crate) peer: Peer<RoleServer>,
    alive: Weak<()>,
}

impl Twin {
    pub(crate) fn new(server: McpServer, peer: Peer<RoleServer>, alive: &Arc<()>) -> Self {
        Twin {
            server: Arc::new(server),
            peer,
            alive: Arc::downgrade(alive),
        }
    }

    fn alive(&self) -> bool {
        self.alive.strong_count() > 0
    }
}

impl Twins {
    /// For at most `max` sessions, each closed by rmcp after `idle` without a request.
    pub(crate) fn new(max: usize, idle: Duration) -> Self {
        Twins {
            max,
            fresh: idle / 2,
            map: Mutex::default(),
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Entry>> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps `twin` for session `id` (its request just went through rmcp). The twins of
    /// sessions that ended are dropped here, with what their sessions remembered.
    pub(crate) fn register(&self, id: &str, twin: Twin) {
        let mut map = self.map();
        map.retain(|_, entry| entry.twin.alive());
        if map.len() < self.max || map.contains_key(id) {
            let touched = Instant::now();
            map.insert(Arc::from(id), Entry { twin, touched });
        }
    }

    /// The twin that may answer a request of session `id` now: `None` for a session that has
    /// none, has ended, or that rmcp has not seen for half its idle time.
    pub(crate) fn get(&self, id: &str) -> Option<Twin> {
        let mut map = self.map();
        let entry = map.get(id)?;
        if !entry.twin.alive() {
            map.remove(id);
            return None;
        }
        (entry.touched.elapsed() < self.fresh).then(|| entry.twin.clone())
    }

    /// rmcp is seeing a request of session `id`: its idle time starts again.
    pub(crate) fn touch(&self, id: &str) {
        if let Some(entry) = self.map().get_mut(id) {
            entry.touched = Instant::now();
        }
    }

    /// Session `id` has ended.
    pub(crate) fn forget(&self, id: &str) {
        self.map().remove(id);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.map().len()
    }
}

/// The requests of one session answered directly and still running, by JSON-RPC id: a
/// `notifications/cancelled` for one (which rmcp hands the session's server) cancels it.
#[derive(Default)]
pub(crate) struct InFlight(Mutex<HashMap<RequestId, CancellationToken>>);

impl InFlight {
    /// Registers request `id` until the returned guard drops; `token` is cancelled by
    /// [`InFlight::cancel`]. A second request with an id in flight replaces nothing: it just
    /// cannot be cancelled (`None`), as rmcp's own pool keeps one token per id.
    pub(crate) fn start(
        self: &Arc<Self>,
        id: RequestId,
        token: CancellationToken,
    ) -> Option<Running> {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if map.contains_key(&id) {
            return None;
        }
        map.insert(id.clone(), token);
        Some(Running {
            calls: Arc::clone(self),
            id,
        })
    }

    /// Cancels request `id`, if it runs here.
    pub(crate) fn cancel(&self, id: &RequestId) {
        let token = (self.0.lock().unwrap_or_else(PoisonError::into_inner)).remove(id);
        if let Some(token) = token {
            token.cancel();
        }
    }
}

/// A request registered in [`InFlight`], until it ends.
pub(crate) struct Running {
    calls: Arc<InFlight>,
    id: RequestId,
}

impl Drop for Running {
    fn drop(&mut self) {
        (self.calls.0.lock().unwrap_or_else(PoisonError::into_inner)).remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolhost_core::catalog::LiveCatalog;
    use toolhost_core::invoke::Host;

    /// A twin (of an empty host) whose session lives while `alive` does.
    fn twin(alive: &Arc<()>) -> Twin {
        let host = Arc::new(Host::new(Arc::new(LiveCatalog::default()), None));
        let service = rmcp::service::serve_directly(
            McpServer::new(host.clone(), "peer".into()),
            crate::direct::Nowhere,
            None,
        );
        Twin::new(
            McpServer::new(host, "s".into()),
            service.peer().clone(),
            alive,
        )
    }

    #[tokio::test]
    async fn a_twin_answers_while_its_session_lives_and_rmcp_saw_it_lately() {
        let alive = Arc::new(());
        let twins = Twins::new(2, Duration::from_secs(3600));
        twins.register("s1", twin(&alive));
        assert!(twins.get("s1").is_some());
        assert!(twins.get("s2").is_none());
        drop(alive);
        assert!(twins.get("s1").is_none(), "its session ended");
        assert_eq!(twins.len(), 0, "and it is gone");

        // Not seen by rmcp for half the idle time: rmcp gets the next request.
        let stale = Twins::new(2, Duration::ZERO);
        let alive = Arc::new(());
        stale.register("s1", twin(&alive));
        assert!(stale.get("s1").is_none());
        stale.forget("s1");
        assert_eq!(stale.len(), 0);
    }

    #[tokio::test]
    async fn twins_are_bounded_by_the_sessions_open() {
        let twins = Twins::new(2, Duration::from_secs(3600));
        let (alive, ended) = (Arc::new(()), Arc::new(()));
        twins.register("a", twin(&alive));
        twins.register("b", twin(&ended));
        twins.register("c", twin(&alive));
        assert!(twins.get("c").is_none(), "full: c is rmcp's alone");
        drop(ended);
        twins.register("c", twin(&alive));
        assert!(twins.get("c").is_some(), "b's place, once b ended");
        assert_eq!(twins.len(), 2);
    }

    #[test]
    fn a_cancelled_request_is_cancelled_once_and_forgotten_when_it_ends() {
        let calls = Arc::new(InFlight::default());
        let token = CancellationToken::new();
        let running = calls.start(RequestId::Number(7), token.clone());
        assert!(running.is_some());
        assert!(
            calls
                .start(RequestId::Number(7), CancellationToken::new())
                .is_none()
        );
        calls.cancel(&RequestId::Number(7));
        assert!(token.is_cancelled());
        drop(running);
        let again = CancellationToken::new();
        let _running = calls.start(RequestId::Number(7), again.clone());
        calls.cancel(&RequestId::Number(8));
        assert!(!again.is_cancelled());
    }
}
