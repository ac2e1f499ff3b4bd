//! Server-sent events, decoded from bytes that arrive in chunks of any size (a chunk may end
//! inside a line, or inside a UTF-8 character).

/// One event: its `event:` name, if any, and its `data:` lines joined by `\n`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub name: Option<String>,
    pub data: String,
}

/// Turns a byte stream into events, in time linear in the bytes: each byte is looked at once
/// when searching for line ends, however the stream is cut into chunks.
#[derive(Debug, Default)]
pub struct Decoder {
    /// Bytes of a line not yet ended.
    pending: Vec<u8>,
    /// How many bytes of `pending` are known to hold no line end.
    scanned: usize,
    name: Option<String>,
    data: Vec<String>,
}

impl Decoder {
    /// Takes the next chunk; returns the events it completes.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<Event> {
        self.pending.extend_from_slice(chunk);
        let mut events = Vec::new();
        let mut start = 0;
        let mut from = self.scanned;
        while let Some(offset) = self.pending[from..].iter().position(|&b| b == b'\n') {
            let end = from + offset;
            let line = String::from_utf8_lossy(&self.pending[start..end]).into_owned();
            self.line(line.trim_end_matches('\r'), &mut events);
            start = end + 1;
            from = start;
        }
        self.pending.drain(..start);
        self.scanned = self.pending.len();
        events
    }

    /// Ends the stream: a last event without its blank line still counts.
    pub fn finish(&mut self) -> Vec<Event> {
        let mut events = Vec::new();
        if !self.pending.is_empty() {
            self.scanned = 0;
            let rest = std::mem::take(&mut self.pending);
            let rest = String::from_utf8_lossy(&rest);
            self.line(rest.trim_end_matches('\r'), &mut events);
        }
        self.line("", &mut events);
        events
    }

    fn line(&mut self, line: &str, events: &mut Vec<Event>) {
        if line.is_empty() {
            if !self.data.is_empty() {
                events.push(Event {
                    name: self.name.take(),
                    data: std::mem::take(&mut self.data).join("\n"),
                });
            }
            self.name = None;
            return;
        }
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => self.name = Some(value.to_string()),
            "data" => self.data.push(value.to_string()),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STREAM: &str = ": keep-alive\r\nevent: message_start\r\ndata: {\"a\":\"é\"}\r\n\r\ndata: line one\ndata: line two\n\ndata: [DONE]";

    #[test]
    fn decodes_any_chunking_the_same() {
        let whole = {
            let mut d = Decoder::default();
            let mut events = d.feed(STREAM.as_bytes());
            events.extend(d.finish());
            events
        };
        assert_eq!(
            whole,
            vec![
                Event {
                    name: Some("message_start".into()),
                    data: "{\"a\":\"é\"}".into()
                },
                Event {
                    name: None,
                    data: "line one\nline two".into()
                },
                Event {
                    name: None,
                    data: "[DONE]".into()
                },
            ]
        );
        for size in 1..8 {
            let mut d = Decoder::default();
            let mut events = Vec::new();
            for chunk in STREAM.as_bytes().chunks(size) {
                events.extend(d.feed(chunk));
            }
            events.extend(d.finish());
            assert_eq!(events, whole, "chunks of {size} byte(s)");
        }
    }

    #[test]
    fn a_long_line_in_small_chunks_is_scanned_once() {
        // 4 MB in 1-byte chunks: a decoder that rescans its buffer per chunk does 8e12 steps.
        let mut d = Decoder::default();
        let line = format!("data: {}", "x".repeat(4_000_000));
        let mut events = Vec::new();
        for byte in line.as_bytes().chunks(1) {
            events.extend(d.feed(byte));
        }
        events.extend(d.feed(b"\n\n"));
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].data.len(), 4_000_000);
    }
}
