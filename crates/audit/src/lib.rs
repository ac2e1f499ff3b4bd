//! audit: one JSON line per call, appended to a file and written through at once ([`log`]:
//! what happens when it cannot be written, reopening after rotation, fsync). Arguments are
//! stored with secrets redacted ([`redact`]: by key, and secret-shaped values anywhere);
//! results only as a size and a short, equally redacted summary; error texts redacted too.
//! The values a call's tool was given from the host's environment are withheld from all
//! three ([`Withheld`]). The file is the host user's alone (0600).

mod log;
mod redact;
mod withheld;

pub use log::{AuditError, AuditHealth, AuditLog, OnAuditError};
pub use redact::{REDACTED, redact, redact_text, secret_key};
pub use withheld::Withheld;

use serde::Serialize;
use serde_json::Value;
use toolhost_contract::json_len;

/// Result summaries are cut to this many characters.
const SUMMARY_CHARS: usize = 200;
/// Arguments longer than this, written as JSON, are recorded as their first
/// [`CUT_ARGUMENT_CHARS`] characters and their size: a caller that sends megabytes of
/// arguments again and again must not fill the disk at the same rate.
pub const MAX_ARGUMENT_BYTES: usize = 64 << 10;
const CUT_ARGUMENT_CHARS: usize = 1024;
/// A tool name or error text is cut to this many bytes (an unknown tool's name is whatever
/// the caller sent).
pub const MAX_TEXT_BYTES: usize = 4096;

/// One call, as the audit log records it.
#[derive(Debug, Clone, Serialize)]
pub struct AuditRecord {
    /// RFC 3339, UTC, milliseconds.
    pub time: String,
    pub session: String,
    /// Who called (over HTTP): the identity's kind, name, client and groups; never a token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub identity: Option<std::sync::Arc<toolhost_contract::Identity>>,
    pub tool: String,
    /// What was asked for when it was no tool call: `prompt` (`tool` is the prompt's name)
    /// or `resource` (`tool` is the URI read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub ensemble: Option<String>,
    pub component: Option<String>,
    pub arguments: Value,
    /// The size of the arguments as JSON, when they were too long to record whole; then
    /// `arguments` is a string of their start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arguments_bytes: Option<usize>,
    /// `ok`, or the error kind (`timeout`, `invalid-arguments`, ...).
    pub outcome: String,
    pub error: Option<String>,
    pub duration_ms: f64,
    pub deduplicated: bool,
    pub result_bytes: usize,
    pub summary: String,
    /// The trace the call was part of (W3C ids, 32 and 16 hex digits), when traces are
    /// exported (docs/traces.md): what finds its spans in the collector.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub span_id: Option<String>,
}

/// `arguments`, redacted and without the `withheld` values, or the start of them and their
/// size when they are longer than [`MAX_ARGUMENT_BYTES`].
pub fn record_arguments(arguments: &Value, withheld: &Withheld) -> (Value, Option<usize>) {
    let redacted = redact(&withheld.value(arguments));
    // Measured without building the text: the common, small case costs no allocation.
    let bytes = json_len(&redacted);
    if bytes <= MAX_ARGUMENT_BYTES {
        return (redacted, None);
    }
    let start: String = redacted
        .to_string()
        .chars()
        .take(CUT_ARGUMENT_CHARS)
        .collect();
    (Value::String(format!("{start}…")), Some(bytes))
}

/// `text` cut to [`MAX_TEXT_BYTES`] on a character boundary, marked when cut.
pub fn cut_text(text: &str) -> String {
    toolhost_contract::cut(text, MAX_TEXT_BYTES, |_| "…".into()).into_owned()
}

/// The first `SUMMARY_CHARS` characters of a result, on one line.
pub fn summarize(text: &str) -> String {
    let mut summary: String = text
        .chars()
        .take(SUMMARY_CHARS)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if text.chars().nth(SUMMARY_CHARS).is_some() {
        summary.push('…');
    }
    summary
}

/// The summary of a tool's result: a JSON result is redacted like arguments are (tools echo
/// their input more often than not), anything else is summarized as it is; the `withheld`
/// values are taken out of the whole result first, so that none is cut in two and half of it
/// kept.
pub fn summarize_result(text: &str, withheld: &Withheld) -> String {
    match serde_json::from_str::<Value>(text) {
        Ok(value @ (Value::Object(_) | Value::Array(_))) => {
            summarize(&redact(&withheld.value(&value)).to_string())
        }
        _ => {
            let text = withheld.text(text);
            // Only the start is shown: look for secrets in a little more than that.
            summarize(&redact_text(
                &text[..text.floor_char_boundary(SUMMARY_CHARS * 8)],
            ))
        }
    }
}

/// A call's error text as its record keeps it: without the `withheld` values, redacted, and
/// cut to [`MAX_TEXT_BYTES`].
pub fn record_error(text: &str, withheld: &Withheld) -> String {
    cut_text(&redact_text(&withheld.text(text)))
}

/// Now, as RFC 3339 with milliseconds.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn redacts_secret_keys_at_any_depth() {
        let redacted = redact(
            &json!({"q": "x", "API_KEY": "k", "nested": [{"password": "p", "ok": 1}], "authToken": "t"}),
        );
        assert_eq!(
            redacted,
            json!({"q": "x", "API_KEY": "[redacted]", "nested": [{"password": "[redacted]", "ok": 1}], "authToken": "[redacted]"})
        );
    }

    #[test]
    fn json_results_are_redacted_in_summaries() {
        let none = Withheld::default();
        let summary = summarize_result(r#"{"token":"secret-value","ok":1}"#, &none);
        assert!(
            !summary.contains("secret-value") && summary.contains("[redacted]"),
            "{summary}"
        );
        assert!(!summarize_result(r#"[{"password":"pw"}]"#, &none).contains("pw"));
        assert_eq!(summarize_result("plain text", &none), "plain text");
    }

    #[test]
    fn withheld_values_leave_summaries_errors_and_arguments_whole_or_not_at_all() {
        // Long enough that the summary's cut falls inside it.
        let secret = format!("s3cr3t-{}", "x".repeat(2000));
        let withheld = Withheld::new([secret.as_str()]);
        for result in [
            format!("the key is {secret}, use it"),
            json!({"key": secret, "said": format!("key={secret}")}).to_string(),
            json!([format!("{secret}")]).to_string(),
        ] {
            let summary = summarize_result(&result, &withheld);
            assert!(!summary.contains("s3cr3t"), "{summary}");
            assert!(summary.contains(REDACTED), "{summary}");
        }
        let error = record_error(&format!("failed: upstream refused {secret}"), &withheld);
        assert_eq!(error, "failed: upstream refused [redacted]");
        let (arguments, _) = record_arguments(&json!({"q": secret.clone()}), &withheld);
        assert_eq!(arguments, json!({"q": "[redacted]"}));
    }

    #[test]
    fn long_arguments_and_texts_are_recorded_cut_with_their_size() {
        let small = json!({"q": "x", "password": "p"});
        assert_eq!(
            record_arguments(&small, &Withheld::default()),
            (json!({"q": "x", "password": "[redacted]"}), None)
        );
        let big = json!({"password": "p", "blob": "é".repeat(100_000)});
        let (recorded, bytes) = record_arguments(&big, &Withheld::default());
        let recorded = recorded.as_str().expect("a string").to_string();
        assert!(
            recorded.starts_with(r#"{"password":"[redacted]","blob":"éé"#),
            "{recorded}"
        );
        assert!(!recorded.contains("\"p\""));
        assert_eq!(recorded.chars().count(), CUT_ARGUMENT_CHARS + 1);
        assert_eq!(bytes, Some(redact(&big).to_string().len()));
        assert_eq!(cut_text("short"), "short");
        let cut = cut_text(&"é".repeat(10_000));
        assert!(
            cut.len() <= MAX_TEXT_BYTES + 3 && cut.ends_with('…'),
            "{}",
            cut.len()
        );
    }

    #[test]
    fn summaries_are_short_single_lines() {
        assert_eq!(summarize("a\nb"), "a b");
        assert_eq!(
            summarize(&"x".repeat(300)).chars().count(),
            SUMMARY_CHARS + 1
        );
    }
}
