//! Shared fixtures: a temporary ensembles directory with the test plugins beside it, and a
//! host built over it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use toolhost::catalog::LiveCatalog;
use toolhost::invoke::{CallOutcome, Host, Session};
use toolhost::resolve::{Resolved, Resolver};
use toolhost::runtime::{Runtime, RuntimeSettings, Tiering};

/// The compiled-component cache the tests share, so each component compiles once per build.
pub fn cache_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("component-cache")
}

/// One runtime for the tests that do not measure compilation.
pub fn runtime() -> Arc<Runtime> {
    static RUNTIME: OnceLock<Arc<Runtime>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            let settings = RuntimeSettings {
                cache_dir: Some(cache_dir()),
                max_instances: 64,
                // Tests share this runtime and run side by side on a busy machine: a slow
                // describe() must not be taken for a hostile one.
                describe_timeout: std::time::Duration::from_secs(30),
                // The in-process tests run with slots keeping their pages resident between
                // calls; the `toolhost` processes the tests start keep none (the default).
                keep_resident: 16 << 20,
                // Cranelift's code alone: the shared cache then holds what every `toolhost`
                // the tests start serves at once, with no second compile of its own.
                tiering: Tiering::Off,
                ..RuntimeSettings::default()
            };
            Arc::new(Runtime::new(&settings).expect("runtime starts"))
        })
        .clone()
}

/// Compiles every test component into the shared cache once, so that a `toolhost serve` a
/// test starts finds them there and serves them at once (a component it would have to
/// compile joins its catalog only when the compile ends).
pub fn warm_cache() {
    static WARM: OnceLock<()> = OnceLock::new();
    WARM.get_or_init(|| {
        // A thread of its own: callers may already be inside a tokio runtime.
        std::thread::spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("tokio");
            rt.block_on(async {
                for path in [
                    toolhost_testkit::ECHO,
                    toolhost_testkit::TESTBED,
                    toolhost_testkit::CALCULATOR,
                    toolhost_testkit::FILES,
                    toolhost_testkit::FETCH,
                    toolhost_testkit::TYPED,
                    toolhost_testkit::TALKER,
                    toolhost_testkit::LIBRARIAN,
                ] {
                    let bytes = std::fs::read(path).expect("read a test component");
                    runtime()
                        .load(Path::new(path), bytes)
                        .await
                        .expect("a test component loads");
                }
            });
        })
        .join()
        .expect("warming the cache");
    });
}

/// A temporary directory holding `ensembles/` and the test components at its root
/// (`echo.wasm`, `testbed.wasm`, and the example plugins by name).
pub struct Fixture {
    pub dir: tempfile::TempDir,
}

impl Fixture {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir_all(dir.path().join("ensembles")).expect("ensembles dir");
        for (name, path) in [
            ("echo", toolhost_testkit::ECHO),
            ("testbed", toolhost_testkit::TESTBED),
            ("calculator", toolhost_testkit::CALCULATOR),
            ("files", toolhost_testkit::FILES),
            ("fetch", toolhost_testkit::FETCH),
            ("typed", toolhost_testkit::TYPED),
        ] {
            std::fs::copy(path, dir.path().join(format!("{name}.wasm"))).expect("copy component");
        }
        Fixture { dir }
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn ensembles(&self) -> PathBuf {
        self.dir.path().join("ensembles")
    }

    /// Writes `text` to `ensembles/<relative>` (creating directories).
    pub fn write(&self, relative: &str, text: &str) -> PathBuf {
        let path = self.ensembles().join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("create dirs");
        }
        std::fs::write(&path, text).expect("write file");
        path
    }

    /// Writes `ensembles/echo.toml`: the `echo` tool, with default settings.
    pub fn write_echo(&self) -> PathBuf {
        self.write(
            "echo.toml",
            &ensemble(
                "echo",
                "echo",
                "[[invokers]]\ninvoker = { name = \"echo\" }\n",
            ),
        )
    }

    /// Writes `ensembles/slow.toml`: the testbed's `sleep` tool (`{"ms": N}`), whose calls may
    /// take up to `timeout_ms`.
    pub fn write_slow(&self, timeout_ms: u64) -> PathBuf {
        self.write(
            "slow.toml",
            &ensemble(
                "slow",
                "testbed",
                &format!(
                    "[[invokers]]\ninvoker = {{ name = \"sleep\" }}\nlimits = {{ timeout-ms = {timeout_ms} }}\n"
                ),
            ),
        )
    }

    /// Writes `toolhost.toml` at the fixture root with one `section` (`host`, `chat`, `trust`)
    /// holding `lines`, which start on line 4; returns its path.
    pub fn write_host_file(&self, section: &str, lines: &str) -> PathBuf {
        let path = self.root().join("toolhost.toml");
        let text = format!("schema-version = 1\n\n[{section}]\n{lines}\n");
        std::fs::write(&path, text).expect("write toolhost.toml");
        path
    }

    /// Writes `ensembles/<name>.toml`: an ensemble `name` importing the MCP server `server`
    /// describes (`command = ...` with `args`, or `url = ...`, and any other key of
    /// `[ensemble.mcp]`).
    pub fn write_mcp_import(&self, name: &str, server: &str) -> PathBuf {
        self.write(
            &format!("{name}.toml"),
            &format!(
                "schema-version = 1\n\n[ensemble]\nname = \"{name}\"\n\n[ensemble.mcp]\n{server}\n"
            ),
        )
    }

    /// The records of kind `kind` (`prompt`, `resource`) in the fixture's audit log
    /// (`audit.jsonl` at its root), in order.
    pub fn audited(&self, kind: &str) -> Vec<serde_json::Value> {
        let audit = std::fs::read_to_string(self.root().join("audit.jsonl")).expect("audit");
        audit
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("a record"))
            .filter(|r| r["kind"] == kind)
            .collect()
    }

    /// Makes a directory under the fixture root and returns its path.
    pub fn mkdir(&self, relative: &str) -> PathBuf {
        let path = self.root().join(relative);
        std::fs::create_dir_all(&path).expect("mkdir");
        path
    }

    pub async fn resolve(&self) -> Resolved {
        let servers = toolhost::import::ImportedServers::default();
        Resolver::new(runtime())
            .with_importer(Arc::new(servers))
            .resolve_dir(&self.ensembles())
            .await
    }

    /// A host over the fixture's ensembles; panics if any ensemble was refused.
    pub async fn host(&self) -> Host {
        self.host_with_audit(None).await
    }

    pub async fn host_with_audit(&self, audit: Option<&Path>) -> Host {
        let resolved = self.resolve().await;
        let errors: Vec<String> = resolved.diagnostics().map(|d| d.to_string()).collect();
        assert!(
            errors.is_empty(),
            "fixture did not load:\n{}",
            errors.join("\n")
        );
        let audit = audit.map(|path| {
            toolhost::audit::AuditLog::open(path, Default::default()).expect("audit log")
        });
        Host::new(Arc::new(LiveCatalog::new(resolved.catalog)), audit)
    }
}

/// A reloader of `dir` on the shared runtime that imports `[ensemble.mcp]` servers, as
/// `serve` wires it.
pub async fn reloader_with_imports(dir: PathBuf) -> Arc<toolhost::reload::Reloader> {
    let servers = toolhost::import::ImportedServers::default();
    let resolver = Resolver::new(runtime()).with_importer(Arc::new(servers));
    toolhost::reload::Reloader::builder(resolver)
        .start(dir)
        .await
}

/// An ensemble named `name` over `component` (a file at the fixture root) with extra TOML.
pub fn ensemble(name: &str, component: &str, rest: &str) -> String {
    format!(
        "schema-version = 1\n\n[ensemble]\nname = \"{name}\"\ncomponent = \"../{component}.wasm\"\n\n{rest}\n"
    )
}

/// `[chat]` lines for the scripted model server at `base_url` (its key in `SCRIPTED_KEY`),
/// then `extra`.
pub fn scripted_chat(base_url: &str, extra: &str) -> String {
    format!(
        "model = \"scripted-model\"\nbase-url = \"{base_url}\"\napi-key-env = \"SCRIPTED_KEY\"\n{extra}"
    )
}

/// An ensemble `name` over `testbed` with one tool, `fail` (a tool error of its own).
pub fn fail_ensemble(name: &str) -> String {
    ensemble(
        name,
        "testbed",
        "[[invokers]]\ninvoker = { name = \"fail\" }\n",
    )
}

/// The successful text of a call, or a panic that shows the error.
pub fn ok(outcome: &CallOutcome) -> String {
    match &outcome.result {
        Ok(result) => result.text().into_owned(),
        Err(e) => panic!("call of {} failed: {e}", outcome.tool),
    }
}

/// The error of a call, or a panic that shows the result.
pub fn err(outcome: &CallOutcome) -> toolhost::invoke::CallError {
    match &outcome.result {
        Ok(result) => panic!("call of {} succeeded with {}", outcome.tool, result.text()),
        Err(e) => e.clone(),
    }
}

/// A session for one test.
pub fn session() -> Session {
    Session::new("test")
}

/// The peak resident memory of process `pid` so far, in KiB.
pub fn peak_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Copies `from` into `to`, directories and all.
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("entry");
        if entry.path().is_dir() {
            copy_tree(&entry.path(), &to.join(entry.file_name()));
        } else {
            std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copy");
        }
    }
}

/// The repository's shipped ensembles (`root/ensembles`), the files plugin's sample data and
/// the built plugins (`root/plugins/dist`), where the ensembles' relative paths find them.
pub fn copy_shipped(root: &Path) {
    let repo = Path::new(toolhost_testkit::REPO_ROOT);
    copy_tree(&repo.join("ensembles"), &root.join("ensembles"));
    copy_tree(
        &repo.join("plugins/files/sample-data"),
        &root.join("plugins/files/sample-data"),
    );
    let dist = root.join("plugins/dist");
    std::fs::create_dir_all(&dist).expect("dist");
    for (name, path) in [
        ("calculator", toolhost_testkit::CALCULATOR),
        ("text", toolhost_testkit::TEXT),
        ("json", toolhost_testkit::JSON),
        ("files", toolhost_testkit::FILES),
        ("fetch", toolhost_testkit::FETCH),
    ] {
        std::fs::copy(path, dist.join(format!("{name}.wasm"))).expect("copy plugin");
    }
}

/// The JSON-RPC answer in an MCP response body over HTTP: the first message with a
/// `result` or an `error` in its event stream, or the body itself when it is JSON (a server
/// may answer either way).
pub fn answer_of(body: &str) -> Option<serde_json::Value> {
    (body.lines())
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str::<serde_json::Value>(data.trim()).ok())
        .find(|m| m.get("result").is_some() || m.get("error").is_some())
        .or_else(|| serde_json::from_str(body).ok())
}
