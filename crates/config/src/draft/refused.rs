//! The grants of an ensemble that were refused (by serde while the file was read, or by the
//! checks of `[grants]`), by what they would have granted. A capability that asks for one of
//! them is refused without an error of its own: its error is the grant's, said once.

use crate::{Refused, Segment};
use std::collections::HashSet;

/// What refused grants would have granted.
#[derive(Debug, Default)]
pub(super) struct RefusedGrants {
    /// Kinds whose whole grant was refused (`network = "x"`, `sampling = "yes"`), by the
    /// words [`super::grants::Grants`] names them with ("network access", "sampling", ...).
    kinds: HashSet<&'static str>,
    hosts: Vec<String>,
    guests: Vec<String>,
    env: Vec<String>,
    config: Vec<String>,
}

/// The `[grants]` keys and the words each kind is named with.
const KINDS: [(&str, &str); 6] = [
    ("network", NETWORK),
    ("files", FILES),
    ("env", ENV),
    ("config", CONFIG),
    ("sampling", SAMPLING),
    ("elicitation", ELICITATION),
];
pub(super) const NETWORK: &str = "network access";
pub(super) const FILES: &str = "directories";
pub(super) const ENV: &str = "environment variables";
pub(super) const CONFIG: &str = "settings (`config`)";
pub(super) const SAMPLING: &str = "sampling";
pub(super) const ELICITATION: &str = "elicitation";

impl RefusedGrants {
    /// The grants serde refused in the file (`refused`), by what they would have granted.
    pub(super) fn of(refused: &Refused) -> Self {
        let mut grants = RefusedGrants::default();
        for (below, value) in refused.values_under(&["grants"]) {
            match below {
                [] => grants.kinds.extend(KINDS.iter().map(|(_, kind)| *kind)),
                [Segment::Key(key)] => grants
                    .kinds
                    .extend(KINDS.iter().filter(|(k, _)| k == key).map(|(_, w)| *w)),
                [Segment::Key(key), Segment::Index(_)] => match (key.as_str(), value) {
                    ("network", toml::Value::String(text)) => grants.network(text),
                    ("env", toml::Value::String(name)) => grants.env.push(name.clone()),
                    ("files", toml::Value::Table(grant)) => {
                        if let Some(toml::Value::String(guest)) = grant.get("guest") {
                            grants.files(guest);
                        }
                    }
                    _ => {}
                },
                [Segment::Key(key), Segment::Key(setting)] if key == "config" => {
                    grants.config(setting)
                }
                _ => {}
            }
        }
        grants
    }

    /// Every grant of `what` (one of the words above) counts as refused.
    pub(super) fn kind(&mut self, what: &'static str) {
        self.kinds.insert(what);
    }

    /// A network grant written `text` was refused.
    pub(super) fn network(&mut self, text: &str) {
        self.hosts.push(host_of(text));
    }

    /// A grant of files at `guest` was refused.
    pub(super) fn files(&mut self, guest: &str) {
        self.guests.push(guest.trim_end_matches('/').to_string());
    }

    /// The setting `key` of `[grants] config` was refused.
    pub(super) fn config(&mut self, key: &str) {
        self.config.push(key.to_string());
    }

    /// Network access to `wanted` (as the capability writes it) may be what a refused grant
    /// meant to grant.
    pub(super) fn covers_network(&self, wanted: &str) -> bool {
        self.kinds.contains(NETWORK) || self.hosts.contains(&host_of(wanted))
    }

    /// Files at `guest` may be what a refused grant meant to grant (its guest path or one
    /// below it).
    pub(super) fn covers_files(&self, guest: &str) -> bool {
        self.kinds.contains(FILES)
            || (self.guests.iter()).any(|granted| {
                guest == granted
                    || guest
                        .strip_prefix(granted.as_str())
                        .is_some_and(|rest| rest.starts_with('/'))
            })
    }

    pub(super) fn covers_env(&self, name: &str) -> bool {
        self.kinds.contains(ENV) || self.env.iter().any(|n| n == name)
    }

    pub(super) fn covers_config(&self, key: &str) -> bool {
        self.kinds.contains(CONFIG) || self.config.iter().any(|k| k == key)
    }

    /// `what` (sampling or elicitation) was granted in a way that was refused.
    pub(super) fn covers(&self, what: &str) -> bool {
        self.kinds.contains(what)
    }
}

/// The host a network pattern or capability names, as written: `en.wikipedia.org` of
/// `https://en.wikipedia.org:443`, so that a grant refused for its missing port still
/// answers for the capability that asks for that host.
fn host_of(text: &str) -> String {
    let text = text.trim();
    let text = (text.split_once("://")).map_or(text, |(_, rest)| rest);
    let text = text.split('/').next().unwrap_or(text);
    let host = match text.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => text,
    };
    host.to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_grant_answers_for_the_capabilities_that_name_what_it_meant() {
        let mut grants = RefusedGrants::default();
        grants.network("en.wikipedia.org");
        grants.files("/data/");
        grants.config("api.url");
        assert!(grants.covers_network("https://EN.wikipedia.org:443"));
        assert!(!grants.covers_network("example.org:443"));
        assert!(grants.covers_files("/data/reports"));
        assert!(!grants.covers_files("/database"));
        assert!(grants.covers_config("api.url"));
        assert!(!grants.covers_env("TZ"));
        assert!(!grants.covers(SAMPLING));
    }
}
