//! An imported server's stderr, into the host's debug log, bounded: a server is not trusted
//! to be brief.

use std::time::{Duration, Instant};

/// Bytes of one stderr line that are logged; the rest of the line is dropped.
const STDERR_LINE_BYTES: usize = 4096;
/// Stderr lines logged per second, at most; the others are counted and dropped.
const STDERR_LINES_PER_SECOND: u32 = 100;

/// The server's stderr, line by line, into the host's log (debug, like plugins' output). A
/// server is not trusted to be brief: each line is cut at [`STDERR_LINE_BYTES`] (a line
/// without an end never piles up in memory) and at most [`STDERR_LINES_PER_SECOND`] are
/// logged, the drops counted in one line per second.
pub(super) fn forward_stderr(server: String, stderr: tokio::process::ChildStderr) {
    use tokio::io::AsyncReadExt;
    tokio::spawn(async move {
        let mut stderr = stderr;
        let mut chunk = vec![0u8; 8192];
        let mut line = Vec::with_capacity(256);
        let mut cut = false;
        let mut budget = StderrBudget::new();
        while let Ok(read) = stderr.read(&mut chunk).await {
            if read == 0 {
                break;
            }
            for &byte in &chunk[..read] {
                if byte == b'\n' {
                    budget.log(&server, &line, cut);
                    line.clear();
                    cut = false;
                } else if line.len() < STDERR_LINE_BYTES {
                    line.push(byte);
                } else {
                    cut = true;
                }
            }
        }
        if !line.is_empty() {
            budget.log(&server, &line, cut);
        }
        budget.report(&server);
    });
}

/// How many stderr lines a server may still log this second.
struct StderrBudget {
    second: Instant,
    logged: u32,
    dropped: u64,
}

impl StderrBudget {
    fn new() -> Self {
        StderrBudget {
            second: Instant::now(),
            logged: 0,
            dropped: 0,
        }
    }

    fn log(&mut self, server: &str, line: &[u8], cut: bool) {
        if self.second.elapsed() >= Duration::from_secs(1) {
            self.report(server);
            self.second = Instant::now();
            self.logged = 0;
        }
        if self.logged >= STDERR_LINES_PER_SECOND {
            self.dropped += 1;
            return;
        }
        self.logged += 1;
        let text = String::from_utf8_lossy(line);
        let more = if cut { " [line cut]" } else { "" };
        tracing::debug!(target: "plugin", server, "{text}{more}");
    }

    fn report(&mut self, server: &str) {
        if self.dropped > 0 {
            tracing::debug!(
                target: "plugin",
                server,
                "dropped {} stderr lines over {STDERR_LINES_PER_SECOND} a second",
                self.dropped
            );
            self.dropped = 0;
        }
    }
}
