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
    Value::Object((*tool.accepts().schema.object).clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_export_is_a_tool_named_after_its_function() {
    let host = typed_host().await;
    let snapshot = host.catalog().snapshot();
    let mut names: Vec<&str> = snapshot.all_tools().map(|t| t.name()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "add",
            "bytes",
            "check",
            "crash",
            "echo_everything",
            "float",
            "get_forecast",
            "greet",
            "integers",
            "read_text",
            "remember"
        ]
    );
    let forecast = snapshot.get("get_forecast").expect("get_forecast");
    assert_eq!(forecast.backend_tool(), "weather/get-forecast");
    // No doc comments in this build: the description says what is called, with what.
    assert_eq!(
        forecast.description(),
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
    // 2.0 is an integer to JSON Schema, and to the conversion.
    assert_eq!(
        ok(&host.invoke(&s, "add", json!({"a": 2.0, "b": 1})).await),
        "3"
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
        snapshot.get("forecast").expect("forecast").description(),
        "Weather."
    );
    ok(&host
        .invoke(&s, "forecast", json!({"where_to": "here", "extras": []}))
        .await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_starts_from_a_fresh_instance_even_with_pages_kept_resident() {
    // The shared runtime keeps 16 MiB of each slot resident: what a call wrote is put back
    // from the image, never seen by the next call.
    let host = typed_host().await;
    let s = session();
    for i in 0..20 {
        let value = format!("secret {i}");
        let outcome = host.invoke(&s, "remember", json!({ "value": value })).await;
        assert_eq!(
            ok(&outcome),
            "null",
            "call {i} saw an earlier call's memory"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_result_is_refused_before_the_host_holds_it() {
    let fixture = Fixture::new();
    let limits = "[defaults]\nmax-output-bytes = 65536\nmemory-mib = 256\n";
    fixture.write("typed.toml", &ensemble("typed", "typed", limits));
    let host = fixture.host().await;
    let s = session();
    let small = ok(&host.invoke(&s, "bytes", json!({"count": 3})).await);
    assert_eq!(small, "[7,7,7]");
    // 100 MB of u8 would be 4 GB of values in the host: the lift stops at the call's share.
    let error = err(&host
        .invoke(&s, "bytes", json!({"count": 100_000_000}))
        .await);
    assert_eq!(error.kind, ErrorKind::Crashed, "{}", error.message);
    assert!(error.message.contains("hostcall"), "{}", error.message);
    // Within max-output-bytes as JSON, though not twice over: its structured result is the
    // same JSON, and is not counted again.
    let most = ok(&host.invoke(&s, "bytes", json!({"count": 20_000})).await);
    assert_eq!(most.len(), 40_001);
    // Within the share but past max-output-bytes as JSON: the output limit.
    let error = err(&host.invoke(&s, "bytes", json!({"count": 35_000})).await);
    assert_eq!(error.kind, ErrorKind::ResourceLimit, "{}", error.message);
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

mod properties {
    //! Any JSON value the derived schema accepts converts to WIT values, and what comes back
    //! converts to JSON that the output schema accepts: `echo-everything` takes and returns a
    //! record that holds every kind of WIT value.

    use super::typed_host;
    use crate::support::session;
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    use serde_json::{Map, Value, json};

    /// A value the schema accepts, and the value the tool must give back for it (options left
    /// out come back as `null`; f32 and f64 values are generated in f32 so both hold them).
    fn valid(schema: &Value) -> BoxedStrategy<(Value, Value)> {
        let same = |s: BoxedStrategy<Value>| s.prop_map(|v| (v.clone(), v)).boxed();
        if let Some(cases) = schema.get("oneOf").and_then(Value::as_array) {
            let cases: Vec<_> = cases.iter().map(valid).collect();
            return proptest::strategy::Union::new(cases).boxed();
        }
        if let Some(any) = schema.get("anyOf").and_then(Value::as_array) {
            return prop_oneof![valid(&any[0]), Just((Value::Null, Value::Null))].boxed();
        }
        if let Some(constant) = schema.get("const") {
            return Just((constant.clone(), constant.clone())).boxed();
        }
        if let Some(names) = schema.get("enum").and_then(Value::as_array) {
            return same(proptest::sample::select(names.clone()).boxed());
        }
        match schema["type"].as_str() {
            Some("null") => Just((Value::Null, Value::Null)).boxed(),
            Some("boolean") => same(any::<bool>().prop_map(Value::Bool).boxed()),
            Some("integer") => {
                let (min, max) = (&schema["minimum"], &schema["maximum"]);
                if let Some(max) = max.as_i64() {
                    let min = min.as_i64().expect("min");
                    same((min..=max).prop_map(Value::from).boxed())
                } else {
                    let max = max.as_u64().expect("max");
                    same((0..=max).prop_map(Value::from).boxed())
                }
            }
            Some("number") => same(
                any::<f32>()
                    .prop_filter("finite", |f| f.is_finite())
                    .prop_map(|f| json!(f64::from(f)))
                    .boxed(),
            ),
            Some("string") if schema.get("maxLength") == Some(&json!(1)) => {
                same(any::<char>().prop_map(|c| Value::String(c.into())).boxed())
            }
            Some("string") => same(any::<String>().prop_map(Value::String).boxed()),
            Some("array") if schema.get("uniqueItems") == Some(&json!(true)) => {
                let names = schema["items"]["enum"].as_array().expect("flags").clone();
                let count = names.len();
                same(
                    proptest::collection::vec(any::<bool>(), count)
                        .prop_map(move |on| {
                            let set = names.iter().zip(on).filter(|(_, on)| *on);
                            Value::Array(set.map(|(n, _)| n.clone()).collect())
                        })
                        .boxed(),
                )
            }
            Some("array") => {
                if let Some(items) = schema.get("prefixItems").and_then(Value::as_array) {
                    let items: Vec<_> = items.iter().map(valid).collect();
                    return items
                        .prop_map(|pairs| {
                            let (given, back) = pairs.into_iter().unzip();
                            (Value::Array(given), Value::Array(back))
                        })
                        .boxed();
                }
                proptest::collection::vec(valid(&schema["items"]), 0..4)
                    .prop_map(|pairs| {
                        let (given, back) = pairs.into_iter().unzip();
                        (Value::Array(given), Value::Array(back))
                    })
                    .boxed()
            }
            Some("object") => {
                let required: Vec<&str> = schema["required"]
                    .as_array()
                    .expect("required")
                    .iter()
                    .filter_map(Value::as_str)
                    .collect();
                let fields: Vec<_> = schema["properties"]
                    .as_object()
                    .expect("properties")
                    .iter()
                    .map(|(name, property)| {
                        let optional = !required.contains(&name.as_str());
                        let name = name.clone();
                        (valid(property), any::<bool>()).prop_map(move |((given, back), leave)| {
                            // An option may be left out: it comes back as null.
                            let left_out = optional && leave;
                            let back = if left_out { Value::Null } else { back };
                            (name.clone(), (!left_out).then_some(given), back)
                        })
                    })
                    .collect();
                fields
                    .prop_map(|fields| {
                        let mut given = Map::new();
                        let mut back = Map::new();
                        for (name, value, returned) in fields {
                            if let Some(value) = value {
                                given.insert(name.clone(), value);
                            }
                            back.insert(name, returned);
                        }
                        (Value::Object(given), Value::Object(back))
                    })
                    .boxed()
            }
            other => panic!("no generator for {other:?} in {schema}"),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_value_the_schema_accepts_goes_there_and_back() {
        let host = typed_host().await;
        let snapshot = host.catalog().snapshot();
        let tool = snapshot.get("echo_everything").expect("echo_everything");
        let input = Value::Object((*tool.accepts().schema.object).clone());
        let output = Value::Object(
            (*tool
                .accepts()
                .output
                .as_ref()
                .expect("output schema")
                .schema)
                .clone(),
        );
        let output = jsonschema::validator_for(&output).expect("output schema compiles");
        let strategy = valid(&input);
        let mut runner = TestRunner::new(Config {
            cases: 64,
            ..Config::default()
        });
        let mut cases = Vec::new();
        for _ in 0..64 {
            let tree = strategy.new_tree(&mut runner).expect("a value");
            cases.push(tree.current());
        }
        let s = session();
        for (given, expected) in cases {
            // The generated value is the arguments object itself: `{"value": ...}`.
            let arguments = given;
            let outcome = host.invoke(&s, "echo_everything", arguments.clone()).await;
            let text = match &outcome.result {
                Ok(result) => result.text().into_owned(),
                Err(e) => panic!("{arguments} was refused: {e}"),
            };
            let returned: Value = serde_json::from_str(&text).expect("JSON");
            assert_eq!(returned, expected["value"], "for {arguments}");
            assert!(
                output.is_valid(&returned),
                "{returned} fails the output schema"
            );
        }
    }
}
