//! Outgoing HTTP for `wasi:http`: every request a guest sends is checked here, in the host,
//! against the invoker's network patterns, and then sent by the host itself.
//!
//! 1. The URL's scheme, host and port must match a granted pattern.
//! 2. A host name is resolved here, and an internal address (loopback, private, link-local,
//!    ...) is refused unless a pattern grants that address itself.
//! 3. The connection goes to the address that was checked (never resolved a second time, so a
//!    DNS answer that changes in between cannot redirect it), with TLS verified against the
//!    name for `https`.
//! 4. Redirects are not followed: the guest sees the 3xx, and a request it then makes to the
//!    `Location` is checked like any other.
//! 5. The response body is cut off past `max-response-bytes`, and every wait (connect, first
//!    byte, between bytes) is bounded by the call's timeout.
//!
//! A refusal is `HTTP-request-denied` for the guest and is remembered, so that the call's
//! outcome says `capability-denied` and names what was refused: the first
//! [`REMEMBERED_REFUSALS`] are logged and named, the rest only counted, so a tool that asks
//! again and again in a loop costs the host neither memory nor log lines.
//!
//! What one call may have under way is bounded too: [`REQUESTS_PER_CALL`] requests at a time
//! (a permit held from the first check until the response body is dropped), and every host
//! name lookup, which ties up a blocking thread, takes one of [`DNS_LOOKUPS`] host-wide.

use super::network::{NetPattern, Target, internal_kind};
use bytes::Bytes;
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Semaphore;
use wasmtime_wasi_http::io::TokioIo;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

/// The refusals of one call that are logged and named in its outcome; later ones are counted.
pub const REMEMBERED_REFUSALS: usize = 8;

/// The requests one call may have under way at once (a further one waits for a permit).
pub const REQUESTS_PER_CALL: usize = 16;

/// Host name lookups under way at once in the whole host: each holds a thread of the blocking
/// pool until the resolver answers, and the pool is shared with compiling and file access.
pub const DNS_LOOKUPS: usize = 64;

static LOOKUPS: Semaphore = Semaphore::const_new(DNS_LOOKUPS);

/// What one call was refused: the first few reasons, and how many came after them.
#[derive(Default)]
struct Refusals {
    first: Vec<String>,
    more: u64,
}

/// What the call's requests share, in one allocation per call.
struct Shared {
    refused: Mutex<Refusals>,
    /// The call's requests under way, [`REQUESTS_PER_CALL`] at most.
    requests: Semaphore,
    /// The caller's session, the only one a refusal is reported to.
    session: String,
    /// The invoker whose call sends the requests (in the host's log lines about them).
    invoker: String,
    /// Failed requests said in the log so far (the first [`LOGGED_FAILURES`] are).
    failures: std::sync::atomic::AtomicU32,
}

/// Failed requests of one call said in the host's debug log; the rest are not.
const LOGGED_FAILURES: u32 = 8;

/// One of the call's [`REQUESTS_PER_CALL`] turns, given back when dropped.
struct RequestPermit(Arc<Shared>);

impl Drop for RequestPermit {
    fn drop(&mut self) {
        self.0.requests.add_permits(1);
    }
}

/// What one call may reach over HTTP, and what it tried and was refused.
#[derive(Clone)]
pub(crate) struct NetworkGuard {
    patterns: Arc<[NetPattern]>,
    max_response_bytes: u64,
    timeout: Duration,
    shared: Arc<Shared>,
    /// The largest write to an outgoing body, buffered by the host until it is sent.
    body_chunk: usize,
}

/// The response and the future that drives its connection, as `wasi:http` wants them.
type Sent = (
    http::Response<WasiBody>,
    Box<dyn Future<Output = Result<(), Error>> + Send>,
);

impl NetworkGuard {
    pub(crate) fn new(
        patterns: Arc<[NetPattern]>,
        max_response_bytes: u64,
        timeout: Duration,
        (invoker, session): (&str, &str),
        body_chunk: usize,
    ) -> Self {
        NetworkGuard {
            patterns,
            max_response_bytes,
            timeout,
            shared: Arc::new(Shared {
                refused: Mutex::default(),
                requests: Semaphore::new(REQUESTS_PER_CALL),
                session: session.to_string(),
                invoker: invoker.to_string(),
                failures: Default::default(),
            }),
            body_chunk,
        }
    }

    /// The requests this call was refused, in order: the first [`REMEMBERED_REFUSALS`], then
    /// how many more there were.
    pub(crate) fn refused(&self) -> Vec<String> {
        let Ok(refused) = self.shared.refused.lock() else {
            return Vec::new();
        };
        let mut reasons = refused.first.clone();
        if refused.more > 0 {
            reasons.push(format!("and {} more requests were refused", refused.more));
        }
        reasons
    }

    fn refuse(&self, reason: String) -> Error {
        let Ok(mut refused) = self.shared.refused.lock() else {
            return Error::HttpRequestDenied;
        };
        if refused.first.len() < REMEMBERED_REFUSALS {
            let (session, invoker) = (self.shared.session.as_str(), self.shared.invoker.as_str());
            tracing::warn!(target: "plugin", session, invoker, "network request refused: {reason}");
            refused.first.push(reason);
        } else {
            refused.more = refused.more.saturating_add(1);
        }
        Error::HttpRequestDenied
    }

    /// The addresses a request may connect to, or the refusal.
    async fn addresses(&self, target: &Target) -> Result<Vec<SocketAddr>, Error> {
        if !self.patterns.iter().any(|p| p.matches(target)) {
            let granted: Vec<String> = self.patterns.iter().map(|p| p.to_string()).collect();
            return Err(self.refuse(format!(
                "{target} is not granted (granted: {})",
                if granted.is_empty() {
                    "nothing".to_string()
                } else {
                    granted.join(", ")
                }
            )));
        }
        if let Ok(ip) = target.host.parse() {
            // A literal address matched a pattern that names that address: granted as such.
            return Ok(vec![SocketAddr::new(ip, target.port)]);
        }
        // The permit goes into the blocking thread and is given back when the resolver
        // answers, not when this call stops waiting for it: a lookup that hangs keeps its
        // permit, so hanging lookups cannot pile up threads past the bound.
        let (host, port) = (target.host.clone(), target.port);
        let lookup = async move {
            let permit = LOOKUPS.acquire().await.map_err(std::io::Error::other)?;
            tokio::task::spawn_blocking(move || {
                let _permit = permit;
                std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), port))
                    .map(Iterator::collect::<Vec<SocketAddr>>)
            })
            .await
            .map_err(std::io::Error::other)?
        };
        let found: Vec<SocketAddr> = match tokio::time::timeout(self.timeout, lookup).await {
            Err(_) => return Err(Error::DnsTimeout),
            Ok(Err(e)) => {
                return Err(Error::DnsError {
                    rcode: Some(e.to_string()),
                    info_code: None,
                });
            }
            Ok(Ok(found)) => found,
        };
        let (allowed, internal): (Vec<SocketAddr>, Vec<SocketAddr>) =
            found.into_iter().partition(|a| {
                internal_kind(a.ip()).is_none()
                    || self
                        .patterns
                        .iter()
                        .any(|p| p.grants_address(target, a.ip()))
            });
        if allowed.is_empty() {
            let Some(first) = internal.first() else {
                return Err(Error::DestinationNotFound);
            };
            let kind = internal_kind(first.ip()).unwrap_or("internal");
            return Err(self.refuse(format!(
                "{target} resolves to {}, a {kind} address, which is not granted (grant that \
                 address or its range itself to allow it)",
                first.ip()
            )));
        }
        Ok(allowed)
    }

    /// Sends `request` as [`NetworkGuard::sent`] does; one that fails is said in the host's
    /// log at debug (the first [`LOGGED_FAILURES`] of a call), with the invoker, where it went
    /// (without its query) and why: the component only learns that it failed.
    async fn send(
        self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
    ) -> Result<Sent, Error> {
        let uri = request.uri();
        let to = format!(
            "{}://{}{}",
            uri.scheme_str().unwrap_or("http"),
            uri.authority().map_or("", |a| a.as_str()),
            uri.path()
        );
        let shared = Arc::clone(&self.shared);
        let sent = self.sent(request, options).await;
        let logged = || {
            let seen = shared
                .failures
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            seen < LOGGED_FAILURES
        };
        if let Err(error) = &sent
            && logged()
        {
            let (session, invoker) = (shared.session.as_str(), shared.invoker.as_str());
            let why = match error {
                Error::HttpRequestDenied => "refused by the grants (see the warning above)".into(),
                Error::ConnectionRefused => "connection refused".into(),
                Error::ConnectionTimeout => "no connection within the timeout".into(),
                Error::ConnectionReadTimeout => "no answer within the timeout".into(),
                Error::TlsCertificateError => "TLS: the certificate was refused".into(),
                other => other.to_string(),
            };
            let to = toolhost_contract::cut(&to, 512, |_| "...".into());
            tracing::debug!(target: "plugin", session, invoker, "outgoing request to {to} failed: {why}");
        }
        sent
    }

    async fn sent(
        self,
        mut request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
    ) -> Result<Sent, Error> {
        let uri = request.uri().clone();
        let https = uri.scheme() == Some(&http::uri::Scheme::HTTPS);
        let host = uri
            .host()
            .ok_or(Error::HttpRequestUriInvalid)?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        let target = Target {
            https,
            port: uri.port_u16().unwrap_or(if https { 443 } else { 80 }),
            host,
        };
        let turn = self.shared.requests.acquire().await;
        // The semaphore is never closed.
        turn.map_err(|e| Error::InternalError(Some(e.to_string())))?
            .forget();
        let permit = RequestPermit(Arc::clone(&self.shared));
        let addresses = self.addresses(&target).await?;
        let bound = |wanted: Option<Duration>| wanted.unwrap_or(self.timeout).min(self.timeout);
        let connect_timeout = bound(options.and_then(|o| o.connect_timeout));
        let first_byte_timeout = bound(options.and_then(|o| o.first_byte_timeout));
        let between_bytes_timeout = bound(options.and_then(|o| o.between_bytes_timeout));

        let connect = tokio::net::TcpStream::connect(&addresses[..]);
        let tcp = tokio::time::timeout(connect_timeout, connect)
            .await
            .map_err(|_| Error::ConnectionTimeout)?
            .map_err(Error::Connect)?;
        let stream: Box<dyn Stream> = if https {
            let config = tls_config().map_err(|e| Error::InternalError(Some(e)))?;
            let name = match target.host.parse::<std::net::IpAddr>() {
                Ok(ip) => tokio_rustls::rustls::pki_types::ServerName::from(ip),
                Err(_) => {
                    tokio_rustls::rustls::pki_types::ServerName::try_from(target.host.clone())
                        .map_err(|_| Error::HttpRequestUriInvalid)?
                }
            };
            let tls = tokio_rustls::TlsConnector::from(config);
            let stream = tokio::time::timeout(connect_timeout, tls.connect(name, tcp))
                .await
                .map_err(|_| Error::ConnectionTimeout)?
                .map_err(Error::Tls)?;
            Box::new(stream)
        } else {
            Box::new(tcp)
        };
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(Error::from)?;
        let driver = tokio::spawn(connection);

        // Origin form on the wire: the scheme and authority stay in the Host header.
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        *request.uri_mut() = path.parse().map_err(|_| Error::HttpRequestUriInvalid)?;
        let response = tokio::time::timeout(first_byte_timeout, sender.send_request(request))
            .await
            .map_err(|_| Error::ConnectionReadTimeout)?
            .map_err(Error::from)?;
        let limit = self.max_response_bytes;
        let response = response.map(|incoming| {
            GuardedBody {
                incoming,
                remaining: limit,
                limit,
                idle: between_bytes_timeout,
                timer: Box::pin(tokio::time::sleep(between_bytes_timeout)),
                _permit: permit,
            }
            .boxed_unsync()
        });
        let io = async move {
            match driver.await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(Error::from(e)),
                Err(e) => Err(Error::InternalError(Some(e.to_string()))),
            }
        };
        Ok((response, Box::new(io)))
    }
}

impl WasiHttpHooks for NetworkGuard {
    /// One chunk of an outgoing body at a time, of the size the runtime chose from the call's
    /// memory limit: bodies the guest writes and does not send stay small in the host.
    fn p2_outgoing_body_buffer_chunks(&mut self) -> usize {
        1
    }

    fn p2_outgoing_body_chunk_size(&mut self) -> usize {
        self.body_chunk
    }

    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), Error>> + Send>,
    ) -> Box<dyn Future<Output = Result<Sent, Error>> + Send> {
        drop(fut);
        // The call's trace goes on at the server (sent only where the grant allows: `send`
        // refuses any other host before a byte goes out).
        let mut request = request;
        for (name, value) in crate::trace::injected().unwrap_or_default() {
            let value = value
                .as_str()
                .and_then(|v| http::HeaderValue::from_str(v).ok());
            if let (Ok(name), Some(value)) = (http::HeaderName::try_from(name), value) {
                request.headers_mut().insert(name, value);
            }
        }
        Box::new(self.clone().send(request, options))
    }
}

/// The TLS client settings of every plugin request (ring, the Mozilla roots), built once.
fn tls_config() -> Result<Arc<tokio_rustls::rustls::ClientConfig>, String> {
    use tokio_rustls::rustls;
    static CONFIG: std::sync::OnceLock<Result<Arc<rustls::ClientConfig>, String>> =
        std::sync::OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let roots = rustls::RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.into(),
            };
            let config = rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
            Ok(Arc::new(config))
        })
        .clone()
}

trait Stream: AsyncRead + AsyncWrite + Send + Sync + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Sync + Unpin + 'static> Stream for T {}

/// A response body with a size limit and a limit on the wait between frames.
struct GuardedBody {
    incoming: hyper::body::Incoming,
    remaining: u64,
    limit: u64,
    idle: Duration,
    timer: Pin<Box<tokio::time::Sleep>>,
    /// The call's permit for this request, given back when the body is dropped.
    _permit: RequestPermit,
}

impl Body for GuardedBody {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.incoming).poll_frame(cx) {
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(Error::from(e)))),
            Poll::Ready(Some(Ok(frame))) => {
                let size = frame.data_ref().map_or(0, |d| d.len() as u64);
                if size > this.remaining {
                    this.remaining = 0;
                    return Poll::Ready(Some(Err(Error::HttpResponseBodySize(Some(this.limit)))));
                }
                this.remaining -= size;
                let next = tokio::time::Instant::now() + this.idle;
                this.timer.as_mut().reset(next);
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Pending => {
                ready!(this.timer.as_mut().poll(cx));
                Poll::Ready(Some(Err(Error::ConnectionReadTimeout)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.incoming.is_end_stream()
    }
}
