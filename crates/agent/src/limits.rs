//! What one run may make the host hold and send, whatever the model answers: the calls one
//! answer may run, the bytes of results one run keeps, the size of each request to the model,
//! and the size a conversation may reach. `toolhost chat` and the web chat share them
//! (`[chat]` in `toolhost.toml`).
//!
//! Nothing is dropped silently: a call past the per-answer bound is answered with one
//! refusal that says how many were left out, a result cut short says how much is missing and
//! why, and a request cut to fit says so where the cut was made. The conversation itself
//! keeps every result as the run saw it (cut only by the run's budget): cutting for the
//! request happens on a copy, oldest parts first, so the model keeps the most recent context.

use crate::provider::conversation::{Conversation, Invocation, Message};
use serde_json::json;
use std::borrow::Cow;

/// The default of `[chat] max-calls-per-answer`.
pub const DEFAULT_MAX_CALLS_PER_ANSWER: usize = 32;
/// The default of `[chat] max-run-result-mib`.
pub const DEFAULT_MAX_RUN_RESULT_MIB: usize = 8;
/// The default of `[chat] max-request-mib`.
pub const DEFAULT_MAX_REQUEST_MIB: usize = 8;
/// The default of `[chat] max-conversation-mib`.
pub const DEFAULT_MAX_CONVERSATION_MIB: usize = 16;

/// What a part of a request keeps when it is cut to make the request fit: its start, so that
/// the model still sees what it was.
const KEPT_WHEN_CUT: usize = 1024;

/// The bounds of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunLimits {
    /// Tool calls of one answer that run; past them, one refusal answers for all the rest.
    pub max_calls_per_answer: usize,
    /// Bytes of tool results one run keeps, in all: a result that passes the budget is cut
    /// with a marker, and once it is spent the calls of later answers are not run.
    pub max_run_result_bytes: usize,
    /// Bytes of the conversation sent in one request to the model: past it, the oldest large
    /// parts are cut with a marker (on a copy) until the request fits.
    pub max_request_bytes: usize,
    /// Bytes a conversation may hold: a run does not start past it, and one that passes it
    /// ends before its next model call ([`crate::Ending::SizeLimit`]).
    pub max_conversation_bytes: usize,
}

impl Default for RunLimits {
    fn default() -> Self {
        RunLimits {
            max_calls_per_answer: DEFAULT_MAX_CALLS_PER_ANSWER,
            max_run_result_bytes: DEFAULT_MAX_RUN_RESULT_MIB << 20,
            max_request_bytes: DEFAULT_MAX_REQUEST_MIB << 20,
            max_conversation_bytes: DEFAULT_MAX_CONVERSATION_MIB << 20,
        }
    }
}

/// Bytes, as a person reads them in a message: `8 MiB`, `512 KiB`, `100 bytes`.
pub fn size(bytes: usize) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1 << 20 {
        format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
    } else if bytes >= 1 << 10 {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} bytes")
    }
}

/// What a conversation weighs: the bytes of its texts, names, arguments and results as JSON
/// strings carry them (escapes included: a control character is six bytes on the wire), about
/// what it takes in memory and on the wire.
pub fn conversation_bytes(conversation: &Conversation) -> usize {
    conversation.system.as_deref().map_or(0, json_len) + messages_bytes(&conversation.messages)
}

/// The bytes `text` takes inside a JSON string: `"` and `\` and the short escapes two, other
/// control characters six (`\u00XX`), everything else as it is.
pub fn json_len(text: &str) -> usize {
    text.bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
            0..0x20 => 6,
            _ => 1,
        })
        .sum()
}

fn messages_bytes(messages: &[Message]) -> usize {
    messages.iter().map(message_bytes).sum()
}

fn message_bytes(message: &Message) -> usize {
    match message {
        Message::User { text } => json_len(text),
        Message::Assistant { text, calls } => {
            json_len(text) + calls.iter().map(invocation_bytes).sum::<usize>()
        }
        Message::Results { results } => results
            .iter()
            .map(|r| json_len(&r.call_id) + json_len(&r.name) + json_len(&r.content))
            .sum(),
    }
}

fn invocation_bytes(call: &Invocation) -> usize {
    // OpenAI carries the arguments as a JSON string of JSON text: escaped once more.
    let arguments = match &call.arguments {
        serde_json::Value::String(text) => json_len(text),
        other => json_len(&other.to_string()),
    };
    json_len(&call.id) + json_len(&call.name) + arguments
}

/// Cuts `text` to its first `keep` bytes (on a character boundary) and says what was left out
/// and why; unchanged when it is no longer than that.
pub fn cut_with_marker(text: &mut String, keep: usize, why: &str) {
    toolhost_contract::cut_in_place(text, keep, |left_out| {
        format!("\n[toolhost: {} left out here: {why}]", size(left_out))
    });
}

/// The messages as they may be sent within `budget` bytes, of which `fixed` go to what is
/// sent whatever the messages (the system prompt, the tools): borrowed when they fit;
/// otherwise a copy whose oldest large parts (results, texts, call arguments) are cut to their
/// start with a marker, then, if that is not enough, to the marker alone. `None` when even
/// that does not fit.
pub fn fit_request<'m>(
    fixed: usize,
    messages: &'m [Message],
    budget: usize,
) -> Option<Cow<'m, [Message]>> {
    let mut total = fixed + messages_bytes(messages);
    if total <= budget {
        return Some(Cow::Borrowed(messages));
    }
    let why = format!(
        "the conversation is larger than a request to the model may be ([chat] \
         max-request-mib, {}); the full text is kept in the conversation",
        size(budget)
    );
    let mut fitted = messages.to_vec();
    for keep in [KEPT_WHEN_CUT, 0] {
        for message in &mut fitted {
            if total <= budget {
                return Some(Cow::Owned(fitted));
            }
            let before = message_bytes(message);
            cut_message(message, keep, &why);
            total = total - before + message_bytes(message);
        }
    }
    (total <= budget).then_some(Cow::Owned(fitted))
}

/// Cuts every part of `message` longer than `keep` (and longer than the marker it gets).
fn cut_message(message: &mut Message, keep: usize, why: &str) {
    // A part no longer than this gains nothing from a marker.
    let worth = keep + why.len() + 64;
    match message {
        Message::User { text } => {
            if text.len() > worth {
                cut_with_marker(text, keep, why);
            }
        }
        Message::Assistant { text, calls } => {
            if text.len() > worth {
                cut_with_marker(text, keep, why);
            }
            for call in calls {
                if invocation_bytes(call) > worth {
                    // The arguments stay a JSON object, as both wire formats want one.
                    call.arguments = json!({ "toolhost_cut": why });
                }
            }
        }
        Message::Results { results } => {
            for result in results {
                if result.content.len() > worth {
                    cut_with_marker(&mut result.content, keep, why);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::conversation::ToolResult;

    fn result(content: String) -> Message {
        Message::Results {
            results: vec![ToolResult {
                call_id: "c".into(),
                name: "t".into(),
                content,
                is_error: false,
            }],
        }
    }

    #[test]
    fn a_request_that_fits_is_borrowed_and_one_that_does_not_is_cut_oldest_first() {
        let messages = vec![
            Message::User { text: "hi".into() },
            result("a".repeat(600_000)),
            result("b".repeat(600_000)),
            Message::User {
                text: "and now?".into(),
            },
        ];
        assert!(matches!(
            fit_request(0, &messages, 2 << 20),
            Some(Cow::Borrowed(_))
        ));
        let fitted = fit_request(6, &messages, 1 << 20).expect("fits");
        assert!(messages_bytes(&fitted) + 6 <= 1 << 20);
        let Message::Results { results } = &fitted[1] else {
            panic!("results")
        };
        // The oldest result is cut to its start with the marker; the newer one is whole.
        assert!(results[0].content.starts_with(&"a".repeat(1024)));
        assert!(
            results[0].content.contains("left out here")
                && results[0].content.contains("max-request-mib"),
            "{}",
            &results[0].content[1024..]
        );
        let Message::Results { results } = &fitted[2] else {
            panic!("results")
        };
        assert_eq!(results[0].content.len(), 600_000);
        assert_eq!(fitted[3], messages[3]);
    }

    #[test]
    fn what_cannot_fit_even_cut_to_markers_is_none() {
        let messages: Vec<Message> = (0..1000).map(|_| result("x".repeat(5000))).collect();
        assert!(fit_request(0, &messages, 1000).is_none());
        let fitted = fit_request(0, &messages, 1 << 20).expect("fits with markers");
        assert!(messages_bytes(&fitted) <= 1 << 20);
        // What goes with every request counts: tools that take the whole budget leave none.
        assert!(fit_request(1 << 20, &messages, 1 << 20).is_none());
    }

    #[test]
    fn bytes_are_counted_as_the_wire_carries_them() {
        let controls = "\u{1}".repeat(1000);
        assert_eq!(json_len(&controls), 6000);
        assert_eq!(json_len("a\"b\n"), 6);
        assert_eq!(json_len("é"), 2);
        // A result of control characters is measured by its escaped size, as it is sent.
        let messages = vec![result(controls.clone())];
        let wire = serde_json::to_string(&controls).expect("json").len();
        assert!(messages_bytes(&messages) >= wire - 2);
    }

    #[test]
    fn a_cut_names_what_was_left_out() {
        let mut text = "é".repeat(1000);
        cut_with_marker(&mut text, 101, "because");
        assert!(text.starts_with(&"é".repeat(50)));
        assert!(
            text.ends_with("[toolhost: 1 KiB left out here: because]"),
            "{text}"
        );
        assert_eq!(size(8 << 20), "8 MiB");
        assert_eq!(size(1536 << 10), "1.5 MiB");
        assert_eq!(size(100), "100 bytes");
    }
}
