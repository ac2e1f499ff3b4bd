//! accept: the HTTP server of `serve --http`, an accept loop over hyper with the bounds that
//! `axum::serve` does not have. A connection must send each request's headers within the
//! header timeout (`[host] http-header-timeout-ms`, [`DEFAULT_HEADER_TIMEOUT`]), so half-open
//! connections do not pile up, and at most `max_connections` are open at once.
//!
//! What happens past that cap is chosen so that a client holding connections cannot shut
//! others out: a new connection takes the place of the one that has been idle longest (no
//! request in progress: half-open, or between keep-alive requests), which is closed; when
//! every connection is busy, a new one is still served for the probes alone (`/healthz`,
//! `/readyz`; anything else is a 503 that says why), [`PROBE_RESERVE`] at a time, one request
//! each. Long-lived responses are capped apart (`max-http-streams`, at most half the
//! connections), so streams never hold every connection. The process's open-file limit is
//! raised to its hard limit at start, and the connection cap lowered (with a warning) when
//! even that cannot hold it beside the host's own files.

use crate::repoll::Repoll;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use toolhost_core::invoke::{OwnedCounted, Tally};

/// How long a connection may take to send a request's headers.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections open at once, at most (`[host] max-http-connections`).
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Event streams open at once, at most (`[host] max-http-streams`).
pub const DEFAULT_MAX_STREAMS: usize = 256;
/// MCP sessions open at once, at most (`[host] max-mcp-sessions`).
pub const DEFAULT_MAX_SESSIONS: usize = 1000;
/// An MCP session idle this long is closed (`[host] mcp-session-idle-s`).
pub const DEFAULT_SESSION_IDLE: Duration = Duration::from_secs(300);
/// Connections past the cap served for the probes alone, at most, when none can be let go.
pub const PROBE_RESERVE: usize = 16;
/// Open files kept for the host's own use (components, caches, the audit log, compile
/// workers' pipes, imported servers) when the connection cap is fitted to the file limit.
const FILES_FOR_THE_HOST: u64 = 256;

/// How long open connections get to finish their answers once `shutdown` completed, and an
/// evicted connection caught in a request gets to finish it.
const CLOSE_GRACE: Duration = Duration::from_secs(3);
/// How long a request's body may take to arrive, once its headers have
/// (`[host] http-body-timeout-s`).
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// Raises the soft open-file limit as far as the connection cap needs (within the hard limit;
/// not further, since child processes inherit it), and returns the connection cap that fits
/// beside the host's own files and the probe reserve: `wanted`, unless the limit is lower
/// (then a warning says so).
pub(crate) fn fit_to_open_files(wanted: usize) -> usize {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let kept = FILES_FOR_THE_HOST + PROBE_RESERVE as u64;
    let needed = (wanted as u64).saturating_add(kept);
    let limit = getrlimit(Resource::Nofile);
    let mut files = limit.current;
    if limit.current.is_some_and(|current| current < needed) {
        let target = limit.maximum.map_or(needed, |hard| hard.min(needed));
        let raised = Rlimit {
            current: Some(target),
            maximum: limit.maximum,
        };
        match setrlimit(Resource::Nofile, raised) {
            Ok(()) => files = Some(target),
            Err(e) => tracing::debug!("cannot raise the open-file limit: {e}"),
        }
    }
    let Some(files) = files else {
        return wanted;
    };
    let usable = files.saturating_sub(kept).max(1);
    if wanted as u64 > usable {
        tracing::warn!(
            "max-http-connections lowered from {wanted} to {usable}: the process may open {files} \
             files (ulimit -n), and keeps {kept} for its own use and the probes"
        );
        return usable as usize;
    }
    wanted
}

/// The value of [`Connection::busy`] once the connection was chosen to make room: a request
/// that starts after that still counts on top of it.
const EVICTED: usize = usize::MAX / 2;

/// One open connection, as the accept loop sees it.
struct Connection {
    /// Requests in progress (their response bodies not yet ended); [`EVICTED`] and more once
    /// it was chosen to make room.
    busy: AtomicUsize,
    /// When it last became idle, in milliseconds since the loop started.
    idle_since: AtomicU64,
    /// Cancelled to close it: it was chosen to make room, or the host shuts down.
    close: CancellationToken,
}

/// The open connections.
struct Open {
    started: Instant,
    connections: std::sync::Mutex<std::collections::HashMap<u64, Arc<Connection>>>,
    next: AtomicU64,
    max: usize,
    /// The parent of every connection's `close`.
    shutdown: CancellationToken,
}

impl Open {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<u64, Arc<Connection>>> {
        self.connections
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn now(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// A place for a new connection: a free one, or that of the connection idle longest,
    /// which is closed. `None` when every connection is busy.
    fn admit(self: &Arc<Self>) -> Option<Admitted> {
        let mut connections = self.lock();
        if connections.len() >= self.max {
            let mut idle: Vec<(u64, u64)> = connections
                .iter()
                .filter(|(_, c)| c.busy.load(Ordering::SeqCst) == 0)
                .map(|(&id, c)| (c.idle_since.load(Ordering::SeqCst), id))
                .collect();
            idle.sort_unstable();
            // The oldest that is still idle at the moment it is taken: a request that starts
            // meanwhile makes the exchange fail, and the next one is tried.
            let (_, evicted) = idle.into_iter().find(|(_, id)| {
                connections.get(id).is_some_and(|c| {
                    (c.busy)
                        .compare_exchange(0, EVICTED, Ordering::SeqCst, Ordering::SeqCst)
                        .is_ok()
                })
            })?;
            if let Some(evicted) = connections.remove(&evicted) {
                evicted.close.cancel();
            }
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let connection = Arc::new(Connection {
            busy: AtomicUsize::new(0),
            idle_since: AtomicU64::new(self.now()),
            close: self.shutdown.child_token(),
        });
        connections.insert(id, Arc::clone(&connection));
        Some(Admitted {
            open: Arc::clone(self),
            id,
            connection,
        })
    }
}

/// A connection's place among the open ones, given back when it is dropped.
struct Admitted {
    open: Arc<Open>,
    id: u64,
    connection: Arc<Connection>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.open.lock().remove(&self.id);
    }
}

/// A request in progress on a connection, until its response body ends or is dropped.
struct Busy {
    open: Arc<Open>,
    connection: Arc<Connection>,
}

impl Busy {
    fn enter(open: &Arc<Open>, connection: &Arc<Connection>) -> Self {
        connection.busy.fetch_add(1, Ordering::SeqCst);
        Busy {
            open: Arc::clone(open),
            connection: Arc::clone(connection),
        }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.connection
            .idle_since
            .store(self.open.now(), Ordering::SeqCst);
        self.connection.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A response body that keeps its connection busy, and a POST's answer counted, until it ends.
struct BusyBody {
    body: axum::body::Body,
    _busy: Busy,
    _answer: Option<OwnedCounted>,
}

impl http_body::Body for BusyBody {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// A request body that must arrive within `http-body-timeout-s` of its headers: a client that
/// sends it a byte at a time cannot hold a busy connection for ever. The timer starts only
/// when the body is not there at once (most bodies come with their headers), so a request
/// that does not wait pays no timer.
struct TimedBody {
    body: hyper::body::Incoming,
    arrived: tokio::time::Instant,
    deadline: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    timeout: Duration,
}

impl http_body::Body for TimedBody {
    type Data = bytes::Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        let polled = std::pin::Pin::new(&mut this.body).poll_frame(cx);
        if polled.is_pending() {
            let until = this.arrived + this.timeout;
            let deadline =
                (this.deadline).get_or_insert_with(|| Box::pin(tokio::time::sleep_until(until)));
            if deadline.as_mut().poll(cx).is_ready() {
                let late = format!(
                    "the request body did not arrive within {} s (http-body-timeout-s)",
                    this.timeout.as_secs()
                );
                return std::task::Poll::Ready(Some(Err(late.into())));
            }
        }
        polled.map_err(Into::into)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// Serves `router` on `listener` until `shutdown` completes, then closes the connections:
/// idle ones at once, the others when their answer is written (at most [`CLOSE_GRACE`]).
/// `probes` answers the connections past the cap that no idle one could make room for.
pub(crate) async fn serve<T>(
    listener: TcpListener,
    router: axum::Router,
    probes: axum::Router,
    max_connections: usize,
    (header_timeout, body_timeout): (Duration, Duration),
    answering: Arc<Tally>,
    shutdown: impl Future<Output = T>,
) -> std::io::Result<T> {
    let open = Arc::new(Open {
        started: Instant::now(),
        connections: std::sync::Mutex::default(),
        next: AtomicU64::new(0),
        max: max_connections.max(1),
        shutdown: CancellationToken::new(),
    });
    let probing = Arc::new(AtomicUsize::new(0));
    // Every connection task, counted until it ends: a shutdown waits for them.
    let tasks = Arc::new(Tally::default());
    let mut warned = false;
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // Out of file descriptors, say: wait a moment rather than spin.
                Err(e) => {
                    tracing::warn!("cannot accept a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            done = &mut shutdown => {
                drop(listener);
                open.shutdown.cancel();
                let _ = tokio::time::timeout(CLOSE_GRACE, tasks.idle()).await;
                return Ok(done);
            }
        };
        let _ = stream.set_nodelay(true);
        let io = hyper_util::rt::TokioIo::new(stream);
        let Some(admitted) = open.admit() else {
            // Every connection is busy (streams, long calls): the probes still answer.
            if probing.fetch_add(1, Ordering::SeqCst) >= PROBE_RESERVE {
                probing.fetch_sub(1, Ordering::SeqCst);
                continue;
            }
            if !warned {
                tracing::warn!(
                    "{max_connections} HTTP connections are open and busy (max-http-connections); \
                     new ones are answered for the probes alone until some end"
                );
                warned = true;
            }
            let service = hyper_util::service::TowerToHyperService::new(probes.clone());
            let (probing, counted) = (Arc::clone(&probing), tasks.enter_owned());
            tokio::spawn(async move {
                let connection = hyper::server::conn::http1::Builder::new()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(header_timeout)
                    .keep_alive(false)
                    .serve_connection(io, service);
                let _ = tokio::time::timeout(header_timeout + CLOSE_GRACE, connection).await;
                probing.fetch_sub(1, Ordering::SeqCst);
                drop(counted);
            });
            continue;
        };
        warned = false;
        let inner = hyper_util::service::TowerToHyperService::new(router.clone());
        let (state, connection_state) = (Arc::clone(&open), Arc::clone(&admitted.connection));
        let answering = Arc::clone(&answering);
        let service = hyper::service::service_fn(move |mut request: hyper::Request<_>| {
            let busy = Busy::enter(&state, &connection_state);
            // A POST's answer (a tool call's, say) is counted until it ends: a shutdown lets
            // the last ones out before it closes the MCP sessions.
            let answer = (request.method() == http::Method::POST).then(|| answering.enter_owned());
            request.extensions_mut().insert(Peer(peer));
            let request = request.map(|body| TimedBody {
                body,
                arrived: tokio::time::Instant::now(),
                deadline: None,
                timeout: body_timeout,
            });
            let answered = hyper::service::Service::call(&inner, request);
            async move {
                let response = answered.await?;
                Ok::<_, std::convert::Infallible>(response.map(|body| BusyBody {
                    body,
                    _busy: busy,
                    _answer: answer,
                }))
            }
        });
        let counted = tasks.enter_owned();
        tokio::spawn(async move {
            // Polled again at once when it wakes itself (a request's body, see `repoll`).
            let mut connection = Repoll::new(
                hyper::server::conn::http1::Builder::new()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(header_timeout)
                    .serve_connection(io, service),
            );
            // A connection's failure (a client gone, a timeout) is the connection's alone.
            tokio::select! {
                _ = &mut connection => {}
                () = admitted.connection.close.cancelled() => {
                    // Chosen to make room with no request in it: closed at once (nothing polls
                    // it meanwhile, so none can start). Otherwise (a request caught starting,
                    // or a shutdown): the answer in progress is written first.
                    if admitted.connection.busy.load(Ordering::SeqCst) != EVICTED {
                        connection.inner().graceful_shutdown();
                        let _ = tokio::time::timeout(CLOSE_GRACE, connection).await;
                    }
                }
            }
            drop(admitted);
            drop(counted);
        });
    }
}

/// The address a request's connection came from (in its extensions): the guard tells
/// loopback apart by it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peer(pub(crate) std::net::SocketAddr);
