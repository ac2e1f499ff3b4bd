//! What a reload keeps, and what makes a new version: a broken ensemble or a name collision
//! keeps the last good version until it is fixed, `enabled` removes tools and brings them back,
//! dedup never answers from a replaced version, an unchanged component is not compiled again,
//! the status tells what was loaded when, and an invoker's gate outlives a reload while its
//! bounds stay.

use crate::reload::{Live, changed, echo_ensemble, rebuilt, replace_by_rename};
use crate::support::{Fixture, ensemble, err, fail_ensemble, ok, runtime, session};
use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use toolhost::invoke::ErrorKind;
use toolhost::reload::Reloader;
use toolhost::runtime::{Runtime, RuntimeSettings, Tiering};

/// Writes `broken`, checks that the old version keeps serving and the error is reported with
/// its file and line, then restores `good` and checks that the next reload takes it.
async fn keeps_last_good(live: &mut Live, file: &Path, broken: &str, expected_error: &str) {
    std::fs::write(file, broken).expect("write broken");
    let change = live.change(|c| !c.refused.is_empty()).await;
    let refused = &change.refused[0];
    assert!(refused.kept_previous, "{refused:?}");
    let errors = refused.errors.join("\n");
    assert!(
        errors.contains(expected_error),
        "expected {expected_error:?} in:\n{errors}"
    );
    assert!(
        !change.tools_changed(),
        "a failed reload changed the tools: {change:?}"
    );
    ok(&live
        .host
        .invoke(&session(), "echo", json!({"still": "serving"}))
        .await);
    let status = live.reloader.status();
    assert_eq!(status.refused.len(), 1);
    assert!(
        status.ensembles.iter().any(|e| e.name == "web"),
        "status lost the serving ensemble"
    );

    // A new description each time, so that the fixed version differs from the one serving.
    let fixed = format!("fixed after {expected_error}");
    std::fs::write(file, echo_ensemble(&fixed)).expect("write good");
    live.change(|c| c.refused.is_empty() && c.tools_changed())
        .await;
    assert_eq!(live.description("echo").await, Some(fixed));
    assert!(live.reloader.status().refused.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_ensemble_keeps_its_last_good_version_until_it_is_fixed() {
    let fixture = Fixture::new();
    let file = fixture.write("web.toml", &echo_ensemble("v1"));
    std::fs::write(fixture.root().join("garbage.wasm"), b"not wasm").expect("write");
    let mut live = Live::new(fixture).await;

    keeps_last_good(
        &mut live,
        &file,
        "schema-version = 1\n[ensemble\nname = \"web\"\n",
        "web.toml:2:10",
    )
    .await;
    let missing = echo_ensemble("x").replace("../echo.wasm", "../missing.wasm");
    keeps_last_good(&mut live, &file, &missing, "missing.wasm").await;
    let corrupt = echo_ensemble("x").replace("../echo.wasm", "../garbage.wasm");
    keeps_last_good(&mut live, &file, &corrupt, "is not a WebAssembly file").await;
    let pinned = echo_ensemble("x").replace(
        "[ensemble]\n",
        &format!("[ensemble]\nblake3 = \"{}\"\n", "0".repeat(64)),
    );
    keeps_last_good(&mut live, &file, &pinned, "the pin requires").await;
    let greedy = ensemble(
        "web",
        "echo",
        "[[invokers]]\ninvoker = { name = \"echo\" }\ncapabilities = { env = [\"HOME\"] }\n",
    );
    keeps_last_good(&mut live, &file, &greedy, "does not grant").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_collision_keeps_the_changed_ensembles_previous_version() {
    let fixture = Fixture::new();
    fixture.write(
        "a.toml",
        &ensemble("a", "echo", "[[invokers]]\ninvoker = { name = \"echo\" }\n"),
    );
    let b = fixture.write("b.toml", &fail_ensemble("b"));
    let mut live = Live::new(fixture).await;
    std::fs::write(
        &b,
        ensemble(
            "b",
            "testbed",
            "[[invokers]]\ninvoker = { name = \"echo\", tool = \"fail\" }\n",
        ),
    )
    .expect("write");
    let change = live.change(|c| !c.refused.is_empty()).await;
    assert!(change.refused[0].kept_previous);
    assert!(
        change.refused[0].errors[0].contains("already used by ensemble `a`"),
        "{:?}",
        change.refused
    );
    assert!(!change.tools_changed());
    ok(&live.host.invoke(&session(), "echo", json!({})).await);
    assert_eq!(
        err(&live.host.invoke(&session(), "fail", json!({})).await).kind,
        ErrorKind::ToolError
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enabled_false_removes_tools_within_one_reload_and_true_brings_them_back() {
    let fixture = Fixture::new();
    let file = fixture.write("web.toml", &echo_ensemble("v1"));
    let mut live = Live::new(fixture).await;
    std::fs::write(
        &file,
        echo_ensemble("v1").replace("[ensemble]\n", "[ensemble]\nenabled = false\n"),
    )
    .expect("write");
    let change = live.change(|c| !c.removed.is_empty()).await;
    assert_eq!(change.removed, ["echo"]);
    assert_eq!(
        err(&live.host.invoke(&session(), "echo", json!({})).await).kind,
        ErrorKind::UnknownTool
    );
    std::fs::write(&file, echo_ensemble("v1")).expect("write");
    let change = live.change(|c| !c.added.is_empty()).await;
    assert_eq!(change.added, ["echo"]);
    // An invoker's own flag works the same way.
    std::fs::write(
        &file,
        ensemble(
            "web",
            "echo",
            "[[invokers]]\ninvoker = { name = \"echo\", enabled = false }\n",
        ),
    )
    .expect("write");
    assert_eq!(
        live.change(|c| !c.removed.is_empty()).await.removed,
        ["echo"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dedup_never_answers_from_a_replaced_version() {
    let fixture = Fixture::new();
    let file = fixture.write("web.toml", &echo_ensemble("v1"));
    let mut live = Live::new(fixture).await;
    let s = session();
    assert!(
        !live
            .host
            .invoke(&s, "echo", json!({"a": 1}))
            .await
            .deduplicated
    );
    assert!(
        live.host
            .invoke(&s, "echo", json!({"a": 1}))
            .await
            .deduplicated
    );
    std::fs::write(&file, echo_ensemble("v2")).expect("write");
    live.change(changed("echo")).await;
    assert!(
        !live
            .host
            .invoke(&s, "echo", json!({"a": 1}))
            .await
            .deduplicated
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unchanged_component_is_not_recompiled() {
    let fixture = Fixture::new();
    let file = fixture.write("web.toml", &echo_ensemble("v1"));
    let wasm = fixture.root().join("echo.wasm");
    let cache = fixture.mkdir("cache");
    let runtime = Arc::new(
        Runtime::new(&RuntimeSettings {
            cache_dir: Some(cache),
            max_instances: 8,
            // Cranelift's code alone: what is measured or counted here is not the tiers.
            tiering: Tiering::Off,
            ..RuntimeSettings::default()
        })
        .expect("runtime"),
    );
    let mut live = Live::with_runtime(fixture, runtime.clone()).await;
    let compiled = runtime.compile_stats().compiled;

    std::fs::write(&file, echo_ensemble("v2")).expect("write toml");
    live.change(changed("echo")).await;
    // The same bytes written again: a reload that changes nothing.
    let same = std::fs::read(&wasm).expect("read");
    replace_by_rename(&wasm, &same);
    let change = live.change(|_| true).await;
    assert!(!change.tools_changed(), "{change:?}");
    assert_eq!(
        runtime.compile_stats().compiled,
        compiled,
        "an unchanged component was compiled again"
    );

    replace_by_rename(&wasm, &rebuilt(&wasm, "new"));
    live.change(changed("echo")).await;
    assert_eq!(runtime.compile_stats().compiled, compiled + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_lists_what_was_loaded_when_with_hashes() {
    let fixture = Fixture::new();
    let file = fixture.write("web.toml", &echo_ensemble("v1"));
    fixture.write("other.toml", &fail_ensemble("other"));
    let mut live = Live::new(fixture).await;
    let first = live.reloader.status();
    let web = first
        .ensembles
        .iter()
        .find(|e| e.name == "web")
        .expect("web")
        .clone();
    let other = first
        .ensembles
        .iter()
        .find(|e| e.name == "other")
        .expect("other")
        .clone();
    assert_eq!(web.components.len(), 1);
    assert_eq!(web.components[0].len(), 64);

    std::fs::write(&file, echo_ensemble("v2")).expect("write");
    live.change(changed("echo")).await;
    let second = live.reloader.status();
    assert_eq!(second.generation, 1);
    let web_after = second
        .ensembles
        .iter()
        .find(|e| e.name == "web")
        .expect("web");
    let other_after = second
        .ensembles
        .iter()
        .find(|e| e.name == "other")
        .expect("other");
    assert_ne!(
        web_after.tools, web.tools,
        "the changed ensemble has a new version"
    );
    assert_eq!(
        other_after.loaded_at, other.loaded_at,
        "an unchanged ensemble keeps its load time"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_keeps_an_invokers_gate_while_its_bounds_stay_and_tells_of_new_hints() {
    let fixture = Fixture::new();
    let with = |flags: &str| {
        ensemble(
            "web",
            "echo",
            &format!("[[invokers]]\ninvoker = {{ name = \"echo\"{flags} }}\n"),
        )
    };
    fixture.write("web.toml", &with(""));
    let reloader = Reloader::start(runtime(), fixture.ensembles()).await;
    let gate = |reloader: &Reloader| {
        let tool = reloader.catalog().snapshot().get("echo").cloned();
        tool.map(|t| Arc::clone(&t.policy().gate)).expect("echo")
    };
    let first = gate(&reloader);
    // Calls running on the old catalog still hold their turns in the new one.
    fixture.write("other.toml", &fail_ensemble("other"));
    reloader.reload().await;
    assert!(Arc::ptr_eq(&first, &gate(&reloader)));
    // A new hint is a new version: clients are told the tool changed.
    fixture.write("web.toml", &with(", destructive = true"));
    let change = reloader.reload().await;
    assert_eq!(change.changed, ["echo"]);
    assert!(Arc::ptr_eq(&first, &gate(&reloader)));
    // New bounds, a new gate.
    fixture.write(
        "web.toml",
        &format!("{}limits = {{ max-concurrency = 2 }}\n", with("")),
    );
    reloader.reload().await;
    let last = gate(&reloader);
    assert!(!Arc::ptr_eq(&first, &last));
    assert_eq!(last.max_running, 2);
}
