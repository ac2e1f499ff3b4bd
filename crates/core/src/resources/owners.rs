//! owners: every resource URI has one owner, whatever offers it. What a source offers is a
//! list of [`Claim`]s: a files set claims every URI under its prefix; a component or an
//! imported server claims the URIs it lists and the URIs its templates match. Two claims of
//! different sources must not meet: when they do, the later ensemble (in file-name order) is
//! refused, as for a tool name, and `check` says where both are written.
//!
//! Whether two templates can name one URI is not decidable cheaply in general, so templates
//! are compared by their fixed starts (the text before the first `{`): two templates, or a
//! template and a prefix, collide when one start begins the other. That refuses some pairs
//! that could never meet (`x://{id}.json` beside `x://{id}.txt`); it never lets two owners
//! answer for one URI.

use toolhost_config::draft::overlaps;

/// What one source says it answers for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Claim {
    /// One URI.
    Uri(String),
    /// Every URI that starts with this (a files set's `uri-prefix`).
    Prefix(String),
    /// Every URI the template (RFC 6570, level 2) matches.
    Template(String),
}

impl Claim {
    /// A template's claim: the template, or the one URI it is when it has no expression.
    pub(crate) fn template(template: &str) -> Claim {
        if template.contains('{') {
            Claim::Template(template.to_string())
        } else {
            Claim::Uri(template.to_string())
        }
    }

    /// Whether one URI could be claimed by both.
    pub(crate) fn meets(&self, other: &Claim) -> bool {
        use Claim::{Prefix, Template, Uri};
        match (self, other) {
            (Uri(a), Uri(b)) => a == b,
            (Uri(uri), Prefix(prefix)) | (Prefix(prefix), Uri(uri)) => uri.starts_with(prefix),
            (Uri(uri), Template(template)) | (Template(template), Uri(uri)) => {
                matches_template(template, uri)
            }
            (Prefix(a) | Template(a), Prefix(b) | Template(b)) => overlaps(start(a), start(b)),
        }
    }

    /// How a message names it.
    pub(crate) fn describe(&self) -> String {
        match self {
            Claim::Uri(uri) => format!("the resource `{}`", toolhost_audit::cut_text(uri)),
            Claim::Prefix(prefix) => format!("the URI prefix `{prefix}`"),
            Claim::Template(template) => {
                format!("the template `{}`", toolhost_audit::cut_text(template))
            }
        }
    }
}

/// A template's fixed start (a prefix is all start).
fn start(claim: &str) -> &str {
    claim.split('{').next().unwrap_or_default()
}

/// The claims taken so far, and by which ensemble, where.
pub(crate) struct Claims<T> {
    /// Claims of single URIs, looked up by the URI.
    uris: std::collections::HashMap<String, T>,
    /// Prefixes and templates, compared one by one (a few per ensemble).
    patterns: Vec<(Claim, T)>,
}

impl<T> Default for Claims<T> {
    fn default() -> Self {
        Claims {
            uris: std::collections::HashMap::new(),
            patterns: Vec::new(),
        }
    }
}

impl<T: Clone> Claims<T> {
    /// What `claim` meets among those taken, if anything.
    pub(crate) fn met(&self, claim: &Claim) -> Option<(Claim, T)> {
        if let Claim::Uri(uri) = claim
            && let Some(owner) = self.uris.get(uri)
        {
            return Some((claim.clone(), owner.clone()));
        }
        if let Some((taken, owner)) = self.patterns.iter().find(|(taken, _)| taken.meets(claim)) {
            return Some((taken.clone(), owner.clone()));
        }
        if matches!(claim, Claim::Uri(_)) {
            return None;
        }
        (self.uris.iter())
            .find(|(uri, _)| claim.meets(&Claim::Uri((*uri).clone())))
            .map(|(uri, owner)| (Claim::Uri(uri.clone()), owner.clone()))
    }

    pub(crate) fn take(&mut self, claim: Claim, owner: T) {
        match claim {
            Claim::Uri(uri) => {
                self.uris.insert(uri, owner);
            }
            pattern => self.patterns.push((pattern, owner)),
        }
    }
}

/// Whether `uri` is one `template` (RFC 6570, level 2) describes: literal parts as written,
/// `{name}` a non-empty run without `/`, `?` or `#`, `{+name}` and `{#name}` any non-empty
/// run. Each expression takes the shortest run that lets the next literal follow (no
/// backtracking: linear in the URI).
pub fn matches_template(template: &str, uri: &str) -> bool {
    let mut rest = uri;
    let mut parts = template.split('{');
    let Some(first) = parts.next() else {
        return false;
    };
    let Some(after) = rest.strip_prefix(first) else {
        return false;
    };
    rest = after;
    for part in parts {
        let Some((expression, literal)) = part.split_once('}') else {
            return false;
        };
        let reserved = expression.starts_with('+') || expression.starts_with('#');
        let allowed = |c: char| reserved || !matches!(c, '/' | '?' | '#');
        let end = if literal.is_empty() {
            rest.len()
        } else {
            match rest.find(literal) {
                Some(at) => at,
                None => return false,
            }
        };
        let value = &rest[..end];
        if value.is_empty() || !value.chars().all(allowed) {
            return false;
        }
        rest = &rest[end + literal.len()..];
    }
    rest.is_empty()
}

#[cfg(test)]
mod tests {
    use super::Claim::{Prefix, Template, Uri};
    use super::*;

    #[test]
    fn claims_meet_where_one_uri_could_have_two_owners() {
        let uri = |s: &str| Uri(s.into());
        assert!(uri("books://welcome").meets(&uri("books://welcome")));
        assert!(!uri("books://welcome").meets(&uri("books://welcome2")));
        assert!(uri("docs://a/b.md").meets(&Prefix("docs://a/".into())));
        assert!(!uri("docs://b.md").meets(&Prefix("docs://a/".into())));
        assert!(uri("books://welcome").meets(&Template("books://{id}".into())));
        assert!(!uri("books://a/b").meets(&Template("books://{id}".into())));
        assert!(Prefix("docs://".into()).meets(&Template("docs://{+path}".into())));
        assert!(Template("{+any}".into()).meets(&Prefix("docs://".into())));
        assert!(!Template("a://{x}".into()).meets(&Template("b://{x}".into())));
        assert!(Template("x://{id}.json".into()).meets(&Template("x://{id}.txt".into())));
        assert_eq!(Claim::template("exact://a"), uri("exact://a"));
    }

    #[test]
    fn the_first_claim_met_is_found_by_uri_and_by_pattern() {
        let mut claims = Claims::default();
        claims.take(Uri("books://welcome".into()), "first");
        claims.take(Prefix("docs://".into()), "second");
        let met = |claim: Claim| claims.met(&claim);
        assert_eq!(
            met(Uri("books://welcome".into())),
            Some((Uri("books://welcome".into()), "first"))
        );
        assert_eq!(
            met(Template("books://{id}".into())),
            Some((Uri("books://welcome".into()), "first"))
        );
        assert_eq!(
            met(Uri("docs://x".into())),
            Some((Prefix("docs://".into()), "second"))
        );
        assert_eq!(met(Uri("other://x".into())), None);
    }

    #[test]
    fn templates_match_the_uris_they_describe() {
        assert!(matches_template(
            "test://template/{id}/data",
            "test://template/123/data"
        ));
        assert!(!matches_template(
            "test://template/{id}/data",
            "test://template/1/2/data"
        ));
        assert!(!matches_template(
            "test://template/{id}/data",
            "test://template//data"
        ));
        assert!(matches_template("file:///{+path}", "file:///a/b/c.md"));
        assert!(!matches_template("file:///{+path}", "file:///"));
        assert!(matches_template("db://{table}/{id}", "db://users/7"));
        assert!(!matches_template("db://{table}/{id}", "db://users/7/x"));
        assert!(!matches_template("db://{table", "db://users"));
        assert!(matches_template("exact://a", "exact://a"));
        assert!(!matches_template("exact://a", "exact://ab"));
    }
}
