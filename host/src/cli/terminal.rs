//! Text from plugins and models, made safe for a terminal: every control character but line
//! breaks and tabs (escape sequences that set the clipboard or the window title, clear the
//! screen, move the cursor), the C1 controls and the bidirectional overrides that can make
//! text read other than it is are shown escaped (`\u{1b}`). `--json` output keeps text exact.

use std::borrow::Cow;

/// True for a character that must not reach a terminal as it is.
fn unsafe_char(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` with every unsafe character escaped.
pub(crate) fn safe(text: &str) -> Cow<'_, str> {
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if unsafe_char(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::safe;

    #[test]
    fn escapes_what_a_terminal_would_obey_and_keeps_the_rest() {
        // OSC 52 (write the clipboard), a window title, a screen clear, a bidi override.
        let hostile = "ok\u{1b}]52;c;ZXZpbA==\u{7}\u{1b}]0;pwned\u{7}\u{1b}[2J\u{202e}txt.exe";
        let shown = safe(hostile);
        assert!(!shown.chars().any(|c| c.is_control()), "{shown}");
        assert!(shown.starts_with("ok\\u{1b}]52;c;"), "{shown}");
        assert!(shown.contains("\\u{202e}"), "{shown}");
        assert_eq!(safe("two\nlines\tand é"), "two\nlines\tand é");
        assert!(matches!(safe("plain"), std::borrow::Cow::Borrowed(_)));
    }
}
