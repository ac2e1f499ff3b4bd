//! Typed components (DESIGN.md section 3.1): a component of any world, each exported function
//! a tool, its schema derived from the WIT types, arguments and results crossing as JSON.

use crate::support::{Fixture, ensemble, err, ok, session};
use serde_json::{Value, json};
use toolhost::invoke::{ErrorKind, Host};

/// A host over the typed test component, every export offered (no invokers listed).
async fn typed_host() -> Host {
    let fixture = Fixture::new();
    fixture.write("typed.toml", &ensemble("typed", "typed", ""));
    fixture.host().await
}

fn schema_of(host: &Host, tool: &str) -> Value {
    let snapshot = host.catalog().snapshot();
    let tool = snapshot
        .get(tool)
        .unwrap_or_else(|| panic!("no tool {tool}"));
    Value::Object((*tool.schema.object).clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_export_is_a_tool_named_after_its_function() {
    let host = typed_host().await;
    let snapshot = host.catalog().snapshot();
    let mut names: Vec<&str> = snapshot.all_tools().map(|t| t.name.as_str()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "add",
            "check",
            "crash",
            "float",
            "get_forecast",
            "greet",
            "integers"
        ]
    );
    let forecast = snapshot.get("get_forecast").expect("get_forecast");
    assert_eq!(forecast.backend_tool, "weather/get-forecast");
    // No doc comments in this build: the description says what is called, with what.
    assert_eq!(
        &*forecast.description,
        "Calls `weather/get-forecast`(where_to, days, extras) of a typed component."
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemas_follow_the_wit_types() {
    let host = typed_host().await;
    assert_eq!(
        schema_of(&host, "add"),
        json!({
            "type": "object",
            "properties": {
                "a": {"type": "integer", "minimum": -2147483648i64, "maximum": 2147483647},
                "b": {"type": "integer", "minimum": -2147483648i64, "maximum": 2147483647},
            },
            "required": ["a", "b"],
            "additionalProperties": false,
        })
    );
    let forecast = schema_of(&host, "get_forecast");
    assert_eq!(forecast["required"], json!(["where_to", "extras"]));
    assert_eq!(
        forecast["properties"]["days"],
        json!({"anyOf": [{"type": "integer", "minimum": 0, "maximum": 255}, {"type": "null"}]})
    );
    assert_eq!(
        forecast["properties"]["extras"],
        json!({
            "type": "array",
            "items": {"type": "string", "enum": ["wind", "humidity"]},
            "uniqueItems": true,
        })
    );
    assert_eq!(
        forecast["properties"]["where_to"]["oneOf"][0],
        json!({"const": "here"})
    );
    assert_eq!(
        forecast["properties"]["where_to"]["oneOf"][2]["properties"]["at"],
        json!({
            "type": "array",
            "prefixItems": [{"type": "number"}, {"type": "number"}],
            "minItems": 2,
            "maxItems": 2,
        })
    );
    let greet = schema_of(&host, "greet");
    assert_eq!(
        greet["properties"]["initial"],
        json!({"type": "string", "minLength": 1, "maxLength": 1})
    );
    let check = schema_of(&host, "check");
    assert_eq!(
        check["properties"]["outcome"]["oneOf"][1],
        json!({
            "type": "object",
            "properties": {"err": {"type": "string"}},
            "required": ["err"],
            "additionalProperties": false,
        })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_cross_as_json_both_ways() {
    let host = typed_host().await;
    let s = session();
    assert_eq!(
        ok(&host.invoke(&s, "add", json!({"a": 2, "b": 40})).await),
        "42"
    );
    // A returned string is the text as it is.
    assert_eq!(
        ok(&host
            .invoke(&s, "greet", json!({"name": "Ada", "initial": "é"}))
            .await),
        "hello Ada (é)"
    );
    let report: Value = serde_json::from_str(&ok(&host
        .invoke(
            &s,
            "get_forecast",
            json!({"where_to": {"at": [1.5, -2.0]}, "days": 3, "extras": ["wind", "humidity"]}),
        )
        .await))
    .expect("JSON");
    assert_eq!(
        report,
        json!({
            "place": "1.5,-2",
            "celsius": 21.5,
            "conditions": "cloudy",
            "days": [1, 2, 3],
            "note": "humid",
        })
    );
    // An option left out is `none`; a case without a payload is its name.
    let here: Value = serde_json::from_str(&ok(&host
        .invoke(
            &s,
            "get_forecast",
            json!({"where_to": "here", "extras": []}),
        )
        .await))
    .expect("JSON");
    assert_eq!(here["days"], json!([1]));
    assert_eq!(here["note"], Value::Null);
    // Every integer at its bounds, 64-bit ones past 2^53 exactly.
    let bounds = json!({
        "a": -128, "b": 255, "c": -32768, "d": 65535, "e": -2147483648i64, "f": 4294967295u64,
        "g": i64::MIN, "h": u64::MAX,
    });
    let echoed: Value =
        serde_json::from_str(&ok(&host.invoke(&s, "integers", bounds).await)).expect("JSON");
    assert_eq!(
        echoed,
        json!([
            -128,
            255,
            -32768,
            65535,
            -2147483648i64,
            4294967295u64,
            i64::MIN,
            u64::MAX
        ])
    );
    // A function that returns `result<_, u32>`: ok is null.
    assert_eq!(
        ok(&host
            .invoke(
                &s,
                "check",
                json!({"outcome": {"err": "no"}, "flags_on": [true]})
            )
            .await),
        "null"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_the_tools_own_or_name_their_place() {
    let host = typed_host().await;
    let s = session();
    // `err` of a returned result: the tool's error, a string as it is.
    let error = err(&host
        .invoke(
            &s,
            "get_forecast",
            json!({"where_to": {"named": "nowhere"}, "extras": []}),
        )
        .await);
    assert_eq!(error.kind, ErrorKind::ToolError);
    assert_eq!(error.message, "unknown place nowhere");
    // Any other error value is its JSON.
    let error = err(&host
        .invoke(
            &s,
            "check",
            json!({"outcome": {"ok": 7}, "flags_on": [true, true]}),
        )
        .await);
    assert_eq!(
        (error.kind, error.message.as_str()),
        (ErrorKind::ToolError, "7")
    );
    // Out of the type's range: refused by the derived schema, with a pointer.
    let error = err(&host
        .invoke(&s, "add", json!({"a": 2147483648u64, "b": 0}))
        .await);
    assert_eq!(error.kind, ErrorKind::InvalidArguments);
    assert_eq!(error.violations[0].pointer, "/a");
    // A NaN has no JSON: the tool's error, naming where it was.
    let error = err(&host.invoke(&s, "float", json!({"nan": true})).await);
    assert_eq!(error.kind, ErrorKind::ToolError);
    assert!(error.message.contains("NaN"), "{}", error.message);
    assert_eq!(
        ok(&host.invoke(&s, "float", json!({"nan": false})).await),
        "1.5"
    );
    // A trap is a crash, and says what the component wrote.
    let error = err(&host.invoke(&s, "crash", json!({"message": "boom"})).await);
    assert_eq!(error.kind, ErrorKind::Crashed);
    assert!(error.message.contains("boom"), "{}", error.message);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operators_wider_schema_still_cannot_pass_what_wit_cannot_hold() {
    let fixture = Fixture::new();
    let invokers = "[[invokers]]\ninvoker = { name = \"sum\", tool = \"add\" }\n\
        [invokers.arguments]\ntype = \"object\"\n\n\
        [[invokers]]\ninvoker = { name = \"forecast\", tool = \"weather/get-forecast\", description = \"Weather.\" }\n";
    fixture.write("typed.toml", &ensemble("typed", "typed", invokers));
    let host = fixture.host().await;
    let s = session();
    let error = err(&host.invoke(&s, "sum", json!({"a": "two", "b": 1})).await);
    assert_eq!(error.kind, ErrorKind::InvalidArguments);
    assert!(error.message.contains("/a"), "{}", error.message);
    let error = err(&host.invoke(&s, "sum", json!({"a": 1})).await);
    assert!(
        error.message.contains("/b: is required"),
        "{}",
        error.message
    );
    // `tool` may name the export by its id; the invoker's description wins.
    let snapshot = host.catalog().snapshot();
    assert_eq!(
        &*snapshot.get("forecast").expect("forecast").description,
        "Weather."
    );
    ok(&host
        .invoke(&s, "forecast", json!({"where_to": "here", "extras": []}))
        .await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_calls_are_deduplicated_like_any_tool() {
    let host = typed_host().await;
    let s = session();
    let first = host.invoke(&s, "add", json!({"a": 1, "b": 2})).await;
    let second = host.invoke(&s, "add", json!({"b": 2, "a": 1})).await;
    assert_eq!(ok(&first), ok(&second));
    assert!(second.deduplicated);
}
