//! dial: one connection to one Redis server, made the same way for the single engine and
//! for each node of a cluster: a socket of ours (TCP, a Unix socket, TLS with the host's
//! rustls settings for `rediss://`), each reply held to the bounds of [`Bounded`], the
//! crate's multiplexed connection over it with its handshake (password, database) done.
//! Errors say why without the address or the URL's password.

use crate::bounded::Bounded;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ConnectionAddr, ConnectionInfo};
use std::pin::Pin;
use std::sync::{Arc, OnceLock};

/// A connection made to one Redis server and its driver, which runs until the socket ends.
pub(crate) struct Dialed {
    pub(crate) connection: MultiplexedConnection,
    pub(crate) driver: Pin<Box<dyn Future<Output = ()> + Send>>,
    /// Why the stream refused a reply, once it did.
    pub(crate) refused: Arc<OnceLock<String>>,
}

/// A connection to the server `info` names, over a socket made here (TLS with `tls` for
/// `rediss://`), each reply held to the bounds of [`Bounded`], its handshake (password,
/// database) done. The error says why, without an address.
pub(crate) async fn dial(
    info: &ConnectionInfo,
    tls: Option<&Arc<rustls::ClientConfig>>,
    config: AsyncConnectionConfig,
) -> Result<Dialed, String> {
    match info.addr() {
        ConnectionAddr::Tcp(host, port) => {
            let socket = tokio::net::TcpStream::connect((host.as_str(), *port))
                .await
                .map_err(|e| io_reason(&e))?;
            // A call sends a script while another is unanswered (a quota's admission
            // beside a dedup lookup, a result stored in the background); with Nagle's
            // algorithm the second would wait for the first's answer: a round trip more.
            let _ = socket.set_nodelay(true);
            handshake(info, socket, config).await
        }
        ConnectionAddr::Unix(path) => {
            let socket = tokio::net::UnixStream::connect(path)
                .await
                .map_err(|e| io_reason(&e))?;
            handshake(info, socket, config).await
        }
        ConnectionAddr::TcpTls { host, port, .. } => {
            let Some(tls) = tls else {
                return Err("its URL asks for TLS and none is set up".to_string());
            };
            let socket = tokio::net::TcpStream::connect((host.as_str(), *port))
                .await
                .map_err(|e| io_reason(&e))?;
            let _ = socket.set_nodelay(true);
            let name = rustls::pki_types::ServerName::try_from(host.clone())
                .map_err(|_| format!("`{host}` is no name to check a certificate for"))?;
            // The handshake is bounded by the request's own timeout, as every wait here.
            let connector = tokio_rustls::TlsConnector::from(Arc::clone(tls));
            let stream = connector
                .connect(name, socket)
                .await
                .map_err(|e| tls_reason(&e))?;
            handshake(info, stream, config).await
        }
        _ => Err("the URL names a kind of address toolhost does not reach".to_string()),
    }
}

/// The crate's connection over `socket`, bounded, its handshake (password, database) done.
async fn handshake<S>(
    info: &ConnectionInfo,
    socket: S,
    config: AsyncConnectionConfig,
) -> Result<Dialed, String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let stream = Bounded::new(socket);
    let refused = stream.refusal();
    let made = MultiplexedConnection::new_with_config(info.redis_settings(), stream, config);
    let (connection, driver) = made.await.map_err(|e| without_url(&e))?;
    Ok(Dialed {
        connection,
        driver: Box::pin(driver),
        refused,
    })
}

/// Why a TLS handshake failed, said plainly (a certificate that does not verify, a server
/// that is no TLS server).
fn tls_reason(error: &std::io::Error) -> String {
    let said = match error
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>())
    {
        Some(rustls::Error::InvalidCertificate(why)) => {
            format!("its TLS certificate is refused ({why:?})")
        }
        Some(other) => format!("TLS failed: {other}"),
        None if error.kind() == std::io::ErrorKind::InvalidData => {
            "TLS failed: it does not answer as a TLS server".to_string()
        }
        None => format!("TLS failed: {}", io_reason(error)),
    };
    toolhost_contract::cut(&said, 200, |_| "...".into()).into_owned()
}

/// Why a socket could not be made, without an address.
fn io_reason(error: &std::io::Error) -> String {
    match error.kind() {
        std::io::ErrorKind::ConnectionRefused => "connection refused".into(),
        std::io::ErrorKind::NotFound => "no such socket".into(),
        _ => toolhost_contract::cut(&error.to_string(), 200, |_| "...".into()).into_owned(),
    }
}

/// A Redis error as said to clients and logs: its kind and detail, never the URL it was
/// reached by.
pub(crate) fn without_url(error: &redis::RedisError) -> String {
    let detail = error.detail().unwrap_or_default();
    let kind = error.category();
    let text = if error.is_io_error() || error.is_connection_refusal() {
        "the connection failed".to_string()
    } else if detail.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}: {detail}")
    };
    toolhost_contract::cut(&text, 200, |_| "...".into()).into_owned()
}
