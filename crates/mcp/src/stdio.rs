//! MCP over stdin and stdout: one JSON-RPC message per line, as rmcp's own transport reads
//! and writes them, with the answers rmcp's transport does not give. A request too large
//! ([`MAX_MESSAGE_BYTES`]) or nested too deep to be read is answered with a JSON-RPC error
//! (`-32600`), carrying its id when the start of the message shows it and `null` otherwise, as
//! soon as the bound is passed (a client that sends 200 MB without a newline hears at 16 MiB),
//! and the session goes on with the next line. rmcp's transport drops such a line without an
//! answer, so its client waits for ever. Text that is not JSON at all is still ignored, as the
//! official SDKs do (answering it invites an error storm with a peer that echoes).
//!
//! Every line written, a message or an error, goes out whole: the writer keeps the line it is
//! writing, and whoever writes next (a response, a notification, an error) finishes it first,
//! so a write cancelled part-way never interleaves with another.

use rmcp::RoleServer;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde_json::{Value, json};
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};

/// The largest message read: rmcp's own bound, answered here instead of dropped.
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;
/// How far the start of an oversized message is read for its id.
const ID_SCAN_BYTES: usize = 64 << 10;
/// How much of the input is read at once.
const READ_BUFFER: usize = 64 << 10;

/// The stdio transport of `serve`.
pub struct BoundedStdio<R, W> {
    read: BufReader<R>,
    /// The line read so far.
    line: Vec<u8>,
    /// The current line passed the bound: its rest is skipped.
    discarding: bool,
    /// An error answer to write before reading on.
    pending: Option<Vec<u8>>,
    write: Arc<tokio::sync::Mutex<Lines<W>>>,
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> BoundedStdio<R, W> {
    pub fn new(read: R, write: W) -> Self {
        BoundedStdio {
            read: BufReader::with_capacity(READ_BUFFER, read),
            line: Vec::new(),
            discarding: false,
            pending: None,
            write: Arc::new(tokio::sync::Mutex::new(Lines {
                write,
                queued: Default::default(),
                written: 0,
            })),
        }
    }
}

/// The output, a whole line at a time.
struct Lines<W> {
    write: W,
    /// Lines handed over and not yet all out, and how much of the first is: a writer whose
    /// write was cancelled part-way leaves them to the next one.
    queued: std::collections::VecDeque<Vec<u8>>,
    written: usize,
}

impl<W: AsyncWrite + Unpin> Lines<W> {
    /// Hands `line` over (at once: a cancelled caller loses nothing) and writes everything
    /// handed over so far.
    async fn line(&mut self, line: Vec<u8>) -> std::io::Result<()> {
        self.queued.push_back(line);
        self.finish().await
    }

    async fn finish(&mut self) -> std::io::Result<()> {
        while let Some(line) = self.queued.front() {
            while self.written < line.len() {
                let n = self.write.write(&line[self.written..]).await?;
                if n == 0 {
                    return Err(std::io::ErrorKind::WriteZero.into());
                }
                self.written += n;
            }
            self.queued.pop_front();
            self.written = 0;
        }
        self.write.flush().await
    }
}

/// What one step of reading found.
enum Read {
    /// A whole line is in `line`.
    Line,
    /// More is needed.
    More,
    /// The input ended.
    End,
}

impl<R, W> BoundedStdio<R, W>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    /// Reads on (cancel-safe: what was read stays in `line`), answering a line that passes
    /// the bound as soon as it does.
    async fn read_step(&mut self) -> std::io::Result<Read> {
        let available = self.read.fill_buf().await?;
        if available.is_empty() {
            return Ok(Read::End);
        }
        let newline = available.iter().position(|&b| b == b'\n');
        let take = newline.map_or(available.len(), |at| at + 1);
        if self.discarding {
            self.read.consume(take);
            self.discarding = newline.is_none();
            return Ok(Read::More);
        }
        if self.line.len() + take > MAX_MESSAGE_BYTES {
            let room = ID_SCAN_BYTES.saturating_sub(self.line.len()).min(take);
            self.line.extend_from_slice(&available[..room]);
            self.read.consume(take);
            self.discarding = newline.is_none();
            let head = head_of(&self.line);
            // Its memory goes with it (the next line starts small again).
            self.line = Vec::new();
            tracing::warn!(
                "an MCP message over stdio passed {} MiB; skipped",
                MAX_MESSAGE_BYTES >> 20
            );
            // A response (to the server's own request) is never answered, as JSON-RPC says.
            if !head.response {
                self.pending = Some(error_line(
                    head.id,
                    &format!(
                        "the message is larger than the {} MiB a message may be; it was not \
                         read",
                        MAX_MESSAGE_BYTES >> 20
                    ),
                ));
            }
            return Ok(Read::More);
        }
        self.line.extend_from_slice(&available[..take]);
        self.read.consume(take);
        Ok(if newline.is_some() {
            Read::Line
        } else {
            Read::More
        })
    }

    /// The message of the line read, or an error answer for it (in `pending`), or nothing.
    fn message(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        let line = std::mem::take(&mut self.line);
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        let text = text.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(text);
        if text.iter().all(u8::is_ascii_whitespace) {
            return None;
        }
        let error = match serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(text) {
            Ok(message) => return Some(message),
            Err(e) => e,
        };
        let head = head_of(text);
        let reason = if head.response {
            // A response is never answered, as JSON-RPC says.
            None
        } else if error.to_string().starts_with("recursion limit exceeded") {
            Some("the message is nested too deep to be read (128 levels at most)".to_string())
        } else if error.classify() == serde_json::error::Category::Data
            && head.id.is_some()
            && head.method
        {
            Some(format!("not a request this server takes: {error}"))
        } else {
            // Not JSON, or a notification (no id): nothing to answer.
            None
        };
        let Some(reason) = reason else {
            tracing::debug!("ignoring an unreadable MCP message over stdio: {error}");
            return None;
        };
        self.pending = Some(error_line(head.id, &reason));
        None
    }
}

impl<R, W> rmcp::transport::Transport<RoleServer> for BoundedStdio<R, W>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let write = Arc::clone(&self.write);
        async move {
            let mut line = serde_json::to_vec(&item)?;
            line.push(b'\n');
            write.lock().await.line(line).await
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            if self.pending.is_some() {
                let mut write = self.write.lock().await;
                // Handed over whole: a cancelled write is finished by the next writer.
                let line = self.pending.take().unwrap_or_default();
                if write.line(line).await.is_err() {
                    return None;
                }
            }
            match self.read_step().await {
                Ok(Read::Line) => {
                    if let Some(message) = self.message() {
                        return Some(message);
                    }
                }
                Ok(Read::More) => {}
                Ok(Read::End) => return None,
                Err(e) => {
                    tracing::error!("cannot read MCP messages from stdin: {e}");
                    return None;
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        let mut write = self.write.lock().await;
        write.finish().await?;
        write.write.shutdown().await
    }
}

/// A JSON-RPC error answer (`-32600`, Invalid Request) to `id`, as a line.
fn error_line(id: Option<Value>, message: &str) -> Vec<u8> {
    let answer = json!({
        "jsonrpc": "2.0",
        "id": id.unwrap_or(Value::Null),
        "error": { "code": -32600, "message": message },
    });
    let mut line = answer.to_string().into_bytes();
    line.push(b'\n');
    line
}

/// What the start of a JSON-RPC message shows, read before whatever makes the rest
/// unreadable: its `id` (a number or a string, as JSON-RPC ids are), and whether it names a
/// `method` (a request or a notification) or carries a `result` or an `error` (a response).
#[derive(Debug, Default)]
struct Head {
    id: Option<Value>,
    method: bool,
    response: bool,
}

fn head_of(text: &[u8]) -> Head {
    struct Top<'a>(&'a mut Head);
    impl<'de> Visitor<'de> for Top<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON-RPC message")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(key) = map.next_key::<String>()? {
                match key.as_str() {
                    "id" => {
                        let id: Value = map.next_value()?;
                        if id.is_number() || id.is_string() {
                            self.0.id = Some(id);
                        }
                    }
                    "method" => {
                        self.0.method = true;
                        map.next_value::<IgnoredAny>()?;
                    }
                    "result" | "error" => {
                        self.0.response = true;
                        map.next_value::<IgnoredAny>()?;
                    }
                    _ => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(())
        }
    }
    let mut head = Head::default();
    let mut reader = serde_json::Deserializer::from_slice(&text[..text.len().min(ID_SCAN_BYTES)]);
    let _ = serde::Deserializer::deserialize_map(&mut reader, Top(&mut head));
    head
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_is_read_from_the_start_of_what_cannot_be_read_whole() {
        let id_of = |text: &[u8]| head_of(text).id;
        assert_eq!(
            id_of(br#"{"jsonrpc":"2.0","id":7,"params":[[[[["#),
            Some(json!(7))
        );
        let head = head_of(br#"{"id":"a-b","method":"tools/call","params":{"x":"#);
        assert_eq!(
            (head.id, head.method, head.response),
            (Some(json!("a-b")), true, false)
        );
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":3,"params":{}}}"#,
            "[".repeat(100_000)
        );
        assert_eq!(id_of(deep.as_bytes()), Some(json!(3)));
        // After the part that cannot be read, or not a number or a string: none.
        let late = format!(r#"{{"params":{},"id":3}}"#, "[".repeat(100_000));
        assert_eq!(id_of(late.as_bytes()), None);
        assert_eq!(id_of(br#"{"id":{"x":1}}"#), None);
        assert_eq!(id_of(b"not json"), None);
        // A response is known as one.
        assert!(head_of(br#"{"jsonrpc":"2.0","id":9,"result":{"x":[[[["#).response);
    }

    #[tokio::test]
    async fn oversized_and_deep_requests_are_answered_and_the_session_goes_on() {
        use rmcp::transport::Transport;
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"x","arguments":{{"a":{}}}}}}}"#,
            "[".repeat(1000)
        );
        let mut input = Vec::new();
        input.extend_from_slice(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"big":""#);
        input.extend(std::iter::repeat_n(b'x', MAX_MESSAGE_BYTES + 10));
        input.extend_from_slice(b"\"}}}\n");
        input.extend_from_slice(deep.as_bytes());
        input.push(b'\n');
        input.extend_from_slice(b"garbage that is not JSON\n");
        // A response (to a request of the server's) too large to read: never answered.
        input.extend_from_slice(br#"{"jsonrpc":"2.0","id":8,"result":{"content":""#);
        input.extend(std::iter::repeat_n(b'z', MAX_MESSAGE_BYTES + 10));
        input.extend_from_slice(b"\"}}\n");
        input.extend_from_slice(br#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#);
        input.push(b'\n');
        let (output, mut written) = tokio::io::duplex(1 << 20);
        let mut transport = BoundedStdio::new(std::io::Cursor::new(input), output);
        let message = transport.receive().await.expect("the ping after them");
        assert!(
            serde_json::to_string(&message)
                .expect("json")
                .contains("\"ping\""),
            "{message:?}"
        );
        assert!(transport.receive().await.is_none());
        transport.close().await.expect("close");
        let mut answers = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut written, &mut answers)
            .await
            .expect("read");
        let answers: Vec<Value> = answers
            .lines()
            .map(|l| serde_json::from_str(l).expect("a whole JSON line"))
            .collect();
        assert_eq!(answers.len(), 2, "{answers:?}");
        assert_eq!(answers[0]["id"], 1);
        assert_eq!(answers[0]["error"]["code"], -32600);
        assert!(
            answers[0]["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("larger than the 16 MiB"))
        );
        assert_eq!(answers[1]["id"], 2);
        assert!(
            answers[1]["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("nested too deep"))
        );
    }
}
