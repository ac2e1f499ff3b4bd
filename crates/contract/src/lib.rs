//! The contract between the callers of a tool and what runs it: the vocabulary every caller
//! (the MCP server, the agent loop, the web chat) and every backend (a component in the
//! sandbox, an imported MCP server) share, and nothing else. It sits above the runtime and
//! below every caller, so that no caller imports the engine for words (STYLE.md 11).
//!
//! - [`content`]: what a call returns: content items and a structured result;
//! - [`talk`]: a call talking back to its caller (progress, sampling, elicitation), the link
//!   the caller gives it, what may be granted and the bounds of each;
//! - [`RunError`]: how a call fails, one error for every kind of tool;
//! - [`Identity`]: who a call comes from (the local operator, a named token, a subject);
//! - [`CallLimits`], [`SourceHash`], [`BoxFuture`], [`cut`] (every bound on a text cuts it
//!   this way), and the process's TLS provider ([`tls`]).

pub mod content;
mod failure;
mod identity;
mod plain;
pub mod talk;
pub mod tls;

pub use content::{Content, EmbeddedResource, Media, ResourceContents, ToolResult};
pub use failure::{RunError, ToolFailure};
pub use identity::{Identity, IdentityKind, OPERATOR_TOKEN};
pub use plain::without_type_paths;
pub use talk::{
    ANSWER_BYTES, Answer, AnswerRefused, AskError, CallerLink, ELICIT_SCHEMA_BYTES,
    ELICITATIONS_PER_CALL, ElicitAnswer, MESSAGE_BYTES, PROGRESS_PER_CALL, Progress, Role,
    SAMPLE_MAX_TOKENS, SAMPLE_REQUEST_BYTES, SAMPLES_PER_CALL, SamplingRequest, SamplingResponse,
    TalkGrants, Unlinked, fit_answer,
};

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::io::Write;
use std::pin::Pin;
use std::time::Duration;

/// A boxed future, so that traits of async methods can be used as trait objects.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The limits of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CallLimits {
    pub timeout: Duration,
    pub memory_bytes: usize,
    pub max_output_bytes: usize,
    /// The largest HTTP response body a call may read (`max-response-bytes`).
    pub max_response_bytes: u64,
}

/// What runs a tool, by the blake3 of its bytes: a component's `.wasm`, or an imported MCP
/// server's settings. Another hash is another version of every tool it runs.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SourceHash(pub [u8; 32]);

impl SourceHash {
    /// Hashes `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        SourceHash(*blake3::hash(bytes).as_bytes())
    }
}

impl fmt::Display for SourceHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for SourceHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SourceHash({self})")
    }
}

/// The length of `value` written as compact JSON, without writing it out.
pub fn json_len(value: &serde_json::Value) -> usize {
    struct Count(usize);
    impl Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing to a counter cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// `text` cut to at most `limit` bytes on a character boundary, followed by `mark(bytes left
/// out)` when anything was: the one way every bound on a text cuts it (each bound says how
/// its cut shows). Borrowed when nothing was cut.
pub fn cut(text: &str, limit: usize, mark: impl FnOnce(usize) -> String) -> Cow<'_, str> {
    if text.len() <= limit {
        return Cow::Borrowed(text);
    }
    let kept = &text[..text.floor_char_boundary(limit)];
    Cow::Owned(format!("{kept}{}", mark(text.len() - kept.len())))
}

/// [`cut`], in place.
pub fn cut_in_place(text: &mut String, limit: usize, mark: impl FnOnce(usize) -> String) {
    if text.len() <= limit {
        return;
    }
    let kept = text.floor_char_boundary(limit);
    let left_out = text.len() - kept;
    text.truncate(kept);
    text.push_str(&mark(left_out));
}

#[cfg(test)]
mod cut_tests {
    use super::*;

    #[test]
    fn a_cut_keeps_whole_characters_and_says_what_it_left_out() {
        let mark = |n: usize| format!("[{n} cut]");
        assert_eq!(cut("short", 10, mark), "short");
        // "é" is two bytes: a cut at 2 keeps "a" and leaves out 4 bytes.
        assert_eq!(cut("aébc", 2, mark), "a[4 cut]");
        let mut text = String::from("aébc");
        cut_in_place(&mut text, 3, |_| String::new());
        assert_eq!(text, "aé");
        let mut text = String::from("fits");
        cut_in_place(&mut text, 4, |_| unreachable!("nothing is cut"));
        assert_eq!(text, "fits");
    }
}
