//! The chat API's documents held to the host: the `curl` example of docs/chat-api.md run as
//! written, and docs/chat-api.openapi.yaml describing every route the API has and every event a
//! run streams.

use crate::scripted::{Scripted, openai};
use crate::web::{Host, base, chat, fixture, get, host, serve};
use serde_json::{Value, json};

/// The `curl` example of docs/chat-api.md, run as written (but for the port) against a host
/// whose model is scripted: it prints the events the document shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_curl_example_works_as_written() {
    let model = Scripted::start(vec![
        openai::stream(
            "",
            &[("call_1", "calculate", r#"{"expression": "40 + 2"}"#)],
        ),
        openai::text("It is 42."),
    ]);
    let fixture = fixture(&model.base_url, "");
    let server = serve(&fixture, &[]);
    let document = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/chat-api.md"),
    )
    .expect("docs/chat-api.md");
    let example = document
        .split("## Example")
        .nth(1)
        .and_then(|rest| rest.split("```sh\n").nth(1))
        .and_then(|block| block.split("```").next())
        .expect("a sh block under ## Example");
    assert!(example.contains("http://127.0.0.1:8750"), "{example}");
    let command = example.replace("http://127.0.0.1:8750", &base(&server));
    let output = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(&command)
        .output()
        .await
        .expect("sh runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{command}\n{stdout}");
    for expected in [
        "event: conversation\n",
        "event: tool_call\ndata: {\"type\":\"tool_call\",\"id\":\"call_1\",\"name\":\"calculate\"",
        "event: tool_result\n",
        "\"outcome\":\"ok\"",
        "event: text_delta\ndata: {\"type\":\"text_delta\",\"text\":\"It i",
        "event: done\ndata: {\"type\":\"done\",\"ending\":\"answer\",\"text\":\"It is 42.\",\"iterations\":2",
    ] {
        assert!(
            stdout.contains(expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
}

/// YAML as JSON (the OpenAPI description is YAML).
fn json_of(yaml: &yaml_rust2::Yaml) -> Value {
    use yaml_rust2::Yaml;
    match yaml {
        Yaml::Hash(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.as_str().expect("string key").to_string(), json_of(v)))
                .collect(),
        ),
        Yaml::Array(items) => Value::Array(items.iter().map(json_of).collect()),
        Yaml::String(text) => json!(text),
        Yaml::Integer(n) => json!(n),
        Yaml::Real(text) => json!(text.parse::<f64>().expect("number")),
        Yaml::Boolean(b) => json!(b),
        Yaml::Null => Value::Null,
        other => panic!("unexpected YAML {other:?}"),
    }
}

/// The `Event` schema of docs/chat-api.openapi.yaml, compiled.
pub(crate) fn event_validator() -> jsonschema::Validator {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let text = std::fs::read_to_string(root.join("docs/chat-api.openapi.yaml")).expect("yaml");
    let document = json_of(&yaml_rust2::YamlLoader::load_from_str(&text).expect("YAML")[0]);
    jsonschema::validator_for(&document["components"]["schemas"]["Event"])
        .expect("the Event schema compiles")
}

/// docs/chat-api.openapi.yaml describes every route the chat API has, and the events a real
/// run streams match its `Event` schema.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_description_covers_every_route_and_every_event() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let text = std::fs::read_to_string(root.join("docs/chat-api.openapi.yaml")).expect("yaml");
    let document = json_of(&yaml_rust2::YamlLoader::load_from_str(&text).expect("YAML")[0]);
    let documented: std::collections::BTreeSet<&str> = document["paths"]
        .as_object()
        .expect("paths")
        .keys()
        .map(String::as_str)
        .collect();
    let source = std::fs::read_to_string(root.join("crates/web/src/lib.rs")).expect("source");
    let routed: std::collections::BTreeSet<&str> = source
        .split(".route(")
        .skip(1)
        .filter_map(|rest| rest.trim_start().strip_prefix('"')?.split('"').next())
        .collect();
    assert_eq!(documented, routed);

    let Host {
        model: _model,
        fixture: _fixture,
        server: _server,
        api,
    } = host(
        vec![
            openai::stream(
                "Computing.",
                &[("c1", "calculate", r#"{"expression": "1 + 1"}"#)],
            ),
            openai::text("2."),
        ],
        "",
    );
    let events = chat(&api, json!({"message": "1 + 1?"})).await.rest().await;
    let id = events[0]["id"].as_str().expect("id");
    let (_, kept) = get(&format!("{api}/{id}")).await;
    let validator = event_validator();
    for event in events.iter().chain(kept["log"].as_array().expect("log")) {
        let errors: Vec<String> = validator
            .iter_errors(event)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{event}: {errors:?}");
    }
}
