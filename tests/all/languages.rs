//! Tools in other languages, built with the toolchains the README names (installed by
//! `scripts/test-tools.sh`): Python with componentize-py and JavaScript with componentize-js,
//! each as a `toolhost:plugin` component and as a typed one (`tests/plugins/greeter`). Every
//! kind answers a good call, refuses a schema violation, returns its own error, and crashes
//! with the language's own message (the exception text) in the error.

use crate::support::{Fixture, err, ok, session};
use serde_json::json;
use std::path::Path;
use toolhost::invoke::{ErrorKind, Host};
use toolhost_testkit::languages::{javascript_components, python_components};

/// A host with one ensemble per component, every tool offered, prefixed `<ensemble>_`.
async fn host_over(components: &[(&str, &Path)]) -> (Fixture, Host) {
    let fixture = Fixture::new();
    for (name, wasm) in components {
        write_ensemble(&fixture, name, wasm);
    }
    let host = fixture.host().await;
    (fixture, host)
}

/// The ensemble `name` of the component at `wasm`, every tool offered as `<name>_<tool>`.
pub(crate) fn write_ensemble(fixture: &Fixture, name: &str, wasm: &Path) {
    fixture.write(
        &format!("{name}.toml"),
        &format!(
            "schema-version = 1\n\n[ensemble]\nname = \"{name}\"\nprefix = \"{name}\"\n\
             component = \"{}\"\n\n[defaults]\ntimeout-ms = 20000\n",
            wasm.display()
        ),
    );
}

/// The four outcomes every kind of tool is checked for.
async fn answers_refuses_fails_and_crashes(
    host: &Host,
    plugin: &str,
    typed: &str,
    exception: &str,
) {
    let s = session();
    // The toolhost:plugin world.
    let shout = format!("{plugin}_shout");
    assert_eq!(
        ok(&host.invoke(&s, &shout, json!({"text": "hi"})).await),
        "HI"
    );
    let error = err(&host.invoke(&s, &shout, json!({"text": 5})).await);
    assert_eq!(error.kind, ErrorKind::InvalidArguments);
    assert_eq!(error.violations[0].pointer, "/text");
    let error = err(&host.invoke(&s, &shout, json!({"text": ""})).await);
    assert_eq!(
        (error.kind, error.message.contains("text is empty")),
        (ErrorKind::InvalidArguments, true),
        "{}",
        error.message
    );
    let error = err(&host
        .invoke(
            &s,
            &format!("{plugin}_explode"),
            json!({"text": "the plugin blew up"}),
        )
        .await);
    assert_eq!(error.kind, ErrorKind::Crashed);
    assert!(
        error.message.contains("the plugin blew up"),
        "{}",
        error.message
    );
    // The language's own exception, without the toolchain's frames (componentize-js's
    // initializer.js, componentize-py's runtime/src/lib.rs).
    assert!(
        error
            .message
            .contains(&format!("exception: {exception}: the plugin blew up")),
        "{}",
        error.message
    );
    for internal in [
        "initializer.js",
        "mozalloc",
        "runtime/src/lib.rs",
        "panicked",
    ] {
        assert!(!error.message.contains(internal), "{}", error.message);
    }

    // A typed component: tools and schemas from the WIT.
    let greet = format!("{typed}_greet");
    let greeting = ok(&host
        .invoke(&s, &greet, json!({"name": "Ada", "times": 2}))
        .await);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&greeting).expect("JSON"),
        json!({"text": "hello Ada hello Ada", "length": 19})
    );
    let error = err(&host
        .invoke(&s, &greet, json!({"name": "Ada", "times": 300}))
        .await);
    assert_eq!(error.kind, ErrorKind::InvalidArguments);
    assert_eq!(error.violations[0].pointer, "/times");
    let error = err(&host.invoke(&s, &greet, json!({"name": ""})).await);
    assert_eq!(
        (error.kind, error.message.as_str()),
        (ErrorKind::ToolError, "the name is empty")
    );
    let error = err(&host
        .invoke(
            &s,
            &format!("{typed}_explode"),
            json!({"message": "typed blew up"}),
        )
        .await);
    assert_eq!(error.kind, ErrorKind::Crashed);
    assert!(error.message.contains("typed blew up"), "{}", error.message);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_tools_of_both_kinds_run() {
    let (plugin, typed) = python_components();
    let (_fixture, host) = host_over(&[("py", &plugin), ("pytyped", &typed)]).await;
    let snapshot = host.catalog().snapshot();
    let mut names: Vec<&str> = snapshot.all_tools().map(|t| t.name()).collect();
    names.sort();
    // componentize-py's own `exports/init` is not a tool.
    assert_eq!(
        names,
        ["py_explode", "py_shout", "pytyped_explode", "pytyped_greet"]
    );
    answers_refuses_fails_and_crashes(&host, "py", "pytyped", "ValueError").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn javascript_tools_of_both_kinds_run() {
    let (plugin, typed) = javascript_components();
    let (_fixture, host) = host_over(&[("js", &plugin), ("jstyped", &typed)]).await;
    answers_refuses_fails_and_crashes(&host, "js", "jstyped", "Error").await;
}
