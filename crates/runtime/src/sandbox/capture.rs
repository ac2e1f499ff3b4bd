//! `Capture`: a plugin's stdout or stderr, kept in memory up to a cap. Bytes past the cap are
//! counted and dropped, never written anywhere: a plugin cannot reach the host's own stdout
//! (which carries the MCP protocol in `serve`) and cannot grow the host's memory by printing.

use bytes::Bytes;
use std::sync::{Arc, Mutex, PoisonError};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

#[derive(Debug, Default)]
struct Buffer {
    kept: Vec<u8>,
    dropped: u64,
}

/// One captured stream. Clones share the buffer.
#[derive(Debug, Clone)]
pub(crate) struct Capture {
    cap: usize,
    buffer: Arc<Mutex<Buffer>>,
}

impl Capture {
    pub(crate) fn new(cap: usize) -> Self {
        Capture {
            cap,
            buffer: Arc::default(),
        }
    }

    fn push(&self, bytes: &[u8]) {
        let mut buffer = self.buffer.lock().unwrap_or_else(PoisonError::into_inner);
        let room = self.cap.saturating_sub(buffer.kept.len());
        let keep = room.min(bytes.len());
        buffer.kept.extend_from_slice(&bytes[..keep]);
        buffer.dropped += (bytes.len() - keep) as u64;
    }

    /// What was kept, as text, and how many bytes were dropped past the cap.
    pub(crate) fn take(&self) -> (String, u64) {
        let mut buffer = self.buffer.lock().unwrap_or_else(PoisonError::into_inner);
        let kept = std::mem::take(&mut buffer.kept);
        (String::from_utf8_lossy(&kept).into_owned(), buffer.dropped)
    }
}

impl IsTerminal for Capture {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for Capture {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for Capture {
    async fn ready(&mut self) {}
}

#[wasmtime_wasi::async_trait]
impl OutputStream for Capture {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        // Always writable: past the cap, writes are counted and dropped.
        Ok(64 * 1024)
    }
}

impl tokio::io::AsyncWrite for Capture {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.push(buf);
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_up_to_the_cap_and_counts_the_rest() {
        let capture = Capture::new(4);
        capture.push(b"abc");
        capture.push(b"defgh");
        assert_eq!(capture.take(), ("abcd".to_string(), 4));
    }
}
