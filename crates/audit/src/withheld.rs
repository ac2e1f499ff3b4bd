//! Values a call's record must never hold, whatever their shape: those the call's tool was
//! given from the host's environment (its environment variables, its settings taken from a
//! variable). A tool can return one, echo it in an error or hand it to the model, which may
//! send it back as an argument; each is replaced by `[redacted]` wherever it appears in the
//! arguments, the error text and the result summary before the record is written.
//! Secret-shaped text ([`crate::redact`]) is caught by its shape; these are caught by value.

use crate::REDACTED;
use serde_json::Value;
use std::borrow::Cow;

/// The shortest value withheld: one of three characters or fewer guards nothing (it is
/// guessed at once) and would blank every occurrence of common text (a `LANG` of `C`, a `TZ`
/// of `UTC`) in every summary.
pub const MIN_WITHHELD_BYTES: usize = 4;

/// The values withheld from one call's record.
#[derive(Debug, Default, Clone)]
pub struct Withheld<'a> {
    /// Longest first, so that a value that holds a shorter one is replaced whole; no empty one.
    values: Vec<&'a str>,
}

impl<'a> Withheld<'a> {
    /// Withholds each of `values` of at least [`MIN_WITHHELD_BYTES`].
    pub fn new(values: impl IntoIterator<Item = &'a str>) -> Self {
        let mut values: Vec<&str> = (values.into_iter())
            .filter(|v| v.len() >= MIN_WITHHELD_BYTES)
            .collect();
        values.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        values.dedup();
        Withheld { values }
    }

    /// True when nothing is withheld (the record is written as it would be without).
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// `text` with every occurrence of a withheld value replaced by `[redacted]`.
    pub fn text<'t>(&self, text: &'t str) -> Cow<'t, str> {
        let mut text = Cow::Borrowed(text);
        for value in &self.values {
            if text.contains(value) {
                text = Cow::Owned(text.replace(value, REDACTED));
            }
        }
        text
    }

    /// `value` with every withheld value replaced in its strings and keys, at any depth: a
    /// value with a quote or a backslash is found in the text it is, not in its JSON escape.
    pub fn value<'v>(&self, value: &'v Value) -> Cow<'v, Value> {
        if self.is_empty() {
            return Cow::Borrowed(value);
        }
        Cow::Owned(self.replaced(value))
    }

    fn replaced(&self, value: &Value) -> Value {
        match value {
            Value::String(text) => Value::String(self.text(text).into_owned()),
            Value::Array(items) => Value::Array(items.iter().map(|v| self.replaced(v)).collect()),
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(key, v)| (self.text(key).into_owned(), self.replaced(v)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_occurrence_is_replaced_the_longest_value_first() {
        let withheld = Withheld::new(["hunter2", "", "hunter2-and-more", "hunter2"]);
        assert_eq!(
            withheld.text("a hunter2-and-more b hunter2 c"),
            "a [redacted] b [redacted] c"
        );
        assert!(matches!(withheld.text("nothing here"), Cow::Borrowed(_)));
        assert!(Withheld::new([""]).is_empty());
        // A value too short to be a secret blanks nothing; a four-digit PIN is withheld.
        assert!(Withheld::new(["C", "UTC"]).is_empty());
        assert_eq!(Withheld::new(["4321"]).text("pin 4321"), "pin [redacted]");
    }

    #[test]
    fn values_are_found_in_strings_and_keys_not_in_their_escapes() {
        let secret = r#"pa"ss\word"#;
        let withheld = Withheld::new([secret]);
        let value = json!({"a": [format!("x{secret}y")], secret: 1, "n": 7});
        let replaced = withheld.value(&value).into_owned();
        assert_eq!(
            replaced,
            json!({"a": ["x[redacted]y"], "[redacted]": 1, "n": 7})
        );
        assert!(!replaced.to_string().contains("ss\\\\word"), "{replaced}");
        assert!(matches!(
            Withheld::default().value(&value),
            Cow::Borrowed(_)
        ));
    }
}
