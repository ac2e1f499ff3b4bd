//! plain: an error's text as people and models read it, without the Rust type paths a
//! dependency's `Display` may carry (rmcp's transport errors name their transport by
//! `std::any::type_name`: `Transport [rmcp::transport::worker::WorkerTransport<...>] error:
//! ...`). Every error that crosses to a client, a model, an operator or the audit log from a
//! dependency goes through [`without_type_paths`].

use std::borrow::Cow;

/// `text` with each Rust type path (`a::b::C`, with generic arguments) taken out: one in
/// brackets goes with its brackets, any other becomes its last name (`C`). Text without `::`
/// is returned as it is.
pub fn without_type_paths(text: &str) -> Cow<'_, str> {
    if !text.contains("::") {
        return Cow::Borrowed(text);
    }
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    while at < chars.len() {
        // A bracketed path, and the space before it.
        if chars[at] == '['
            && let Some(end) = path_end(&chars, at + 1)
            && chars.get(end) == Some(&']')
            && has_separator(&chars[at + 1..end])
        {
            if out.ends_with(' ') {
                out.pop();
            }
            at = end + 1;
            continue;
        }
        let starts_word = at == 0 || !is_name(chars[at - 1]);
        if starts_word
            && is_name_start(chars[at])
            && let Some(end) = path_end(&chars, at)
            && has_separator(&chars[at..end])
        {
            out.push_str(&last_name(&chars[at..end]));
            at = end;
            continue;
        }
        out.push(chars[at]);
        at += 1;
    }
    Cow::Owned(out)
}

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_name(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Whether `path` names a module (a `::` outside its generic arguments).
fn has_separator(path: &[char]) -> bool {
    let mut depth = 0usize;
    for (i, c) in path.iter().enumerate() {
        match c {
            '<' => depth += 1,
            '>' => depth = depth.saturating_sub(1),
            ':' if depth == 0 && path.get(i + 1) == Some(&':') => return true,
            _ => {}
        }
    }
    false
}

/// Where the path that starts at `start` ends: names joined by `::`, each perhaps with
/// generic arguments in balanced `<...>` (of paths, `&`, `'a`, `,` and spaces). `None` when
/// no name starts there or its generic arguments do not close.
fn path_end(chars: &[char], start: usize) -> Option<usize> {
    let mut at = start;
    loop {
        if !chars.get(at).is_some_and(|c| is_name_start(*c)) {
            return None;
        }
        while chars.get(at).is_some_and(|c| is_name(*c)) {
            at += 1;
        }
        if chars.get(at) == Some(&'<') {
            let mut depth = 0usize;
            loop {
                match chars.get(at) {
                    Some('<') => depth += 1,
                    Some('>') => {
                        depth -= 1;
                        if depth == 0 {
                            at += 1;
                            break;
                        }
                    }
                    Some(c) if is_name(*c) || matches!(c, ':' | '&' | '\'' | ',' | ' ') => {}
                    _ => return None,
                }
                at += 1;
            }
        }
        if chars.get(at) == Some(&':') && chars.get(at + 1) == Some(&':') {
            at += 2;
            continue;
        }
        return Some(at);
    }
}

/// The last name of a path, without its generic arguments.
fn last_name(path: &[char]) -> String {
    let mut depth = 0usize;
    let mut last = String::new();
    let mut i = 0;
    while i < path.len() {
        match path[i] {
            '<' => depth += 1,
            '>' => depth = depth.saturating_sub(1),
            ':' if depth == 0 && path.get(i + 1) == Some(&':') => {
                last.clear();
                i += 2;
                continue;
            }
            c if depth == 0 => last.push(c),
            _ => {}
        }
        i += 1;
    }
    last
}

#[cfg(test)]
mod tests {
    use super::without_type_paths;

    #[test]
    fn a_type_path_in_brackets_goes_and_any_other_keeps_its_last_name() {
        let rmcp = "Transport [rmcp::transport::worker::WorkerTransport<rmcp::transport::\
                    streamable_http_client::StreamableHttpClientWorker<rmcp::transport::auth::\
                    AuthClient<reqwest::async_impl::client::Client>>>] error: Auth required";
        assert_eq!(without_type_paths(rmcp), "Transport error: Auth required");
        assert_eq!(
            without_type_paths("failed: std::io::Error at a::b"),
            "failed: Error at b"
        );
        for plain in [
            "no paths here",
            "http://host:8750/mcp",
            "ratio 1:2, a: b",
            "time 10:30::",
            "[not a path]",
        ] {
            assert_eq!(without_type_paths(plain), plain);
        }
        // An unbalanced generic is left as it is; an address is no path.
        assert_eq!(without_type_paths("a::b<c"), "a::b<c");
        assert_eq!(without_type_paths("at [::1]:8750"), "at [::1]:8750");
        assert_eq!(without_type_paths("Vec<u8>::new"), "new");
    }
}
