//! `[access.oidc] challenge-scopes`: the scopes a `401` asks a client to get. An MCP client
//! asks its provider for exactly the scopes the challenge names (the MCP authorization spec's
//! scope selection; the official SDKs do), so this is what steers a client to the least it
//! needs; a call that needs more is refused with `403 insufficient_scope` naming the scope,
//! and the client steps up.

use toml::Spanned;

/// The challenge's scopes checked against `named` (every scope the rules name): each a scope
/// token (RFC 6749 3.3) that some rule names. `None`: not written (the challenge names every
/// scope the rules name).
pub(super) fn check(
    written: Option<&Vec<Spanned<String>>>,
    named: &[&str],
    error: &impl Fn(std::ops::Range<usize>, String),
) -> Option<Vec<String>> {
    let written = written?;
    let mut scopes = Vec::new();
    for scope in written {
        let text = scope.get_ref();
        let token = !text.is_empty()
            && (text.bytes())
                .all(|b| b == 0x21 || (0x23..=0x5b).contains(&b) || (0x5d..=0x7e).contains(&b));
        if !token {
            error(
                scope.span(),
                format!(
                    "{text:?} is not a scope: one word of printable ASCII, without spaces, `\"` \
                     or `\\`"
                ),
            );
        } else if !named.contains(&text.as_str()) {
            error(
                scope.span(),
                format!(
                    "no rule names the scope `{text}`: a client holding it would be granted \
                     nothing; the rules name {}",
                    if named.is_empty() {
                        "no scope".to_string()
                    } else {
                        named
                            .iter()
                            .map(|s| format!("`{s}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                ),
            );
        } else if !scopes.contains(text) {
            scopes.push(text.clone());
        }
    }
    Some(scopes)
}
