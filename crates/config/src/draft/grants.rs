//! An ensemble's `[grants]` and the checks of each invoker's `[capabilities]` against them.
//! No engine is needed: the result is the [`SandboxSpec`] a call of the invoker runs in.

use super::refused::{self, RefusedGrants};
use crate::sandbox::{ConfigVar, NetPattern, Preopen, SandboxSpec};
use crate::v1::{self, Capabilities};
use crate::{Access, Diagnostic, EnvVarName, Location, Refused, SourceFile};
use std::path::PathBuf;
use std::sync::Arc;
use toml::Spanned;

/// The ensemble's `[grants]`, with patterns parsed and host directories resolved.
pub struct Grants {
    source: Arc<SourceFile>,
    ensemble: String,
    network: Vec<(NetPattern, Spanned<String>)>,
    files: Vec<(PathBuf, Spanned<v1::FileGrant>)>,
    env: Vec<Spanned<EnvVarName>>,
    sampling: Option<Spanned<bool>>,
    elicitation: Option<Spanned<bool>>,
    /// `[grants] config`, checked: each key with its value (`None`: its variable is not set),
    /// the variable it came from, and where it is written.
    config: Vec<ConfigGrant>,
    config_first: Option<std::ops::Range<usize>>,
    /// Where the grants some capability used are written (their spans' starts): the others
    /// are granted to no tool ([`Grants::unused`]).
    used: std::sync::Mutex<std::collections::HashSet<usize>>,
    /// What the grants that were refused would have granted.
    refused: RefusedGrants,
}

/// One setting of `[grants] config`: key, value, variable, where.
type ConfigGrant = (
    String,
    Option<String>,
    Option<String>,
    std::ops::Range<usize>,
);

/// The most settings one ensemble grants, the longest key and the longest value.
pub const MAX_CONFIG_KEYS: usize = 64;
pub const MAX_CONFIG_KEY_BYTES: usize = 128;
pub const MAX_CONFIG_VALUE_BYTES: usize = 64 << 10;

impl Grants {
    /// Checks `[grants]` of the ensemble `ensemble` in `source` (`refused`: what serde
    /// refused in the file); every bad grant is a diagnostic, and the good ones still apply.
    pub fn resolve(
        source: &Arc<SourceFile>,
        ensemble: &str,
        grants: v1::Grants,
        refused: &Refused,
        diagnostics: &mut Vec<Diagnostic>,
    ) -> Self {
        let mut refused = RefusedGrants::of(refused);
        let mut network = Vec::new();
        for grant in grants.network {
            match NetPattern::parse(grant.get_ref()) {
                Ok(pattern) => network.push((pattern, grant)),
                Err(message) => {
                    refused.network(grant.get_ref());
                    diagnostics.push(Diagnostic::new(source.at(grant.span()), message))
                }
            }
        }
        let mut files = Vec::new();
        for grant in grants.files {
            let host = grant.get_ref().host.get_ref();
            let path = source.relative(host);
            let at = || source.at(grant.get_ref().host.span());
            match std::fs::canonicalize(&path) {
                Ok(dir) if dir.is_dir() => files.push((dir, grant)),
                Ok(_) => {
                    refused.files(grant.get_ref().guest.as_str());
                    diagnostics.push(Diagnostic::new(
                        at(),
                        format!("granted host path {} is not a directory", path.display()),
                    ))
                }
                Err(e) => {
                    refused.files(grant.get_ref().guest.as_str());
                    diagnostics.push(Diagnostic::new(
                        at(),
                        format!(
                            "granted host directory {} cannot be used: {e}",
                            path.display()
                        ),
                    ))
                }
            }
        }
        let config_first = grants
            .config
            .values()
            .map(|v| v.span())
            .min_by_key(|r| r.start);
        let config = config_grants(source, grants.config, &mut refused, diagnostics);
        Grants {
            source: Arc::clone(source),
            ensemble: ensemble.to_string(),
            network,
            files,
            env: grants.env,
            sampling: grants.sampling,
            elicitation: grants.elicitation,
            config,
            config_first,
            used: Default::default(),
            refused,
        }
    }

    /// Notes that a capability used the grant written at `span`.
    fn use_grant(&self, span: &std::ops::Range<usize>) {
        let mut used = self
            .used
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        used.insert(span.start);
    }

    /// A warning for each grant no capability of the invokers drafted so far used: it gives
    /// nothing (a tool offered without invokers gets only `[defaults] capabilities`).
    pub fn unused(&self) -> Vec<Diagnostic> {
        let used = self
            .used
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut grants: Vec<(std::ops::Range<usize>, String)> = Vec::new();
        grants.extend(
            (self.network.iter())
                .map(|(_, g)| (g.span(), format!("network access to {}", g.get_ref()))),
        );
        grants.extend(
            (self.files.iter())
                .map(|(_, g)| (g.span(), format!("files at {}", g.get_ref().guest.as_str()))),
        );
        grants.extend((self.env.iter()).map(|g| {
            (
                g.span(),
                format!("environment variable {}", g.get_ref().as_str()),
            )
        }));
        grants.extend(
            (self.config.iter())
                .map(|(key, _, _, span)| (span.clone(), format!("the setting `{key}`"))),
        );
        for (flag, what) in [
            (&self.sampling, "sampling"),
            (&self.elicitation, "elicitation"),
        ] {
            if let Some(granted) = flag.as_ref().filter(|g| *g.get_ref()) {
                grants.push((granted.span(), what.to_string()));
            }
        }
        (grants.into_iter())
            .filter(|(span, _)| !used.contains(&span.start))
            .map(|(span, what)| {
                Diagnostic::new(
                    self.source.at(span),
                    format!(
                        "ensemble `{}` grants {what}, which no tool asks for: an invoker's \
                         [capabilities] (or [defaults] capabilities, for the tools offered \
                         without invokers) must name it, or the grant gives nothing",
                        self.ensemble
                    ),
                )
            })
            .collect()
    }

    /// True when the ensemble grants nothing at all.
    pub fn is_empty(&self) -> bool {
        self.network.is_empty()
            && self.files.is_empty()
            && self.env.is_empty()
            && self.sampling.is_none()
            && self.elicitation.is_none()
            && self.config.is_empty()
    }

    /// A capability the ensemble does not grant, at `span` of `source`, with a note: where
    /// the ensemble grants the others of that kind (`granted`, the first at `first`), or that
    /// it grants no `what`.
    fn not_granted(
        &self,
        source: &SourceFile,
        span: std::ops::Range<usize>,
        message: String,
        first: Option<std::ops::Range<usize>>,
        granted: &[&str],
        what: &str,
    ) -> Diagnostic {
        let ensemble = &self.ensemble;
        let (location, note) = match first {
            Some(span) => (
                Some(self.source.at(span)),
                format!("ensemble `{ensemble}` grants only {}", granted.join(", ")),
            ),
            None => {
                // Point at the ensemble file when the invoker lives in another one.
                let location =
                    (source.path != self.source.path).then(|| Location::file(&self.source.path));
                (location, format!("ensemble `{ensemble}` grants no {what}"))
            }
        };
        Diagnostic::new(source.at(span), message).with_note(location, note)
    }

    /// Whether `who` (an invoker, or the tools offered without one) gets `what` (sampling or
    /// elicitation): it asks for it and the ensemble grants it. Asked for and not granted is
    /// `None`, with a diagnostic at the ask (but where a refused grant meant to grant it).
    fn ask(
        &self,
        source: &SourceFile,
        who: &str,
        wanted: &Option<Spanned<bool>>,
        granted: &Option<Spanned<bool>>,
        what: &str,
        diagnostics: &mut Vec<Diagnostic>,
    ) -> Option<bool> {
        let Some(wanted) = wanted.as_ref().filter(|w| *w.get_ref()) else {
            return Some(false);
        };
        if let Some(granted) = granted.as_ref().filter(|g| *g.get_ref()) {
            self.use_grant(&granted.span());
            return Some(true);
        }
        if self.refused.covers(what) {
            return None;
        }
        let ensemble = &self.ensemble;
        diagnostics.push(self.not_granted(
            source,
            wanted.span(),
            format!(
                "{who} asks for {what}, which ensemble `{ensemble}` does not grant \
                 (add `{what} = true` to its [grants])"
            ),
            None,
            &[],
            what,
        ));
        None
    }

    /// The sandbox of `who` (`invoker `name``, or the tools offered without invokers; written
    /// in `source`) with `capabilities`, or `None` after a diagnostic for every capability the
    /// ensemble does not grant (but those a refused grant may have meant: its error says it).
    pub fn sandbox(
        &self,
        source: &SourceFile,
        who: &str,
        capabilities: &Capabilities,
        diagnostics: &mut Vec<Diagnostic>,
    ) -> Option<SandboxSpec> {
        let before = diagnostics.len();
        let mut quiet = false;
        let ensemble = self.ensemble.as_str();
        let mut spec = SandboxSpec::default();
        let mut network = Vec::new();
        for wanted in &capabilities.network {
            let pattern = match NetPattern::parse(wanted.get_ref()) {
                Ok(pattern) => pattern,
                Err(message) => {
                    diagnostics.push(Diagnostic::new(source.at(wanted.span()), message));
                    continue;
                }
            };
            for (_, granted) in self.network.iter().filter(|(g, _)| g.covers(&pattern)) {
                self.use_grant(&granted.span());
            }
            if !self.network.iter().any(|(g, _)| g.covers(&pattern)) {
                if self.refused.covers_network(wanted.get_ref()) {
                    quiet = true;
                    continue;
                }
                let granted: Vec<&str> = self
                    .network
                    .iter()
                    .map(|(_, g)| g.get_ref().as_str())
                    .collect();
                diagnostics.push(self.not_granted(
                    source,
                    wanted.span(),
                    format!("{who} asks for network access to {pattern}, which ensemble `{ensemble}` does not grant"),
                    self.network.first().map(|(_, g)| g.span()),
                    &granted,
                    refused::NETWORK,
                ));
                continue;
            }
            network.push(pattern);
        }
        spec.network = network.into();
        let sampling = self.ask(
            source,
            who,
            &capabilities.sampling,
            &self.sampling,
            refused::SAMPLING,
            diagnostics,
        );
        let elicitation = self.ask(
            source,
            who,
            &capabilities.elicitation,
            &self.elicitation,
            refused::ELICITATION,
            diagnostics,
        );
        quiet |= sampling.is_none() || elicitation.is_none();
        spec.talk = toolhost_contract::TalkGrants {
            log: capabilities.log.unwrap_or(true),
            progress: capabilities.progress.unwrap_or(true),
            sampling: sampling.unwrap_or(false),
            elicitation: elicitation.unwrap_or(false),
        };
        for capability in &capabilities.files {
            let wanted = capability.get_ref();
            let guest = wanted.guest.as_str();
            let grant = self.files.iter().find(|(_, g)| {
                let granted = g.get_ref().guest.as_str();
                guest == granted
                    || guest
                        .strip_prefix(granted)
                        .is_some_and(|rest| rest.starts_with('/'))
            });
            let Some((host_dir, grant)) = grant else {
                if self.refused.covers_files(guest) {
                    quiet = true;
                    continue;
                }
                let granted: Vec<&str> = self
                    .files
                    .iter()
                    .map(|(_, g)| g.get_ref().guest.as_str())
                    .collect();
                diagnostics.push(self.not_granted(
                    source,
                    capability.span(),
                    format!("{who} asks for files at {guest}, which ensemble `{ensemble}` does not grant"),
                    self.files.first().map(|(_, g)| g.span()),
                    &granted,
                    refused::FILES,
                ));
                continue;
            };
            self.use_grant(&grant.span());
            let granted = grant.get_ref();
            if wanted.access > granted.access {
                diagnostics.push(
                    Diagnostic::new(
                        source.at(capability.span()),
                        format!(
                            "{who} asks for {} access to {guest}, but ensemble `{ensemble}` grants only {}",
                            wanted.access, granted.access
                        ),
                    )
                    .with_note(Some(self.source.at(grant.span())), "granted here"),
                );
                continue;
            }
            let rest = guest[granted.guest.as_str().len()..].trim_start_matches('/');
            let host = if rest.is_empty() {
                host_dir.clone()
            } else {
                host_dir.join(rest)
            };
            // The path the sandbox opens must have no link in it (see `sandbox`): a link below
            // a grant could be one a tool made, pointing anywhere.
            match std::fs::canonicalize(&host) {
                Ok(real) if real == host && real.is_dir() => {}
                Ok(real) if real != host => {
                    diagnostics.push(Diagnostic::new(
                        source.at(capability.span()),
                        format!(
                            "{guest} maps to {}, which is a symbolic link (to {}); grant the \
                             directory itself",
                            host.display(),
                            real.display()
                        ),
                    ));
                    continue;
                }
                _ => {
                    diagnostics.push(Diagnostic::new(
                        source.at(capability.span()),
                        format!(
                            "{guest} maps to {}, which is not a directory",
                            host.display()
                        ),
                    ));
                    continue;
                }
            }
            spec.preopens.push(Preopen {
                host,
                guest: guest.to_string(),
                writable: wanted.access == Access::ReadWrite,
            });
        }
        for variable in &capabilities.env {
            let wanted = variable.get_ref().as_str();
            for granted in self.env.iter().filter(|g| g.get_ref().as_str() == wanted) {
                self.use_grant(&granted.span());
            }
            if !self.env.iter().any(|g| g.get_ref().as_str() == wanted) {
                if self.refused.covers_env(wanted) {
                    quiet = true;
                    continue;
                }
                let granted: Vec<&str> = self.env.iter().map(|g| g.get_ref().as_str()).collect();
                diagnostics.push(self.not_granted(
                    source,
                    variable.span(),
                    format!("{who} asks for environment variable {wanted}, which ensemble `{ensemble}` does not grant"),
                    self.env.first().map(|g| g.span()),
                    &granted,
                    refused::ENV,
                ));
                continue;
            }
            // A granted variable the host does not have is simply absent in the guest.
            if let Ok(value) = std::env::var(wanted) {
                spec.env.push((wanted.to_string(), value));
            }
        }
        for key in &capabilities.config {
            let wanted = key.get_ref();
            let Some((_, value, env, at)) = self.config.iter().find(|(k, ..)| k == wanted) else {
                if self.refused.covers_config(wanted) {
                    quiet = true;
                    continue;
                }
                let granted: Vec<&str> = self.config.iter().map(|(k, ..)| k.as_str()).collect();
                diagnostics.push(self.not_granted(
                    source,
                    key.span(),
                    format!("{who} asks for the setting `{wanted}`, which ensemble `{ensemble}` does not grant"),
                    self.config_first.clone(),
                    &granted,
                    refused::CONFIG,
                ));
                continue;
            };
            self.use_grant(at);
            // A setting whose variable the host does not have is absent in the guest.
            if let Some(value) = value {
                spec.config.push(ConfigVar {
                    key: wanted.clone(),
                    value: value.clone(),
                    env: env.clone(),
                });
            }
        }
        (diagnostics.len() == before && !quiet).then_some(spec)
    }
}

/// `[grants] config` checked: keys of `[A-Za-z0-9_.-]`, values that are strings or
/// `{ env = "VAR" }`, within the bounds above. A variable that is not set leaves its setting
/// out (as a granted environment variable the host lacks).
fn config_grants(
    source: &SourceFile,
    written: std::collections::BTreeMap<String, Spanned<toml::Value>>,
    refused: &mut RefusedGrants,
    diagnostics: &mut Vec<Diagnostic>,
) -> Vec<ConfigGrant> {
    let mut config = Vec::new();
    for (key, value) in written {
        let at = source.at(value.span());
        let good_key = !key.is_empty()
            && key.len() <= MAX_CONFIG_KEY_BYTES
            && (key.bytes()).all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
        if !good_key {
            refused.config(&key);
            diagnostics.push(Diagnostic::new(
                at,
                format!(
                    "{key:?} is not a setting's key: 1 to {MAX_CONFIG_KEY_BYTES} of [A-Za-z0-9_.-]"
                ),
            ));
            continue;
        }
        if config.len() == MAX_CONFIG_KEYS {
            refused.kind(refused::CONFIG);
            diagnostics.push(Diagnostic::new(
                at,
                format!("an ensemble grants at most {MAX_CONFIG_KEYS} settings (`config`)"),
            ));
            break;
        }
        let (read, env) = match value.get_ref() {
            toml::Value::String(text) => (Some(text.clone()), None),
            toml::Value::Table(table)
                if table.len() == 1
                    && let Some(toml::Value::String(var)) = table.get("env")
                    && crate::EnvVarName::try_from(var.clone()).is_ok() =>
            {
                (std::env::var(var).ok(), Some(var.clone()))
            }
            _ => {
                refused.config(&key);
                diagnostics.push(Diagnostic::new(
                    at,
                    format!(
                        "setting `{key}` is a string, or {{ env = \"VAR\" }} to read it from the \
                         host's environment (a variable's name: [A-Za-z_][A-Za-z0-9_]*)"
                    ),
                ));
                continue;
            }
        };
        if read
            .as_ref()
            .is_some_and(|v| v.len() > MAX_CONFIG_VALUE_BYTES)
        {
            refused.config(&key);
            diagnostics.push(Diagnostic::new(
                at,
                format!(
                    "setting `{key}` is longer than {} KiB",
                    MAX_CONFIG_VALUE_BYTES >> 10
                ),
            ));
            continue;
        }
        config.push((key, read, env, value.span()));
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FileKind;

    fn parse<T: serde::de::DeserializeOwned>(source: &SourceFile) -> T {
        crate::parse(&source.path, &source.text, FileKind::Ensemble).unwrap()
    }

    #[test]
    fn capabilities_within_the_grants_make_the_sandbox_and_the_rest_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("data/reports")).unwrap();
        let ensemble = Arc::new(SourceFile::new(
            dir.path().join("web.toml"),
            "schema-version = 1\n[grants]\nnetwork = [\"*.example.org:443\", \"bad\"]\n\
             files = [{ host = \"data\", guest = \"/data\", access = \"read\" }]\n"
                .into(),
        ));
        #[derive(serde::Deserialize)]
        struct File {
            grants: v1::Grants,
        }
        let file: File = parse(&ensemble);
        let mut errors = Vec::new();
        let grants = Grants::resolve(
            &ensemble,
            "web",
            file.grants,
            &Refused::default(),
            &mut errors,
        );
        assert_eq!(errors.len(), 1, "the bad pattern: {errors:?}");

        let invoker = SourceFile::new(
            dir.path().join("web/i.toml"),
            "schema-version = 1\n[capabilities]\nnetwork = [\"https://a.example.org:443\"]\n\
             files = [{ guest = \"/data/reports\", access = \"read\" }]\n"
                .into(),
        );
        #[derive(serde::Deserialize)]
        struct Invoker {
            capabilities: Capabilities,
        }
        let wanted: Invoker = parse(&invoker);
        let mut errors = Vec::new();
        let spec = grants
            .sandbox(&invoker, "invoker `i`", &wanted.capabilities, &mut errors)
            .expect("granted");
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(spec.network.len(), 1);
        assert!(spec.preopens[0].host.ends_with("data/reports"));
        assert!(!spec.preopens[0].writable);

        let greedy = SourceFile::new(
            dir.path().join("web/g.toml"),
            "schema-version = 1\n[capabilities]\nnetwork = [\"example.org:443\"]\n\
             files = [{ guest = \"/data\", access = \"read-write\" }]\nenv = [\"HOME\"]\n"
                .into(),
        );
        let wanted: Invoker = parse(&greedy);
        let mut errors = Vec::new();
        assert!(
            grants
                .sandbox(&greedy, "invoker `g`", &wanted.capabilities, &mut errors)
                .is_none()
        );
        let messages: Vec<&str> = errors.iter().map(|d| d.message.as_str()).collect();
        assert_eq!(messages.len(), 3, "{messages:?}");
        assert!(messages[0].contains("network access to example.org:443"));
        assert!(messages[1].contains("read-write access to /data"));
        assert!(messages[2].contains("environment variable HOME"));
        assert_eq!(
            errors[2].notes[0].message,
            "ensemble `web` grants no environment variables"
        );
    }
}
