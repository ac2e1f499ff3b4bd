//! `toolhost.toml` read and checked: every error of the file in one run, in file order (what
//! serde refuses, then the checks that relate its keys, on what it did not refuse), before
//! the command goes on; flags and environment variables apply over it afterwards
//! ([`super::settings`]).

use super::settings::{as_warning, env_var};
use anyhow::bail;
use std::path::{Path, PathBuf};
use toolhost::config::access::{AccessSection, AccessSettings, Unset};
use toolhost::config::v1::{ChatSection, HostFile, HostSection, RegistrySection, TrustSection};
use toolhost::config::{Diagnostic, FileKind, Parsed, SourceFile, in_file_order, written_or};
use toolhost::registry::TrustedKey;
use toolhost::runtime::RuntimeSettings;
use toolhost::state::FleetSettings;

/// The most linear memories the instance pool may hold (`max-concurrent-calls` times
/// `memories-per-call`): each reserves 4 GiB of address space, and 20,000 (the most
/// `max-concurrent-calls` allowed with the default 2 each) stays within the 128 TiB a
/// process has.
const MAX_POOL_MEMORIES: u64 = 20_000;

/// What `toolhost.toml` says, checked.
pub(super) struct HostFileSettings {
    pub(super) host: HostSection,
    pub(super) chat: ChatSection,
    pub(super) registry: RegistrySection,
    /// The keys of `[trust]`, and whether every registry component must be signed.
    pub(super) trust: (Vec<TrustedKey>, bool),
    /// The folder of the file: its relative paths start there.
    pub(super) base: PathBuf,
    pub(super) access: AccessSettings,
    pub(super) fleet: FleetSettings,
    /// Variables it names that are not set (warnings, for `check`); `serve` refuses them.
    pub(super) unset: Vec<String>,
}

/// Reads and checks the host file at `path`; `serving`: for `serve`, which refuses a
/// variable the file names that is not set. Every error of the file is in the one `Err`.
pub(super) fn read(path: &Path, serving: bool) -> anyhow::Result<HostFileSettings> {
    let source = SourceFile::read(path, FileKind::Host).map_err(|d| anyhow::anyhow!("{d}"))?;
    let Parsed {
        value,
        mut errors,
        refused,
    } = source.parse_all::<HostFile>(FileKind::Host);
    let Some(file) = value else {
        bail!("{}", rendered(errors, path));
    };
    if let (Some(_), Some(var)) = (&file.chat.base_url, &file.chat.base_url_env) {
        let both = "write one of `base-url` and `base-url-env`, not both";
        errors.push(Diagnostic::new(source.at(var.span()), both));
    }
    if let Some(key) = &file.chat.api_key {
        errors.push(Diagnostic::new(
            source.at(key.span()),
            "API keys are never read from toolhost.toml: put the key in an environment \
             variable and name it with `api-key-env`",
        ));
    }
    for bad in (file.registry.insecure.iter())
        .filter(|r| r.get_ref().is_empty() || r.get_ref().contains(['/', ' ']))
    {
        errors.push(Diagnostic::new(
            source.at(bad.span()),
            format!(
                "`{}` is not a registry: write it as host or host:port",
                bad.get_ref()
            ),
        ));
    }
    // The bounds checked against another key are not checked against a default where that
    // key was refused: its error is the one to fix.
    let connections = written_or(
        file.host.max_http_connections,
        toolhost::http::DEFAULT_MAX_CONNECTIONS,
    );
    if let Some(streams) = &file.host.max_http_streams
        && streams.get_ref().get() as usize > connections / 2
        && !refused.touches(&["host", "max-http-connections"])
    {
        errors.push(Diagnostic::new(
            source.at(streams.span()),
            format!(
                "max-http-streams ({}) must be at most half of max-http-connections \
                 ({connections}): streams that fill every connection leave none for calls \
                 and probes",
                streams.get_ref().get()
            ),
        ));
    }
    if let Some(memories) = &file.host.memories_per_call
        && !refused.touches(&["host", "max-concurrent-calls"])
    {
        let instances = written_or(
            file.host.max_concurrent_calls,
            RuntimeSettings::default().max_instances,
        );
        let pool = instances as u64 * memories.get_ref().get();
        if pool > MAX_POOL_MEMORIES {
            errors.push(Diagnostic::new(
                source.at(memories.span()),
                format!(
                    "memories-per-call ({}) times max-concurrent-calls ({instances}) is {pool} \
                     memories; the pool holds at most {MAX_POOL_MEMORIES} (each reserves 4 GiB \
                     of address space)",
                    memories.get_ref().get()
                ),
            ));
        }
    }
    let base = path.parent().unwrap_or(Path::new(".")).to_path_buf();
    let keys_refused = refused.touches(&["trust", "keys"]);
    let trust = trusted_keys(&file.trust, &source, &base, keys_refused, &mut errors);
    let mut warnings = Vec::new();
    // `[fleet]` and `[access]` relate their keys to each other (a rule names a token): one
    // with a refused key is not checked further, so that no error repeats its refusal.
    let fleet_refused = [
        ["fleet"].as_slice(),
        &["chat", "database"],
        &["chat", "database-env"],
    ]
    .into_iter()
    .any(|path| refused.touches(path));
    let fleet = match fleet_refused {
        true => FleetSettings::default(),
        false => super::fleet::check_fleet(
            &file.fleet,
            &file.chat,
            &source,
            &env_var,
            unset_for(serving, &mut warnings),
        )
        .unwrap_or_else(|mut these| {
            errors.append(&mut these);
            FleetSettings::default()
        }),
    };
    let access = match refused.touches(&["access"]) {
        true => AccessSettings::default(),
        false => check_access(&file.access, &source, unset_for(serving, &mut warnings))
            .unwrap_or_else(|mut these| {
                errors.append(&mut these);
                AccessSettings::default()
            }),
    };
    if !refused.touches(&["telemetry"]) {
        // Started before the file is read for the command (`telemetry`); checked here with
        // the rest of the file.
        let unset = unset_for(serving, &mut warnings);
        super::telemetry::check(&file.telemetry, &source, &env_var, unset, &mut errors);
    }
    let unset: Vec<String> = warnings.iter().map(as_warning).collect();
    if !errors.is_empty() {
        // Every error (each message starts a line), then what is not set.
        match unset.is_empty() {
            true => bail!("{}", rendered(errors, path)),
            false => bail!("{}\n{}", rendered(errors, path), unset.join("\n")),
        }
    }
    Ok(HostFileSettings {
        host: file.host,
        chat: file.chat,
        registry: file.registry,
        trust,
        base,
        access,
        fleet,
        unset,
    })
}

/// `[telemetry]` of the host file at `path`, for the exporters made before anything else
/// (before the logger and the async runtime); nothing when the file cannot be read or has any error,
/// which the command then says when it reads the file in full ([`read`]).
pub(super) fn telemetry(path: &Path) -> Option<super::telemetry::FromFile> {
    let source = SourceFile::read(path, FileKind::Host).ok()?;
    let parsed = source.parse_all::<HostFile>(FileKind::Host);
    let file = parsed.value.filter(|_| parsed.errors.is_empty())?;
    let (mut warnings, mut errors) = (Vec::new(), Vec::new());
    let unset = Unset::Warn(&mut warnings);
    let checked = super::telemetry::check(&file.telemetry, &source, &env_var, unset, &mut errors);
    errors.is_empty().then_some(checked)
}

/// What a variable the file names that is not set is: an error for `serve`, else a warning
/// kept in `warnings`.
fn unset_for(serving: bool, warnings: &mut Vec<Diagnostic>) -> Unset<'_> {
    match serving {
        true => Unset::Refuse,
        false => Unset::Warn(warnings),
    }
}

/// `errors` of the file at `path`, in file order, as the CLI prints them.
fn rendered(errors: Vec<Diagnostic>, path: &Path) -> String {
    let all: Vec<String> = (in_file_order(errors, path).iter())
        .map(ToString::to_string)
        .collect();
    format!("\n{}", all.join("\n"))
}

/// `[access]` checked against `source`, with the environment's variables.
pub(super) fn check_access(
    section: &AccessSection,
    source: &SourceFile,
    unset: Unset<'_>,
) -> Result<AccessSettings, Vec<Diagnostic>> {
    section.check(source, &env_var, unset)
}

/// The keys of `[trust]`, read (an error at the key for each that cannot be), and whether
/// every registry component must be signed by one of them.
fn trusted_keys(
    trust: &TrustSection,
    source: &SourceFile,
    base: &Path,
    keys_refused: bool,
    errors: &mut Vec<Diagnostic>,
) -> (Vec<TrustedKey>, bool) {
    let mut keys = Vec::with_capacity(trust.keys.len());
    let mut unreadable = false;
    for key in &trust.keys {
        let path = base.join(key.get_ref());
        let read = toolhost::config::read_limited(&path, 64 * 1024)
            .and_then(|pem| TrustedKey::from_pem(key.get_ref(), &pem));
        match read {
            Ok(trusted) => keys.push(trusted),
            Err(e) => {
                unreadable = true;
                errors.push(Diagnostic::new(
                    source.at(key.span()),
                    format!("cannot use the key {}: {e}", path.display()),
                ));
            }
        }
    }
    let required = trust.require_signatures.as_ref();
    // Keys that were written but refused are their own errors.
    if let Some(required) = required.filter(|r| *r.get_ref() && keys.is_empty())
        && !unreadable
        && !keys_refused
    {
        errors.push(Diagnostic::new(
            source.at(required.span()),
            "require-signatures needs the keys components are signed with: list them in `keys`",
        ));
    }
    (keys, required.is_some_and(|r| *r.get_ref()))
}
