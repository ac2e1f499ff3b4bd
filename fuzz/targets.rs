//! The fuzz targets' bodies, shared by the fuzz binaries (`src/bin/*.rs`, built with
//! cargo-afl) and the test suite (`tests/all/fuzzing.rs`), which replays every saved input
//! through them: the corpora and every crash found, kept as regressions.
//!
//! Each body must not panic for any input; where it states a property (a printed pattern
//! parses back to itself), a violation is a panic too.

use serde_json::{Value, json};
use std::path::Path;
use std::sync::{Arc, LazyLock};
use toolhost::catalog::{Schema, VersionHash};
use toolhost::config::v1::{EnsembleFile, HostFile, InvokerFile};
use toolhost::config::{self, Diagnostic, FileKind, SourceFile};
use toolhost::invoke::{DedupKey, canonical_json, check_arguments};
use toolhost::provider::sse::Decoder;
use toolhost::resolve::compile_schema;
use toolhost::sandbox::NetPattern;

/// Descriptor parsing: any text as an ensemble, invoker or host file, read to its first error
/// and on past every refusal; every error renders with its file, line and column, and places
/// anywhere in the text render too.
pub fn descriptor(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = Path::new("fuzz.toml");
    let render = |d: Diagnostic| {
        let _ = d.to_string();
    };
    if let Err(d) = config::parse::<EnsembleFile>(path, text, FileKind::Ensemble) {
        render(d);
    }
    if let Err(d) = config::parse::<InvokerFile>(path, text, FileKind::Invoker) {
        render(d);
    }
    if let Err(d) = config::parse::<HostFile>(path, text, FileKind::Host) {
        render(d);
    }
    let source = SourceFile::new(path.to_path_buf(), text.to_string());
    // Read on past every refusal (`check`'s reading): never a panic, every error placed.
    for errors in [
        source.parse_all::<EnsembleFile>(FileKind::Ensemble).errors,
        source.parse_all::<InvokerFile>(FileKind::Invoker).errors,
        source.parse_all::<HostFile>(FileKind::Host).errors,
    ] {
        config::in_file_order(errors, path)
            .into_iter()
            .for_each(render);
    }
    for at in [0, text.len() / 3, text.len() / 2, text.len()] {
        render(Diagnostic::new(source.at(at..at + 7), "here"));
    }
}

/// A typical arguments schema, as the benchmarks use.
static TYPICAL: LazyLock<Arc<Schema>> = LazyLock::new(|| {
    compile_schema(json!({
        "type": "object", "required": ["query"], "additionalProperties": false,
        "properties": {
            "query": {"type": "string", "minLength": 1, "maxLength": 500},
            "limit": {"type": "integer", "minimum": 1, "maximum": 100},
            "sort": {"enum": ["relevance", "date"]},
            "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z-]+$"}},
            "range": {"type": "object", "properties": {"from": {"type": "string"}}}
        }
    }))
    .expect("the typical schema compiles")
});

/// Argument validation and dedup keys: any JSON value against a typical schema, its dedup
/// key (the same for the same value with its keys in another order), and, when the value is
/// itself a schema the host accepts, the value against itself.
pub fn arguments(data: &[u8]) {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    if let Err(error) = check_arguments("t", &TYPICAL, &value) {
        assert!(!error.message.is_empty());
    }
    let version = VersionHash([7; 32]);
    let key = DedupKey::new("t", &version, &value);
    let reparsed: Value =
        serde_json::from_slice(&canonical_json(&value)).expect("canonical JSON parses");
    assert_eq!(DedupKey::new("t", &version, &reparsed), key);
    if let Ok(schema) = compile_schema(value.clone()) {
        let _ = check_arguments("t", &schema, &value);
    }
}

/// Network patterns: parsing never panics, a pattern prints to text that parses back to the
/// same pattern, and every pattern covers itself.
pub fn network_pattern(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(pattern) = NetPattern::parse(text) {
        let printed = pattern.to_string();
        let again = NetPattern::parse(&printed).expect("a printed pattern parses");
        assert_eq!(again.to_string(), printed);
        assert!(pattern.covers(&pattern));
    }
}

/// Server-sent events: the same bytes decode to the same events whole and in chunks of a
/// size the first byte chooses.
pub fn sse(data: &[u8]) {
    let decode = |chunks: &mut dyn Iterator<Item = &[u8]>| {
        let mut decoder = Decoder::default();
        let mut events = Vec::new();
        for chunk in chunks {
            events.extend(decoder.feed(chunk));
        }
        events.extend(decoder.finish());
        events
    };
    let whole = decode(&mut std::iter::once(data));
    let size = data.first().map_or(1, |b| usize::from(*b % 16) + 1);
    assert_eq!(decode(&mut data.chunks(size)), whole);
}
