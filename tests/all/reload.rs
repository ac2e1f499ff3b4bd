//! Hot reload with real files in a temporary directory, a real watcher, and waits on reload
//! events (never fixed sleeps): every way editors and deployments change files (in place,
//! truncated, renamed, added and deleted, a Kubernetes ConfigMap swap, a component replaced
//! where an ensemble names it, a component that arrives after its descriptor), and a component
//! compiled in the background joining without a watcher. The harness the other `reload_*`
//! tests share lives here.

use crate::support::{Fixture, ensemble, err, fail_ensemble, ok, runtime, session};
use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;
use toolhost::catalog::CatalogChange;
use toolhost::invoke::{ErrorKind, Host};
use toolhost::reload::{Reloader, WatchHandle};
use toolhost::runtime::{Runtime, RuntimeSettings};

/// A failure deadline for waits on events, not a timing assertion: on a loaded machine an
/// event may take long, but it must come.
pub(crate) const DEADLINE: Duration = Duration::from_secs(60);

pub(crate) struct Live {
    fixture: Fixture,
    pub(crate) reloader: Arc<Reloader>,
    pub(crate) host: Arc<Host>,
    changes: broadcast::Receiver<Arc<CatalogChange>>,
    _watch: WatchHandle,
}

impl Live {
    pub(crate) async fn new(fixture: Fixture) -> Self {
        Self::with_runtime(fixture, runtime()).await
    }

    pub(crate) async fn with_runtime(fixture: Fixture, runtime: Arc<Runtime>) -> Self {
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
    pub(crate) async fn change(
        &mut self,
        wanted: impl Fn(&CatalogChange) -> bool,
    ) -> Arc<CatalogChange> {
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

    pub(crate) async fn description(&self, tool: &str) -> Option<String> {
        self.host
            .catalog()
            .snapshot()
            .get(tool)
            .map(|t| t.description().to_string())
    }
}

pub(crate) fn echo_ensemble(description: &str) -> String {
    ensemble(
        "web",
        "echo",
        &format!(
            "[[invokers]]\ninvoker = {{ name = \"echo\", description = \"{description}\" }}\n"
        ),
    )
}

pub(crate) fn changed(name: &'static str) -> impl Fn(&CatalogChange) -> bool {
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
pub(crate) fn replace_by_rename(path: &Path, bytes: &[u8]) {
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
    let reloader = Reloader::builder(toolhost::resolve::Resolver::new(runtime))
        .serving()
        .start(fixture.ensembles())
        .await;
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
