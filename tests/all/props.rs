//! Property tests (proptest) over the two parsers that take untrusted input: descriptor files
//! and call arguments. They stand in for fuzzing (cargo-fuzz needs a nightly toolchain).
//! The suite runs 256 cases each; `PROPTEST_CASES=200000 cargo test --test all props` runs a
//! long campaign.

use crate::support::{Fixture, ensemble};
use proptest::prelude::*;
use serde_json::{Map, Value};
use std::path::Path;
use std::sync::{Arc, OnceLock};
use toolhost::catalog::{Tool, VersionHash};
use toolhost::config::v1::{EnsembleFile, HostFile, InvokerFile};
use toolhost::config::{Diagnostic, FileKind, parse};
use toolhost::invoke::{DedupKey, canonical_json, validate};

/// Fragments that descriptor files are made of, so that generated text gets past the TOML
/// syntax often enough to reach the deserializer and the validating newtypes.
fn descriptor_text() -> impl Strategy<Value = String> {
    let fragment = prop_oneof![
        Just("schema-version = 1\n".to_string()),
        Just("[ensemble]\n".to_string()),
        Just("[invoker]\n".to_string()),
        Just("[defaults]\n".to_string()),
        Just("[grants]\n".to_string()),
        Just("[[invokers]]\n".to_string()),
        Just("[limits]\n".to_string()),
        Just("[capabilities]\n".to_string()),
        Just("[arguments]\n".to_string()),
        "[a-z-]{1,12} = \"[ -~]{0,20}\"\n",
        "[a-z-]{1,12} = -?[0-9]{1,12}\n",
        "(name|tool|component|blake3|prefix|source|dedup|timeout-ms|memory-mib) = \"[a-zA-Z0-9_./-]{0,70}\"\n",
        "(timeout-ms|memory-mib|max-output-bytes|max-concurrency|max-queue) = -?[0-9]{1,20}\n",
        "(files|env|network) = \\[[ -~]{0,40}\\]\n",
        "invoker = \\{ name = \"[ -~]{0,10}\" \\}\n",
        "[ -~\n\té€😀]{0,30}",
    ];
    prop::collection::vec(fragment, 0..24).prop_map(|parts| parts.concat())
}

fn check_diagnostic(diagnostic: &Diagnostic, text: &str) {
    let lines = text.split('\n').count();
    if let Some(line) = diagnostic.location.line {
        assert!(
            line >= 1 && line <= lines + 1,
            "line {line} outside a {lines}-line file"
        );
    }
    // Rendering must not panic, whatever the text.
    let _ = diagnostic.to_string();
}

proptest! {
    #[test]
    fn descriptor_parsing_never_panics_and_errors_point_into_the_file(text in descriptor_text()) {
        let file = Path::new("fuzz.toml");
        for kind in [FileKind::Ensemble, FileKind::Invoker, FileKind::Host] {
            let result = match kind {
                FileKind::Ensemble => parse::<EnsembleFile>(file, &text, kind).map(drop),
                FileKind::Invoker => parse::<InvokerFile>(file, &text, kind).map(drop),
                FileKind::Host => parse::<HostFile>(file, &text, kind).map(drop),
            };
            if let Err(diagnostic) = result {
                check_diagnostic(&diagnostic, &text);
            }
        }
    }
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        "[ -~é€😀\u{0}\n\"\\\\]{0,16}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::vec(("[a-z/~0-9]{0,6}", inner), 0..8)
                .prop_map(|pairs| Value::Object(pairs.into_iter().collect::<Map<String, Value>>())),
        ]
    })
}

/// A tool with a typical schema, built once (resolving needs a component and a runtime).
fn tool() -> Arc<Tool> {
    static TOOL: OnceLock<Arc<Tool>> = OnceLock::new();
    TOOL.get_or_init(|| {
        let fixture = Fixture::new();
        let rest = "[[invokers]]\ninvoker = { name = \"echo\" }\n[invokers.arguments]\ntype = \"object\"\n\
            required = [\"query\"]\nadditionalProperties = false\n\
            [invokers.arguments.properties.query]\ntype = \"string\"\nminLength = 1\npattern = \"^[a-z ]+$\"\n\
            [invokers.arguments.properties.limit]\ntype = \"integer\"\nminimum = 1\nmaximum = 100\n\
            [invokers.arguments.properties.tags]\ntype = \"array\"\nitems = { type = \"string\", enum = [\"a\", \"b\"] }\n\
            [invokers.arguments.properties.range]\ntype = \"object\"\nrequired = [\"from\"]\n";
        fixture.write("v.toml", &ensemble("v", "echo", rest));
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio");
        let resolved = runtime.block_on(fixture.resolve());
        assert!(resolved.refused.is_empty(), "{:?}", resolved.refused);
        resolved.catalog.get("echo").expect("tool").clone()
    })
    .clone()
}

/// The same value with the keys of every object in reverse insertion order.
fn reversed(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .rev()
                .map(|(k, v)| (k.clone(), reversed(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(reversed).collect()),
        other => other.clone(),
    }
}

proptest! {
    #[test]
    fn validation_never_panics_and_every_violation_has_a_json_pointer(value in json_value()) {
        let tool = tool();
        let mut arguments = Map::new();
        arguments.insert("query".into(), value.clone());
        arguments.insert("range".into(), value.clone());
        arguments.insert("tags".into(), value);
        if let Err(error) = validate(&tool, &Value::Object(arguments.clone())) {
            prop_assert!(!error.violations.is_empty());
            for violation in &error.violations {
                prop_assert!(violation.pointer.is_empty() || violation.pointer.starts_with('/'), "{}", violation.pointer);
                // Every pointer leads somewhere in the arguments (or to a missing property's parent).
                let parent = violation.pointer.rsplit_once('/').map_or("", |(p, _)| p);
                let target = Value::Object(arguments.clone());
                prop_assert!(target.pointer(&violation.pointer).is_some() || target.pointer(parent).is_some());
            }
        }
    }

    #[test]
    fn dedup_keys_ignore_key_order_and_canonical_json_round_trips(value in json_value()) {
        let version = VersionHash([1; 32]);
        prop_assert_eq!(DedupKey::new("t", &version, &value), DedupKey::new("t", &version, &reversed(&value)));
        let canonical = canonical_json(&value);
        let back: Value = serde_json::from_slice(&canonical).expect("canonical JSON parses");
        prop_assert_eq!(&back, &value);
        prop_assert_eq!(canonical_json(&back), canonical);
    }
}

/// Text shaped like network patterns, with the pieces that trip parsers.
fn pattern_text() -> impl Strategy<Value = String> {
    let scheme = prop_oneof![
        Just(""),
        Just("http://"),
        Just("https://"),
        Just("ftp://"),
        Just("://")
    ];
    let host = prop_oneof![
        "[a-z0-9-]{0,10}(\\.[a-z0-9-]{0,10}){0,3}",
        "\\*\\.[a-z0-9.-]{0,20}",
        "[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}(/[0-9]{1,3})?",
        "\\[[0-9a-f:]{0,20}(/[0-9]{1,3})?\\]",
        "[ -~é]{0,20}",
    ];
    let port = prop_oneof![Just(String::new()), ":[0-9]{0,6}", ":[ -~]{0,4}"];
    (scheme, host, port).prop_map(|(s, h, p)| format!("{s}{h}{p}"))
}

proptest! {
    #[test]
    fn network_patterns_parse_without_panics_and_print_back_to_themselves(text in pattern_text()) {
        use toolhost::sandbox::NetPattern;
        use toolhost::sandbox::network::Target;
        if let Ok(pattern) = NetPattern::parse(&text) {
            let printed = pattern.to_string();
            let again = NetPattern::parse(&printed).expect("a printed pattern parses");
            prop_assert_eq!(&again, &pattern);
            prop_assert!(pattern.covers(&pattern), "{} does not cover itself", printed);
            // A pattern over a name matches exactly that name, on its port.
            if let toolhost::sandbox::network::HostRule::Name(name) = &pattern.host {
                let target = Target { https: true, host: name.clone(), port: pattern.port };
                let http = Target { https: false, ..target.clone() };
                prop_assert!(pattern.matches(&target) || pattern.matches(&http));
                let other_port = Target { port: pattern.port.wrapping_add(1), ..target };
                prop_assert!(!pattern.matches(&other_port));
            }
        }
    }
}
