//! Hot reload with real files in a temporary directory, a real watcher, and waits on reload
//! events (never fixed sleeps): every way editors and deployments change files, failures that
//! keep the last good version, and calls that go on while the catalog is swapped.

use crate::support::{Fixture, ensemble, err, fail_ensemble, ok, runtime, session};
use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::broadcast;
use toolhost::catalog::CatalogChange;
use toolhost::invoke::{ErrorKind, Host};
use toolhost::reload::{Reloader, WatchHandle};
use toolhost::runtime::{Runtime, RuntimeSettings};

/// A failure deadline for waits on events, not a timing assertion: on a loaded machine an
/// event may take long, but it must come.
const DEADLINE: Duration = Duration::from_secs(60);

struct Live {
    fixture: Fixture,
    reloader: Arc<Reloader>,
    host: Arc<Host>,
    changes: broadcast::Receiver<Arc<CatalogChange>>,
    _watch: WatchHandle,
}

impl Live {
    async fn new(fixture: Fixture) -> Self {
        Self::with_runtime(fixture, runtime()).await
    }

    async fn with_runtime(fixture: Fixture, runtime: Arc<Runtime>) -> Self {
        let reloader = Reloader::start(runtime.clone(), fixture.ensembles()).await;
        let status = reloader.status();
        assert!(
            status.refused.is_empty(),
            "the fixture does not load: {:?}",
            status.refused
        );
        let changes = reloader.subscribe();
        let watch = reloader.watch(Duration::from_millis(50)).expect("watch");
        let host = Arc::new(Host::new(reloader.catalog().clone(), None));
        Live {
            fixture,
            reloader,
            host,
            changes,
            _watch: watch,
        }
    }

    /// Waits for the next change that satisfies `wanted`.
    async fn change(&mut self, wanted: impl Fn(&CatalogChange) -> bool) -> Arc<CatalogChange> {
        let wait = async {
            loop {
                match self.changes.recv().await {
                    Ok(change) if wanted(&change) => return change,
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => panic!("the reloader went away"),
                }
            }
        };
        tokio::time::timeout(DEADLINE, wait)
            .await
            .expect("no reload event came")
    }

    async fn description(&self, tool: &str) -> Option<String> {
        self.host
            .catalog()
            .snapshot()
            .get(tool)
            .map(|t| t.description.to_string())
    }
}

fn echo_ensemble(description: &str) -> String {
    ensemble(
        "web",
        "echo",
        &format!(
            "[[invokers]]\ninvoker = {{ name = \"echo\", description = \"{description}\" }}\n"
        ),
    )
}

fn changed(name: &'static str) -> impl Fn(&CatalogChange) -> bool {
    move |c| c.changed.iter().any(|n| n == name)
}

/// The same component with a custom section appended: another blake3, the same tools.
pub(crate) fn rebuilt(wasm: &Path, stamp: &str) -> Vec<u8> {
    let mut bytes = std::fs::read(wasm).expect("read component");
    let name = b"toolhost-test";
    let payload = stamp.as_bytes();
    let size = 1 + name.len() + payload.len();
    assert!(size < 128, "keep the section size a one-byte LEB");
    bytes.extend_from_slice(&[0, size as u8, name.len() as u8]);
    bytes.extend_from_slice(name);
    bytes.extend_from_slice(payload);
    bytes
}

/// Writes `bytes` to a temporary name beside `path`, then renames it over `path`.
fn replace_by_rename(path: &Path, bytes: &[u8]) {
    let temp = path.with_file_name(format!(
        ".{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("x")
    ));
    std::fs::write(&temp, bytes).expect("write temp");
    std::fs::rename(&temp, path).expect("rename over");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edits_in_place_truncations_and_renames_are_all_picked_up() {
    let fixture = Fixture::new();
    let file = fixture.write("web.toml", &echo_ensemble("v1"));
    let mut live = Live::new(fixture).await;

    std::fs::write(&file, echo_ensemble("v2")).expect("write in place");
    live.change(changed("echo")).await;
    assert_eq!(live.description("echo").await.as_deref(), Some("v2"));

    let handle = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&file)
        .expect("open");
    handle.set_len(0).expect("truncate");
    std::io::Write::write_all(&mut &handle, echo_ensemble("v3").as_bytes()).expect("write");
    drop(handle);
    live.change(changed("echo")).await;
    assert_eq!(live.description("echo").await.as_deref(), Some("v3"));

    replace_by_rename(&file, echo_ensemble("v4").as_bytes());
    live.change(changed("echo")).await;
    assert_eq!(live.description("echo").await.as_deref(), Some("v4"));
    ok(&live.host.invoke(&session(), "echo", json!({})).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_deleted_and_recreated_ensemble_files_add_and_remove_tools() {
    let fixture = Fixture::new();
    fixture.write("web.toml", &echo_ensemble("web"));
    let mut live = Live::new(fixture).await;

    let other = live.fixture.write("other.toml", &fail_ensemble("other"));
    let change = live.change(|c| !c.added.is_empty()).await;
    assert_eq!(change.added, ["fail"]);
    assert_eq!(
        err(&live.host.invoke(&session(), "fail", json!({})).await).kind,
        ErrorKind::ToolError
    );

    std::fs::remove_file(&other).expect("delete");
    let change = live.change(|c| !c.removed.is_empty()).await;
    assert_eq!(change.removed, ["fail"]);
    assert_eq!(
        err(&live.host.invoke(&session(), "fail", json!({})).await).kind,
        ErrorKind::UnknownTool
    );

    live.fixture.write("other.toml", &fail_ensemble("other"));
    let change = live.change(|c| !c.added.is_empty()).await;
    assert_eq!(change.added, ["fail"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubernetes_configmap_update_is_picked_up() {
    // A ConfigMap volume: files are symlinks to ..data/<file>, ..data is a symlink to a
    // timestamped directory, and an update swaps ..data atomically by rename.
    let fixture = Fixture::new();
    let dir = fixture.ensembles();
    std::fs::create_dir_all(dir.join("..2026_11_21_01")).expect("mkdir");
    std::fs::write(dir.join("..2026_11_21_01/web.toml"), echo_ensemble("first")).expect("write");
    std::os::unix::fs::symlink("..2026_11_21_01", dir.join("..data")).expect("symlink");
    std::os::unix::fs::symlink("..data/web.toml", dir.join("web.toml")).expect("symlink");
    let mut live = Live::new(fixture).await;
    assert_eq!(live.description("echo").await.as_deref(), Some("first"));

    std::fs::create_dir_all(dir.join("..2026_11_21_02")).expect("mkdir");
    std::fs::write(
        dir.join("..2026_11_21_02/web.toml"),
        echo_ensemble("second"),
    )
    .expect("write");
    std::os::unix::fs::symlink("..2026_11_21_02", dir.join("..data_tmp")).expect("symlink");
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).expect("swap ..data");
    std::fs::remove_dir_all(dir.join("..2026_11_21_01")).expect("remove old");
    live.change(changed("echo")).await;
    assert_eq!(live.description("echo").await.as_deref(), Some("second"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_replaced_while_it_is_called_finishes_the_call_on_the_old_version() {
    let fixture = Fixture::new();
    fixture.write(
        "t.toml",
        &ensemble(
            "t",
            "testbed",
            "[defaults]\ntimeout-ms = 30000\n\n[[invokers]]\ninvoker = { name = \"sleep\" }\n",
        ),
    );
    let wasm = fixture.root().join("testbed.wasm");
    let mut live = Live::new(fixture).await;
    let before = component_of(&live, "sleep");

    let call = {
        let host = live.host.clone();
        tokio::spawn(async move { host.invoke(&session(), "sleep", json!({"ms": 1500})).await })
    };
    // The component outside the ensembles directory is replaced by rename, as deploys do.
    replace_by_rename(&wasm, &rebuilt(&wasm, "v2"));
    let change = live.change(changed("sleep")).await;
    assert!(change.refused.is_empty());
    assert_eq!(ok(&call.await.expect("task")), r#"{"slept_ms":1500}"#);
    let after = component_of(&live, "sleep");
    assert_ne!(before, after);
    ok(&live
        .host
        .invoke(&session(), "sleep", json!({"ms": 1}))
        .await);
}

/// The component hash `tool` runs on now.
fn component_of(live: &Live, tool: &str) -> toolhost::contract::SourceHash {
    live.host
        .catalog()
        .snapshot()
        .get(tool)
        .map(|t| t.source_hash())
        .expect("tool")
}

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
async fn a_hundred_reloads_under_load_drop_no_call() {
    let fixture = Fixture::new();
    let file = fixture.write(
        "web.toml",
        &ensemble(
            "web",
            "echo",
            "[defaults]\ndedup = \"off\"\n\n[[invokers]]\ninvoker = { name = \"echo\" }\n",
        ),
    );
    let reloader = Reloader::start(runtime(), fixture.ensembles()).await;
    let host = Arc::new(Host::new(reloader.catalog().clone(), None));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (calls, failures) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let workers: Vec<_> = (0..4)
        .map(|worker| {
            let (host, stop, calls, failures) =
                (host.clone(), stop.clone(), calls.clone(), failures.clone());
            tokio::spawn(async move {
                let s = session();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let outcome = host
                        .invoke(&s, "echo", json!({"worker": worker, "n": n}))
                        .await;
                    calls.fetch_add(1, Ordering::Relaxed);
                    if outcome.result.is_err() {
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for i in 0..100 {
        let description = format!("version {i}");
        let text = ensemble(
            "web",
            "echo",
            &format!(
                "[defaults]\ndedup = \"off\"\n\n[[invokers]]\ninvoker = {{ name = \"echo\", description = \"{description}\" }}\n"
            ),
        );
        std::fs::write(&file, text).expect("write");
        let change = reloader.reload().await;
        assert_eq!(change.changed, ["echo"], "reload {i}");
    }
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.await.expect("worker");
    }
    assert!(calls.load(Ordering::Relaxed) > 0);
    assert_eq!(
        failures.load(Ordering::Relaxed),
        0,
        "calls failed during reloads"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_is_watched_where_this_ensemble_names_it_even_when_shared() {
    // Another ensemble elsewhere loaded the same bytes first and is still alive: the runtime
    // shares the compiled component, but the watcher must follow this ensemble's file.
    let other = Fixture::new();
    other.write("t.toml", &fail_ensemble("t"));
    let other_host = other.host().await;
    let fixture = Fixture::new();
    fixture.write("t.toml", &fail_ensemble("t"));
    let wasm = fixture.root().join("testbed.wasm");
    let mut live = Live::new(fixture).await;
    replace_by_rename(&wasm, &rebuilt(&wasm, "mine"));
    live.change(changed("fail")).await;
    drop(other_host);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ensemble_refused_for_a_missing_component_loads_when_the_file_arrives() {
    let fixture = Fixture::new();
    fixture.write("web.toml", &echo_ensemble("v1"));
    // A directory no loaded tool uses: only the refused ensemble names it.
    let dist = fixture.mkdir("dist");
    let mut live = Live::new(fixture).await;
    live.fixture.write(
        "late.toml",
        &ensemble(
            "late",
            "dist/late",
            "[[invokers]]\ninvoker = { name = \"late_echo\", tool = \"echo\" }\n",
        ),
    );
    let refused = live.change(|c| !c.refused.is_empty()).await;
    assert!(
        refused.refused[0].errors.join("\n").contains("late.wasm"),
        "{:?}",
        refused.refused
    );
    // The deploy copies the component after the descriptor.
    std::fs::copy(toolhost_testkit::ECHO, dist.join("late.wasm")).expect("copy");
    live.change(|c| c.added.iter().any(|n| n == "late_echo"))
        .await;
    let text = ok(&live
        .host
        .invoke(&session(), "late_echo", json!({"text": "here"}))
        .await);
    assert_eq!(text, r#"{"text":"here"}"#);

    // The directory itself does not exist yet: a build that makes it, component inside,
    // is seen too.
    live.fixture.write(
        "later.toml",
        &ensemble(
            "later",
            "pkg/later",
            "[[invokers]]\ninvoker = { name = \"later_echo\", tool = \"echo\" }\n",
        ),
    );
    live.change(|c| c.refused.iter().any(|r| r.file.ends_with("later.toml")))
        .await;
    let build = live.fixture.mkdir("pkg.build");
    std::fs::copy(toolhost_testkit::ECHO, build.join("later.wasm")).expect("copy");
    std::fs::rename(&build, live.fixture.root().join("pkg")).expect("rename");
    live.change(|c| c.added.iter().any(|n| n == "later_echo"))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_watching_a_component_compiled_in_the_background_still_joins() {
    let fixture = Fixture::new();
    fixture.write_echo();
    // No cache: echo must be compiled, so serving starts without it.
    let runtime = Arc::new(
        Runtime::new(&RuntimeSettings {
            cache_dir: None,
            describe_timeout: Duration::from_secs(30),
            ..RuntimeSettings::default()
        })
        .expect("runtime"),
    );
    let reloader = Reloader::start_serving(runtime, fixture.ensembles()).await;
    assert!(reloader.catalog().snapshot().get("echo").is_none());
    let mut changes = reloader.subscribe();
    // The compile may well be over by now: what it said before anyone followed is kept.
    let _follow = reloader.follow_compiles();
    let joined = async {
        while reloader.catalog().snapshot().get("echo").is_none() {
            let _ = changes.recv().await;
        }
    };
    tokio::time::timeout(DEADLINE, joined)
        .await
        .expect("echo joins the catalog once compiled");
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
        tool.map(|t| Arc::clone(&t.gate)).expect("echo")
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_component_loads_while_calls_fill_the_instance_pool() {
    let fixture = Fixture::new();
    let data = fixture.mkdir("data");
    fixture.write("web.toml", &echo_ensemble("v1"));
    fixture.write(
        "wait.toml",
        &ensemble(
            "wait",
            "testbed",
            "[grants]\nfiles = [{ host = \"../data\", guest = \"/data\", access = \"read\" }]\n\n\
             [defaults]\ntimeout-ms = 60000\ndedup = \"off\"\n\n[[invokers]]\ninvoker = { name = \"wait_for\" }\n\
             capabilities = { files = [{ guest = \"/data\", access = \"read\" }] }\n",
        ),
    );
    let wasm = fixture.root().join("echo.wasm");
    let runtime = Arc::new(
        Runtime::new(&RuntimeSettings {
            cache_dir: Some(crate::support::cache_dir()),
            max_instances: 2,
            ..RuntimeSettings::default()
        })
        .expect("runtime"),
    );
    // No watcher: this test reloads by itself, once.
    let reloader = Reloader::start(runtime.clone(), fixture.ensembles()).await;
    let host = Arc::new(Host::new(reloader.catalog().clone(), None));
    let echo_hash = || {
        host.catalog()
            .snapshot()
            .get("echo")
            .map(|t| t.source_hash())
            .expect("echo")
    };
    let before = echo_hash();

    // Two calls hold both instances until the flag file appears.
    let calls: Vec<_> = (0..2)
        .map(|_| {
            let host = host.clone();
            tokio::spawn(async move {
                host.invoke(
                    &session(),
                    "wait_for",
                    json!({"path": "/data/flag", "ms": 60000}),
                )
                .await
            })
        })
        .collect();
    wait_until(|| runtime.pool().in_use == 2).await;

    // The reload's describe() of the changed component waits for a slot instead of failing.
    replace_by_rename(&wasm, &rebuilt(&wasm, "while-full"));
    let reload = {
        let reloader = reloader.clone();
        tokio::spawn(async move { reloader.reload().await })
    };
    wait_until(|| runtime.pool().waiting >= 1).await;
    assert!(!reload.is_finished(), "the reload did not wait for a slot");
    std::fs::write(data.join("flag"), "go").expect("write the flag");
    for call in calls {
        assert_eq!(ok(&call.await.expect("call task")), "go");
    }
    let change = reload.await.expect("reload task");
    assert!(change.refused.is_empty(), "{:?}", change.refused);
    assert!(change.changed.contains(&"echo".to_string()), "{change:?}");
    assert_ne!(echo_hash(), before);
    ok(&host
        .invoke(&session(), "echo", json!({"text": "after"}))
        .await);
    drop(fixture);
}

/// Polls `condition` until it holds (a failure deadline, not a timing assertion).
async fn wait_until(condition: impl Fn() -> bool) {
    let wait = async {
        while !condition() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(DEADLINE, wait)
        .await
        .expect("the condition never held");
}
