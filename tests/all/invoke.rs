//! The call path: lookup, allow/deny, argument validation, enabled flags, prefixes, defaults
//! from `describe()`, snapshots and the audit log.

use crate::support::{Fixture, ensemble, err, ok, session};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use toolhost::invoke::{CallPolicy, ErrorKind, Session};

const ECHO: &str = "[[invokers]]\ninvoker = { name = \"echo\" }\n\n[[invokers]]\ninvoker = { name = \"reject\" }\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_tool_is_an_error_that_lists_the_tools() {
    let fixture = Fixture::new();
    fixture.write("echo.toml", &ensemble("echo", "echo", ECHO));
    let host = fixture.host().await;
    let error = err(&host.invoke(&session(), "nope", json!({})).await);
    assert_eq!(error.kind, ErrorKind::UnknownTool);
    assert!(error.message.contains("echo, reject"), "{}", error.message);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_and_deny_lists_apply() {
    let fixture = Fixture::new();
    fixture.write("echo.toml", &ensemble("echo", "echo", ECHO));
    let host = fixture.host().await;
    let policy = CallPolicy {
        allow: Some(vec!["e*".into(), "reject".into()]),
        deny: vec!["reject".into()],
    };
    let s = Session::with_policy("restricted", policy);
    ok(&host.invoke(&s, "echo", json!({})).await);
    assert_eq!(
        err(&host.invoke(&s, "reject", json!({})).await).kind,
        ErrorKind::Denied
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_json_and_non_objects_are_invalid_arguments() {
    let fixture = Fixture::new();
    fixture.write("echo.toml", &ensemble("echo", "echo", ECHO));
    let host = fixture.host().await;
    let error = err(&host.invoke(&session(), "echo", r#"{"text": "#).await);
    assert_eq!(error.kind, ErrorKind::InvalidArguments);
    assert!(
        error.message.contains("not valid JSON"),
        "{}",
        error.message
    );
    let error = err(&host.invoke(&session(), "echo", "[1, 2]").await);
    assert_eq!(error.kind, ErrorKind::InvalidArguments);
    assert!(error.message.contains("must be a JSON object"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_schema_violation_is_listed_with_its_json_pointer() {
    let fixture = Fixture::new();
    let invoker = "schema-version = 1\n\n[invoker]\nname = \"echo\"\n\n[arguments]\ntype = \"object\"\n\
        required = [\"a\", \"d\"]\n\n[arguments.properties.a]\ntype = \"integer\"\n\n\
        [arguments.properties.b]\ntype = \"object\"\n[arguments.properties.b.properties.c]\ntype = \"string\"\n";
    fixture.write("echo/echo.toml", invoker);
    fixture.write(
        "echo.toml",
        &ensemble(
            "echo",
            "echo",
            "[[invokers]]\nsource = \"echo/echo.toml\"\n",
        ),
    );
    let host = fixture.host().await;
    let error = err(&host
        .invoke(&session(), "echo", json!({"a": "x", "b": {"c": 5}}))
        .await);
    assert_eq!(error.kind, ErrorKind::InvalidArguments);
    let mut pointers: Vec<&str> = error
        .violations
        .iter()
        .map(|v| v.pointer.as_str())
        .collect();
    pointers.sort();
    assert_eq!(pointers, ["", "/a", "/b/c"], "{error:?}");
    assert!(
        error.message.contains("/b/c: 5 is not of type \"string\""),
        "{}",
        error.message
    );
    assert!(
        error.message.contains("\"d\" is a required property"),
        "{}",
        error.message
    );
    ok(&host
        .invoke(&session(), "echo", json!({"a": 1, "d": true}))
        .await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plugins_invalid_arguments_error_reaches_the_caller() {
    let fixture = Fixture::new();
    fixture.write("echo.toml", &ensemble("echo", "echo", ECHO));
    let host = fixture.host().await;
    let error = err(&host.invoke(&session(), "reject", json!({})).await);
    assert_eq!(error.kind, ErrorKind::InvalidArguments);
    assert_eq!(error.message, "reject accepts nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disabled_ensembles_tools_are_gone() {
    let fixture = Fixture::new();
    fixture.write(
        "on.toml",
        &ensemble(
            "on",
            "echo",
            "[[invokers]]\ninvoker = { name = \"echo\" }\n",
        ),
    );
    fixture.write(
        "off.toml",
        "schema-version = 1\n[ensemble]\nname = \"off\"\nenabled = false\ncomponent = \"../echo.wasm\"\n\n\
         [[invokers]]\ninvoker = { name = \"off_echo\", tool = \"echo\" }\n\n\
         [[invokers]]\n# A disabled ensemble may reuse a name: only enabled tools must be unique.\ninvoker = { name = \"echo\" }\n",
    );
    fixture.write(
        "half.toml",
        &ensemble(
            "half",
            "echo",
            "[[invokers]]\ninvoker = { name = \"half_off\", tool = \"echo\", enabled = false }\n",
        ),
    );
    let host = fixture.host().await;
    let catalog = host.catalog().snapshot();
    let active: Vec<&str> = catalog.tools().map(|t| t.name()).collect();
    assert_eq!(active, ["echo"]);
    let disabled: Vec<&str> = catalog
        .all_tools()
        .filter(|t| !t.enabled())
        .map(|t| t.name())
        .collect();
    assert_eq!(disabled, ["half_off", "off_echo", "echo"]);
    for name in ["off_echo", "half_off"] {
        assert_eq!(
            err(&host.invoke(&session(), name, json!({})).await).kind,
            ErrorKind::UnknownTool
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefix_namespaces_an_ensembles_tools() {
    let fixture = Fixture::new();
    fixture.write(
        "a.toml",
        &ensemble("a", "echo", "[[invokers]]\ninvoker = { name = \"echo\" }\n"),
    );
    let prefixed = "schema-version = 1\n[ensemble]\nname = \"b\"\nprefix = \"b\"\ncomponent = \"../echo.wasm\"\n\n\
        [[invokers]]\ninvoker = { name = \"echo\" }\n";
    fixture.write("b.toml", prefixed);
    let host = fixture.host().await;
    ok(&host.invoke(&session(), "echo", json!({})).await);
    ok(&host.invoke(&session(), "b_echo", json!({})).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn description_and_schema_default_to_describe_and_can_be_overridden() {
    let fixture = Fixture::new();
    let rest = "[[invokers]]\ninvoker = { name = \"echo\" }\n\n\
        [[invokers]]\ninvoker = { name = \"shout\", tool = \"echo\", description = \"Says it louder\" }\n\
        arguments = { type = \"object\", required = [\"text\"], properties = { text = { type = \"string\" } } }\n";
    fixture.write("echo.toml", &ensemble("echo", "echo", rest));
    let host = fixture.host().await;
    let catalog = host.catalog().snapshot();
    let echo = catalog.get("echo").expect("echo");
    assert_eq!(echo.description(), "Return the arguments exactly as given.");
    assert_eq!(echo.input_schema()["properties"]["text"]["type"], "string");
    let shout = catalog.get("shout").expect("shout");
    assert_eq!(shout.description(), "Says it louder");
    assert_eq!(shout.input_schema()["required"], json!(["text"]));
    assert_eq!(
        err(&host.invoke(&session(), "shout", json!({})).await).kind,
        ErrorKind::InvalidArguments
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_come_from_the_invoker_then_the_defaults_then_built_ins() {
    let fixture = Fixture::new();
    let rest = "[defaults]\ntimeout-ms = 1234\n\n[[invokers]]\ninvoker = { name = \"echo\" }\nlimits = { memory-mib = 20 }\n\n\
        [[invokers]]\ninvoker = { name = \"reject\" }\n";
    fixture.write("echo.toml", &ensemble("echo", "echo", rest));
    let host = fixture.host().await;
    let catalog = host.catalog().snapshot();
    let echo = catalog.get("echo").expect("echo");
    assert_eq!(echo.policy().limits.timeout.as_millis(), 1234);
    assert_eq!(echo.policy().limits.memory_bytes, 20 << 20);
    assert_eq!(echo.policy().limits.max_output_bytes, 1 << 20);
    let reject = catalog.get("reject").expect("reject");
    assert_eq!(reject.policy().limits.memory_bytes, 64 << 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_in_flight_finishes_on_the_catalog_it_started_with() {
    let fixture = Fixture::new();
    let data = fixture.mkdir("data");
    let rest = "[defaults]\ntimeout-ms = 30000\n\n\
        [grants]\nfiles = [{ host = \"../data\", guest = \"/data\", access = \"read-write\" }]\n\n\
        [[invokers]]\ninvoker = { name = \"count\" }\n\
        capabilities = { files = [{ guest = \"/data\", access = \"read-write\" }] }\n";
    fixture.write("t.toml", &ensemble("t", "testbed", rest));
    let host = Arc::new(fixture.host().await);
    let call = {
        let host = host.clone();
        tokio::spawn(async move {
            host.invoke(
                &session(),
                "count",
                json!({"path": "/data/runs", "sleep_ms": 500}),
            )
            .await
        })
    };
    // The tool writes its line before it sleeps: once the line is there, the call is in flight.
    tokio::time::timeout(Duration::from_secs(60), async {
        while !data.join("runs").exists() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the call started");
    // The ensemble is disabled while the call runs.
    let disabled =
        ensemble("t", "testbed", rest).replace("[ensemble]", "[ensemble]\nenabled = false");
    std::fs::write(fixture.ensembles().join("t.toml"), disabled).expect("write");
    host.catalog()
        .replace(fixture.resolve().await.catalog, Vec::new());
    let outcome = call.await.expect("task");
    assert!(ok(&outcome).contains("\"runs\":1"), "{:?}", outcome.result);
    let after = host
        .invoke(&session(), "count", json!({"path": "/data/runs"}))
        .await;
    assert_eq!(err(&after).kind, ErrorKind::UnknownTool);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_leaves_one_redacted_audit_record() {
    let fixture = Fixture::new();
    fixture.write("echo.toml", &ensemble("echo", "echo", ECHO));
    let audit = fixture.root().join("logs/audit.jsonl");
    let host = fixture.host_with_audit(Some(&audit)).await;
    let s = Session::new("session-7");
    let args = json!({"text": "hi", "api_key": "sk-123", "nested": {"password": "pw"}});
    ok(&host.invoke(&s, "echo", args.clone()).await);
    ok(&host.invoke(&s, "echo", args).await);
    err(&host.invoke(&s, "nope", json!({})).await);
    let text = std::fs::read_to_string(&audit).expect("audit written");
    assert!(
        !text.contains("sk-123") && !text.contains("\"pw\""),
        "a secret reached the audit log: {text}"
    );
    let records: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    assert_eq!(records.len(), 3);
    let first = &records[0];
    assert_eq!(first["session"], "session-7");
    assert_eq!(first["tool"], "echo");
    assert_eq!(first["ensemble"], "echo");
    assert_eq!(first["outcome"], "ok");
    assert_eq!(first["deduplicated"], false);
    assert_eq!(first["arguments"]["api_key"], "[redacted]");
    assert_eq!(first["arguments"]["nested"]["password"], "[redacted]");
    assert_eq!(first["arguments"]["text"], "hi");
    assert_eq!(first["component"].as_str().map(str::len), Some(64));
    assert!(first["duration_ms"].as_f64().is_some());
    assert!(first["time"].as_str().is_some_and(|t| t.ends_with('Z')));
    assert_eq!(records[1]["deduplicated"], true);
    assert_eq!(records[2]["outcome"], "unknown-tool");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_past_the_concurrency_limit_and_its_queue_are_busy() {
    let fixture = Fixture::new();
    let rest = "[defaults]\ndedup = \"off\"\ntimeout-ms = 20000\n\n\
        [[invokers]]\ninvoker = { name = \"sleep\" }\nlimits = { max-concurrency = 1, max-queue = 1 }\n";
    fixture.write("t.toml", &ensemble("t", "testbed", rest));
    let host = Arc::new(fixture.host().await);
    let calls: Vec<_> = (0..3)
        .map(|n| {
            let host = host.clone();
            tokio::spawn(async move {
                host.invoke(&session(), "sleep", json!({"ms": 1500, "n": n}))
                    .await
            })
        })
        .collect();
    let mut busy = Vec::new();
    let mut succeeded = 0;
    for call in calls {
        match call.await.expect("task").result {
            Ok(_) => succeeded += 1,
            Err(e) => busy.push(e),
        }
    }
    assert_eq!(
        succeeded, 2,
        "one running and one queued call should succeed: {busy:?}"
    );
    assert_eq!(busy.len(), 1);
    assert_eq!(busy[0].kind, ErrorKind::Busy);
    assert!(
        busy[0].message.contains("1 call(s) running and 1 waiting"),
        "{}",
        busy[0].message
    );
    // With the queue drained, the tool answers again.
    ok(&host.invoke(&session(), "sleep", json!({"ms": 1})).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_output_too_and_are_cut_at_max_output_bytes() {
    let fixture = Fixture::new();
    let rest =
        "[[invokers]]\ninvoker = { name = \"fail_big\" }\nlimits = { max-output-bytes = 1000 }\n";
    fixture.write("t.toml", &ensemble("t", "testbed", rest));
    let audit = fixture.root().join("audit.jsonl");
    let host = fixture.host_with_audit(Some(&audit)).await;
    let error = err(&host
        .invoke(&Session::new("s"), "fail_big", json!({"bytes": 20_000_000}))
        .await);
    assert_eq!(error.kind, ErrorKind::ToolError);
    assert!(error.message.len() < 1100, "{} bytes", error.message.len());
    assert!(
        error.message.ends_with("more bytes cut]"),
        "{}",
        &error.message[900..]
    );
    let record = std::fs::read_to_string(&audit).expect("audit");
    assert!(
        record.len() < 3000,
        "the audit record is {} bytes",
        record.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn violations_are_listed_up_to_a_bound_and_their_values_stay_out_of_the_audit() {
    let fixture = Fixture::new();
    let rest = "[[invokers]]\ninvoker = { name = \"echo\" }\n\
        [invokers.arguments]\ntype = \"object\"\n\
        [invokers.arguments.properties.password]\ntype = \"string\"\nmaxLength = 8\n\
        [invokers.arguments.properties.tags]\ntype = \"array\"\nitems = { type = \"string\" }\n";
    fixture.write("e.toml", &ensemble("e", "echo", rest));
    let audit = fixture.root().join("audit.jsonl");
    let host = fixture.host_with_audit(Some(&audit)).await;
    let tags: Vec<u32> = (0..100).collect();
    let error = err(&host
        .invoke(
            &Session::new("s"),
            "echo",
            json!({"password": "hunter2hunter2", "tags": tags}),
        )
        .await);
    assert_eq!(error.violations.len(), 20);
    assert!(
        error.message.ends_with("; and 81 more"),
        "{}",
        error.message
    );
    // The model sees what it sent; the audit log does not keep it.
    assert!(error.message.contains("hunter2hunter2"));
    let record = std::fs::read_to_string(&audit).expect("audit");
    assert!(!record.contains("hunter2"), "{record}");
    assert!(record.contains("/password"), "{record}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_log_is_private_and_keeps_no_secret_shaped_value() {
    use std::os::unix::fs::PermissionsExt;
    let fixture = Fixture::new();
    fixture.write("echo.toml", &ensemble("echo", "echo", ECHO));
    let audit = fixture.root().join("audit.jsonl");
    // A log that others could read is made private when the host opens it.
    std::fs::write(&audit, "").expect("an existing log");
    std::fs::set_permissions(&audit, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let host = fixture.host_with_audit(Some(&audit)).await;
    let mode = std::fs::metadata(&audit)
        .expect("audit")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
    let secrets = json!({
        "text": "hi",
        "access_key": "AKIAIOSFODNN7EXAMPLE",
        "privateKey": "k1",
        "pwd": "p1",
        "session_id": "s1",
        "note": "curl -H 'Authorization: Bearer abcdefghijklmnopqrst' https://bob:hunter22@x.org",
        "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJlX3NpZ25hdHVyZQ",
    });
    ok(&host.invoke(&Session::new("s"), "echo", secrets).await);
    let record = std::fs::read_to_string(&audit).expect("audit");
    for secret in [
        "AKIAIOSFODNN7EXAMPLE",
        "\"k1\"",
        "\"p1\"",
        "\"s1\"",
        "abcdefghijklmnopqrst",
        "hunter22",
        "c2lnbmF0dXJl",
    ] {
        assert!(!record.contains(secret), "{secret} in {record}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invokers_written_flat_load_like_inline_ones() {
    let fixture = Fixture::new();
    let flat = "[[invokers]]\nname = \"say\"\ntool = \"echo\"\nenabled = true\n\
        description = \"Says it back.\"\ndestructive = true\nlimits = { timeout-ms = 1500 }\n\n\
        [[invokers]]\nname = \"hidden\"\ntool = \"echo\"\nenabled = false\n";
    fixture.write("echo.toml", &ensemble("echo", "echo", flat));
    let host = fixture.host().await;
    let snapshot = host.catalog().snapshot();
    let say = snapshot.get("say").expect("say");
    assert_eq!(say.description(), "Says it back.");
    assert!(say.policy().destructive);
    assert_eq!(say.policy().limits.timeout, Duration::from_millis(1500));
    let hidden = snapshot.all_tools().find(|t| t.name() == "hidden");
    assert!(!hidden.expect("hidden is listed").enabled());
    assert_eq!(
        ok(&host.invoke(&session(), "say", json!({"text": "x"})).await),
        r#"{"text":"x"}"#
    );
}
