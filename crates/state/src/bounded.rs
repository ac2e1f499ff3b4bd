//! bounded: what one Redis reply may hold, checked as its bytes arrive and before the client
//! crate buffers them. The `redis` crate parses a reply only once it is whole and sets no bound
//! of its own: a bulk string announced as `$2147483647`, a line that never ends or an array
//! of `*100000000` elements would be buffered (or reserved) without end. [`Bounded`] sits
//! between the socket and the crate and follows the RESP framing (only where each value
//! starts and ends, never its contents); a reply past [`MAX_REPLY_BYTES`] or announcing more
//! than [`MAX_REPLY_ELEMENTS`] values is a protocol error that ends the connection (the
//! engine reconnects for the next request), before the bytes past the bound are read.
//!
//! What toolhost reads from Redis is small: a script's two numbers, an address of at most
//! 256 bytes, a shared result of at most 1 MiB (`dedup::MAX_SHARED_BYTES`).

use std::io;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The most bytes one reply may take (its headers and contents).
pub const MAX_REPLY_BYTES: u64 = 4 << 20;

/// The most values one reply may announce (the elements of its arrays, maps and sets, nested
/// ones included): the crate reserves room for them as soon as their count is read.
pub const MAX_REPLY_ELEMENTS: u64 = 65_536;

/// The most bytes of one header line (a simple string, an error, a number, a length).
const MAX_LINE_BYTES: u64 = 64 << 10;

/// A stream from Redis whose replies are held to the bounds above. Why one was refused is
/// kept in [`Bounded::refusal`] for the engine's error message.
pub(crate) struct Bounded<S> {
    inner: S,
    scan: Scan,
    refused: Arc<OnceLock<String>>,
}

impl<S> Bounded<S> {
    pub(crate) fn new(inner: S) -> Self {
        Bounded {
            inner,
            scan: Scan::default(),
            refused: Arc::default(),
        }
    }

    /// Set once a reply was refused, to why.
    pub(crate) fn refusal(&self) -> Arc<OnceLock<String>> {
        Arc::clone(&self.refused)
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Bounded<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some(why) = self.refused.get() {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, why.clone())));
        }
        let before = buf.filled().len();
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if let Err(why) = this.scan.feed(&buf.filled()[before..]) {
                    buf.set_filled(before);
                    let _ = this.refused.set(why.clone());
                    return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, why)));
                }
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Bounded<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Where the stream is in RESP's framing.
#[derive(Default)]
struct Scan {
    /// Bytes of the reply being read.
    bytes: u64,
    /// Values its aggregates announced so far.
    elements: u64,
    /// Values still to come in each aggregate open around this point, innermost last.
    open: Vec<u64>,
    at: At,
}

#[derive(Default)]
enum At {
    /// At a value's first byte, its type.
    #[default]
    Type,
    /// In the header line of a value of type `kind`: its number so far, its sign, how long.
    Line {
        kind: u8,
        number: u64,
        negative: bool,
        length: u64,
    },
    /// In a blob's contents and the CRLF after them: this many bytes left.
    Blob { left: u64 },
}

impl Scan {
    /// Follows `bytes` through the framing; refuses them, saying why, past a bound.
    fn feed(&mut self, mut bytes: &[u8]) -> Result<(), String> {
        while !bytes.is_empty() {
            match &mut self.at {
                At::Type => {
                    self.count(1)?;
                    self.at = At::Line {
                        kind: bytes[0],
                        number: 0,
                        negative: false,
                        length: 0,
                    };
                    bytes = &bytes[1..];
                }
                At::Line {
                    kind,
                    number,
                    negative,
                    length,
                } => {
                    let end = bytes.iter().position(|b| *b == b'\n');
                    let line = &bytes[..end.unwrap_or(bytes.len())];
                    *length += line.len() as u64;
                    if *length > MAX_LINE_BYTES {
                        return Err(format!(
                            "a Redis reply had a line longer than {MAX_LINE_BYTES} bytes"
                        ));
                    }
                    for byte in line {
                        match byte {
                            b'0'..=b'9' => {
                                *number = number
                                    .saturating_mul(10)
                                    .saturating_add(u64::from(byte - b'0'));
                            }
                            b'-' => *negative = true,
                            _ => {}
                        }
                    }
                    let consumed = line.len() + usize::from(end.is_some());
                    let (kind, number, negative) = (*kind, *number, *negative);
                    self.count(consumed as u64)?;
                    bytes = &bytes[consumed..];
                    if end.is_some() {
                        self.header(kind, number, negative)?;
                    }
                }
                At::Blob { left } => {
                    let take = (*left).min(bytes.len() as u64);
                    *left -= take;
                    let done = *left == 0;
                    bytes = &bytes[take as usize..];
                    if done {
                        self.done();
                    }
                }
            }
        }
        Ok(())
    }

    /// `n` more bytes of the reply.
    fn count(&mut self, n: u64) -> Result<(), String> {
        self.bytes += n;
        if self.bytes > MAX_REPLY_BYTES {
            return Err(format!(
                "a Redis reply was larger than {} MiB, the most toolhost reads",
                MAX_REPLY_BYTES >> 20
            ));
        }
        Ok(())
    }

    /// A header line of type `kind` ended, with the number it carried.
    fn header(&mut self, kind: u8, number: u64, negative: bool) -> Result<(), String> {
        match kind {
            // Blobs: a bulk string, a blob error, a verbatim string; `$-1` is nil.
            b'$' | b'!' | b'=' if !negative => {
                let size = number.saturating_add(2);
                if self.bytes.saturating_add(size) > MAX_REPLY_BYTES {
                    return Err(format!(
                        "a Redis reply announced a string of {number} bytes, more than the \
                         {} MiB toolhost reads",
                        MAX_REPLY_BYTES >> 20
                    ));
                }
                self.bytes += size;
                self.at = At::Blob { left: size };
                Ok(())
            }
            // Aggregates: an array, a set, a push, a map (pairs), an attribute (pairs and then
            // the value they describe, as the crate reads it).
            b'*' | b'~' | b'>' | b'%' | b'|' if !negative && number > 0 => {
                let values = match kind {
                    b'%' => number.saturating_mul(2),
                    b'|' => number.saturating_mul(2).saturating_add(1),
                    _ => number,
                };
                self.elements = self.elements.saturating_add(values);
                if self.elements > MAX_REPLY_ELEMENTS {
                    return Err(format!(
                        "a Redis reply announced {} values, more than the {MAX_REPLY_ELEMENTS} \
                         toolhost reads",
                        self.elements
                    ));
                }
                self.open.push(values);
                self.at = At::Type;
                Ok(())
            }
            // A line that is the whole value, a nil, an empty aggregate.
            _ => {
                self.done();
                Ok(())
            }
        }
    }

    /// A value ended: so may the aggregates around it, and then the reply.
    fn done(&mut self) {
        self.at = At::Type;
        loop {
            let Some(left) = self.open.last_mut() else {
                self.bytes = 0;
                self.elements = 0;
                return;
            };
            *left -= 1;
            if *left > 0 {
                return;
            }
            self.open.pop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `stream` in pieces of `piece` bytes.
    fn feed(stream: &[u8], piece: usize) -> Result<Scan, String> {
        let mut scan = Scan::default();
        for chunk in stream.chunks(piece) {
            scan.feed(chunk)?;
        }
        Ok(scan)
    }

    #[test]
    fn replies_of_every_kind_pass_in_any_pieces_and_each_ends_where_it_ends() {
        let big = vec![b'x'; 1 << 20];
        let mut stream = Vec::new();
        stream.extend_from_slice(b"+OK\r\n-ERR no\r\n:42\r\n$-1\r\n*-1\r\n*0\r\n_\r\n");
        stream.extend_from_slice(b"*2\r\n:1\r\n:0\r\n");
        stream.extend_from_slice(b"*2\r\n$3\r\nabc\r\n*2\r\n$0\r\n\r\n%1\r\n+k\r\n:1\r\n");
        stream.extend_from_slice(b"|1\r\n+a\r\n:1\r\n$2\r\nhi\r\n");
        stream.extend_from_slice(format!("${}\r\n", big.len()).as_bytes());
        stream.extend_from_slice(&big);
        stream.extend_from_slice(b"\r\n");
        // Contents that look like framing are contents.
        stream.extend_from_slice(b"$9\r\n*9\r\n$99\r\n\r\n");
        for piece in [1, 2, 3, 7, 64, 4096, stream.len()] {
            let scan = feed(&stream, piece).expect("within the bounds");
            assert!(scan.open.is_empty(), "piece {piece}");
            assert_eq!(scan.bytes, 0, "every reply ended (piece {piece})");
            assert!(matches!(scan.at, At::Type));
        }
    }

    #[test]
    fn a_reply_past_a_bound_is_refused_before_its_bytes_arrive() {
        let refused = feed(b"$2147483647\r\nabc", 4).err().expect("too large");
        assert!(refused.contains("2147483647 bytes"), "{refused}");
        let refused = feed(b"*100000000\r\n", 64).err().expect("too many");
        assert!(refused.contains("100000000 values"), "{refused}");
        // Nested aggregates count together.
        let nested = "*60000\r\n*60000\r\n".as_bytes();
        assert!(feed(nested, 3).is_err());
        // A line that never ends.
        let endless = vec![b'a'; (MAX_LINE_BYTES + 2) as usize];
        let mut line = b"+".to_vec();
        line.extend_from_slice(&endless);
        let refused = feed(&line, 1000).err().expect("too long a line");
        assert!(refused.contains("line longer"), "{refused}");
        // Many small values in one array add up to the reply's bound.
        let mut many = format!("*{MAX_REPLY_ELEMENTS}\r\n").into_bytes();
        let element = format!("${}\r\n{}\r\n", 100, "y".repeat(100));
        for _ in 0..MAX_REPLY_ELEMENTS {
            many.extend_from_slice(element.as_bytes());
        }
        let refused = feed(&many, 8192).err().expect("too many bytes");
        assert!(refused.contains("4 MiB"), "{refused}");
    }

    #[test]
    fn the_bounds_are_per_reply() {
        let reply = format!("${}\r\n{}\r\n", 3 << 20, "z".repeat(3 << 20));
        let mut stream = Vec::new();
        for _ in 0..4 {
            stream.extend_from_slice(reply.as_bytes());
        }
        feed(&stream, 65536).expect("four replies of 3 MiB each");
    }
}
