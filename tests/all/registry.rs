//! Components from OCI registries against a real one (Debian's `docker-registry`, the CNCF
//! distribution registry, started on 127.0.0.1 by each test): push, pull, check, call, offline
//! after a pull, the book's commands, a moved tag as a new version, wkg both ways, and bad
//! references and settings as file:line errors. The harness `registry_trust` shares lives here;
//! a registry that misbehaves has its own tests (`registry_hostile`).

use crate::cli::{stderr, stdout};
use crate::support::{Fixture, session};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use toolhost::registry::{Fetch, Registry, RegistrySettings};

/// A `docker-registry` storing in a temporary directory of its own; stopped when dropped.
pub(crate) struct LocalRegistry {
    inner: toolhost_testkit::registry::LocalRegistry,
    pub(crate) address: String,
    _dir: tempfile::TempDir,
}

impl LocalRegistry {
    pub(crate) fn start() -> Self {
        Self::start_with_auth(None)
    }

    pub(crate) fn start_with_auth(auth: Option<(&str, &str)>) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let inner = toolhost_testkit::registry::LocalRegistry::start(dir.path(), auth);
        LocalRegistry {
            address: inner.address.clone(),
            inner,
            _dir: dir,
        }
    }

    pub(crate) fn reference(&self, repository_and_tag: &str) -> String {
        self.inner.reference(repository_and_tag)
    }
}

/// `toolhost ARGS` on the fixture, with its own cache (and so its own content store) and
/// `extra` environment.
pub(crate) fn toolhost(fixture: &Fixture, args: &[&str], extra: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
    command
        .current_dir(fixture.root())
        .env_remove("TOOLHOST_CONFIG")
        .env_remove("TOOLHOST_AUDIT")
        .env_remove("TOOLHOST_REGISTRY_USERNAME")
        .env_remove("TOOLHOST_REGISTRY_PASSWORD")
        .env("DOCKER_CONFIG", fixture.root().join("no-docker-config"))
        .env("TOOLHOST_ENSEMBLES", fixture.ensembles())
        .env("TOOLHOST_CACHE_DIR", fixture.root().join("cache"))
        .args(args)
        .stdin(Stdio::null());
    for (key, value) in extra {
        command.env(key, value);
    }
    command.output().expect("toolhost runs")
}

pub(crate) fn both(output: &Output) -> String {
    format!("{}{}", stdout(output), stderr(output))
}

/// An ensemble offering the echo tool of the component at `component`.
pub(crate) fn echo_ensemble(component: &str) -> String {
    format!(
        "schema-version = 1\n\n[ensemble]\nname = \"echo\"\ncomponent = \"{component}\"\n\n\
         [[invokers]]\ninvoker = {{ name = \"echo\" }}\n"
    )
}

/// The echo component with a custom section added: another digest, the same behaviour.
pub(crate) fn echo_variant(label: &str) -> Vec<u8> {
    let mut bytes = std::fs::read(toolhost_testkit::ECHO).expect("echo.wasm");
    let name = b"toolhost-test";
    let mut payload = vec![name.len() as u8];
    payload.extend_from_slice(name);
    payload.extend_from_slice(label.as_bytes());
    bytes.push(0);
    let mut size = payload.len();
    loop {
        let byte = (size & 0x7f) as u8;
        size >>= 7;
        if size == 0 {
            bytes.push(byte);
            break;
        }
        bytes.push(byte | 0x80);
    }
    bytes.extend_from_slice(&payload);
    bytes
}

pub(crate) fn push(
    fixture: &Fixture,
    file: &Path,
    reference: &str,
    extra: &[(&str, &str)],
) -> String {
    let output = toolhost(
        fixture,
        &["push", file.to_str().expect("utf-8 path"), reference],
        extra,
    );
    assert!(output.status.success(), "push failed: {}", both(&output));
    let text = stdout(&output);
    let pinned = text
        .split_whitespace()
        .find(|word| word.starts_with("oci://") && word.contains("@sha256:"))
        .unwrap_or_else(|| panic!("push names the pinned reference: {text}"));
    pinned.to_string()
}

#[test]
fn a_pushed_component_is_checked_pulled_called_and_served_with_the_registry_gone() {
    let registry = LocalRegistry::start();
    let fixture = Fixture::new();
    let reference = registry.reference("tools/echo:1.0");
    let pinned = push(&fixture, &fixture.root().join("echo.wasm"), &reference, &[]);
    fixture.write("echo.toml", &echo_ensemble(&reference));

    // A check fetches no component: it says what a pull would fetch, and refuses the ensemble.
    let check = toolhost(&fixture, &["check"], &[]);
    assert_eq!(check.status.code(), Some(1), "{}", both(&check));
    assert!(
        stdout(&check).contains(&format!("{reference}: would be fetched")),
        "{}",
        both(&check)
    );
    assert!(stdout(&check).contains("toolhost pull"), "{}", both(&check));

    let pull = toolhost(&fixture, &["pull"], &[]);
    assert!(pull.status.success(), "{}", both(&pull));
    assert!(
        stdout(&pull).contains(&format!("{reference}: fetched {pinned}")),
        "{}",
        both(&pull)
    );
    // The store: private, by digest.
    let blobs = fixture.root().join("cache/oci/blobs/sha256");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(fixture.root().join("cache/oci"))
            .expect("store")
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o700);
    assert!(std::fs::read_dir(&blobs).expect("blobs").count() >= 2);

    let check = toolhost(&fixture, &["check"], &[]);
    assert!(check.status.success(), "{}", both(&check));
    assert!(stdout(&check).contains(&format!("{reference}: pulled {pinned}")));
    let call = toolhost(
        &fixture,
        &["call", "echo", r#"{"text":"from a registry"}"#],
        &[],
    );
    assert!(call.status.success(), "{}", both(&call));
    assert!(stdout(&call).contains("from a registry"), "{}", both(&call));
    let list = toolhost(&fixture, &["list"], &[]);
    assert!(
        stdout(&list).contains(&format!("from {pinned}")),
        "{}",
        both(&list)
    );

    // The registry goes away: the tag keeps its last digest, with a warning, and nothing
    // is dropped.
    drop(registry);
    let check = toolhost(&fixture, &["check"], &[]);
    assert!(check.status.success(), "{}", both(&check));
    assert!(
        stdout(&check).contains("cannot reach registry") && stdout(&check).contains(&pinned),
        "{}",
        both(&check)
    );
    let call = toolhost(&fixture, &["call", "echo", r#"{"text":"offline"}"#], &[]);
    assert!(call.status.success(), "{}", both(&call));
    // A digest needs no registry at all once pulled.
    fixture.write("echo.toml", &echo_ensemble(&pinned));
    let call = toolhost(&fixture, &["call", "echo", r#"{"text":"pinned"}"#], &[]);
    assert!(call.status.success(), "{}", both(&call));
    assert!(!both(&call).contains("warning"), "{}", both(&call));

    // What no reference uses any more is pruned from the store.
    fixture.write("echo.toml", &echo_ensemble("../echo.wasm"));
    let prune = toolhost(&fixture, &["cache", "prune"], &[]);
    assert!(prune.status.success(), "{}", both(&prune));
    assert!(
        stdout(&prune).contains("pulled blob(s)"),
        "{}",
        both(&prune)
    );
    assert_eq!(std::fs::read_dir(&blobs).expect("blobs").count(), 0);
}

/// The book's registry commands (docs/registry.md), as written but for the registry's port, in
/// a fresh directory.
#[test]
fn the_books_registry_commands_work_as_written() {
    let registry = LocalRegistry::start();
    let fixture = Fixture::new();
    let page =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/registry.md"))
            .expect("docs/registry.md");
    let block = page
        .split("```sh\n")
        .nth(1)
        .and_then(|block| block.split("```").next())
        .expect("a sh block in docs/registry.md");
    assert!(block.contains("localhost:5000"), "{block}");
    let script = block.replace("localhost:5000", &registry.address);
    let binary = Path::new(env!("CARGO_BIN_EXE_toolhost"));
    let path = format!(
        "{}:{}",
        binary.parent().expect("bin dir").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let output = Command::new("sh")
        .arg("-c")
        .arg(&script)
        .current_dir(fixture.root())
        .env("PATH", path)
        .env_remove("TOOLHOST_CONFIG")
        .env_remove("TOOLHOST_AUDIT")
        .env("DOCKER_CONFIG", fixture.root().join("no-docker-config"))
        .env("TOOLHOST_ENSEMBLES", fixture.ensembles())
        .env("TOOLHOST_CACHE_DIR", fixture.root().join("cache"))
        .output()
        .expect("sh runs");
    let text = both(&output);
    assert!(output.status.success(), "{script}\n{text}");
    for expected in [
        "pushed oci://",
        "tools/calculator:1.0: would be fetched",
        "tools/calculator:1.0: fetched oci://",
        "tools/calculator:1.0: pulled oci://",
        "\"result\":42",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
}

#[test]
fn a_reference_that_is_not_one_is_a_file_line_error() {
    let fixture = Fixture::new();
    fixture.write("echo.toml", &echo_ensemble("oci://tools/echo"));
    let check = toolhost(&fixture, &["check"], &[]);
    assert_eq!(check.status.code(), Some(1));
    let text = stdout(&check);
    assert!(
        text.contains("echo.toml:5:") && text.contains("names no registry"),
        "{text}"
    );
    fixture.write("echo.toml", &echo_ensemble("oci://127.0.0.1:1/tools/echo"));
    let check = toolhost(&fixture, &["check"], &[]);
    assert!(
        stdout(&check).contains("neither a tag nor a digest"),
        "{}",
        both(&check)
    );
}

#[test]
fn bad_registry_and_trust_settings_are_file_line_errors() {
    let fixture = Fixture::new();
    fixture.write("echo.toml", &echo_ensemble("../echo.wasm"));
    std::fs::write(fixture.root().join("not-a-key.pub"), "hello").expect("file");
    for (table, expected) in [
        (
            "[trust]\nkeys = [\"missing.pub\"]",
            "cannot use the key missing.pub",
        ),
        (
            "[trust]\nkeys = [\"not-a-key.pub\"]",
            "not a public key cosign makes",
        ),
        (
            "[trust]\nrequire-signatures = true",
            "require-signatures needs the keys",
        ),
        (
            "[registry]\ninsecure = [\"http://x:5000\"]",
            "is not a registry: write it as host",
        ),
        (
            "[registry]\nmax-blob-mib = 0",
            "max-blob-mib must be from 1 to 4096; got 0",
        ),
        (
            "[registry]\nresolve-timeout-ms = 10",
            "resolve-timeout-ms must be from 100",
        ),
    ] {
        std::fs::write(
            fixture.root().join("toolhost.toml"),
            format!("schema-version = 1\n\n{table}\n"),
        )
        .expect("toolhost.toml");
        let check = toolhost(&fixture, &["check"], &[]);
        assert_eq!(check.status.code(), Some(3), "{table}: {}", both(&check));
        assert!(both(&check).contains(expected), "{table}: {}", both(&check));
        assert!(
            both(&check).contains("--> toolhost.toml:4:"),
            "{table}: {}",
            both(&check)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_tag_is_a_new_version_after_a_reload_and_dedup_does_not_answer_it() {
    let registry = LocalRegistry::start();
    let fixture = Fixture::new();
    let reference = registry.reference("tools/echo:latest");
    let v1 = fixture.root().join("v1.wasm");
    let v2 = fixture.root().join("v2.wasm");
    std::fs::write(&v1, echo_variant("one")).expect("v1");
    std::fs::write(&v2, echo_variant("two")).expect("v2");
    let first = push(&fixture, &v1, &reference, &[]);
    fixture.write("echo.toml", &echo_ensemble(&reference));

    let settings = RegistrySettings {
        store: Some(fixture.root().join("store")),
        ..RegistrySettings::default()
    };
    let resolver = toolhost::resolve::Resolver::new(crate::support::runtime())
        .with_registry(Arc::new(Registry::new(settings)), Fetch::Missing);
    let reloader = toolhost::reload::Reloader::builder(resolver)
        .start(fixture.ensembles())
        .await;
    let host = toolhost::invoke::Host::new(reloader.catalog().clone(), None);
    let s = session();
    let args = serde_json::json!({ "text": "same" });
    let before = host.invoke(&s, "echo", args.clone()).await;
    assert!(before.result.is_ok(), "{:?}", before.result);
    let version_before = reloader
        .catalog()
        .snapshot()
        .get("echo")
        .expect("echo")
        .version();
    assert!(host.invoke(&s, "echo", args.clone()).await.deduplicated);

    // Nothing moved: a reload resolves the tag to the same digest, the same version.
    reloader.reload().await;
    let same = reloader
        .catalog()
        .snapshot()
        .get("echo")
        .expect("echo")
        .version();
    assert_eq!(same, version_before);
    assert!(host.invoke(&s, "echo", args.clone()).await.deduplicated);

    let second = push(&fixture, &v2, &reference, &[]);
    assert_ne!(first, second);
    reloader.reload().await;
    let after = reloader.catalog().snapshot();
    let tool = after.get("echo").expect("echo");
    assert_ne!(
        tool.version(),
        version_before,
        "a new digest is a new version"
    );
    assert_eq!(tool.source(), second);
    let outcome = host.invoke(&s, "echo", args).await;
    assert!(outcome.result.is_ok(), "{:?}", outcome.result);
    assert!(!outcome.deduplicated, "the new version ran");
    let (_, pulled) = &reloader.resolver().pulls()[0];
    assert_eq!(pulled.as_ref().expect("pulled").resolved, second);
    // What `toolhost status` shows: the reference with the digest it resolved to.
    assert_eq!(reloader.status().ensembles[0].sources, vec![second.clone()]);

    // A reference edited to one that cannot be pulled: refused, and the last good version
    // serves on.
    fixture.write(
        "echo.toml",
        &echo_ensemble(&registry.reference("tools/echo:no-such-tag")),
    );
    reloader.reload().await;
    let status = reloader.status();
    let refused = status.refused.first().expect("refused");
    assert!(refused.kept_previous);
    assert!(
        refused.errors.iter().any(|e| e.contains("answered 404")),
        "{:?}",
        refused.errors
    );
    let still = reloader.catalog().snapshot();
    assert_eq!(still.get("echo").expect("echo").source(), second);
    let outcome = host
        .invoke(&s, "echo", serde_json::json!({ "text": "kept" }))
        .await;
    assert!(outcome.result.is_ok(), "{:?}", outcome.result);
}

/// Interop with a client toolhost did not write: the Bytecode Alliance's `wkg`
/// (`scripts/test-tools.sh` builds it into the test tools folder).
#[test]
fn a_component_pushed_by_wkg_loads_and_one_pushed_by_toolhost_pulls_with_wkg() {
    let wkg = crate::mcp_list::test_tools().join("wkg/bin/wkg");
    assert!(
        wkg.is_file(),
        "{} is missing: run ./scripts/test-tools.sh",
        wkg.display()
    );
    let registry = LocalRegistry::start();
    let fixture = Fixture::new();
    let wkg_run = |args: &[&str]| {
        let output = Command::new(&wkg)
            .args(args)
            .env("WKG_OCI_INSECURE", &registry.address)
            .env("DOCKER_CONFIG", fixture.root().join("no-docker-config"))
            .env("HOME", fixture.root())
            .current_dir(fixture.root())
            .output()
            .expect("wkg runs");
        assert!(output.status.success(), "wkg {args:?}: {}", both(&output));
        output
    };

    // wkg pushes, toolhost pulls and calls.
    let by_wkg = registry.reference("wkg/echo:1");
    let echo = fixture.root().join("echo.wasm");
    wkg_run(&[
        "oci",
        "push",
        by_wkg.trim_start_matches("oci://"),
        echo.to_str().expect("path"),
    ]);
    fixture.write("echo.toml", &echo_ensemble(&by_wkg));
    let pull = toolhost(&fixture, &["pull"], &[]);
    assert!(pull.status.success(), "{}", both(&pull));
    let call = toolhost(&fixture, &["call", "echo", r#"{"text":"via wkg"}"#], &[]);
    assert!(stdout(&call).contains("via wkg"), "{}", both(&call));

    // toolhost pushes, wkg pulls the same bytes.
    let by_toolhost = registry.reference("toolhost/calculator:1");
    push(
        &fixture,
        &fixture.root().join("calculator.wasm"),
        &by_toolhost,
        &[],
    );
    let pulled = fixture.root().join("pulled.wasm");
    wkg_run(&[
        "oci",
        "pull",
        by_toolhost.trim_start_matches("oci://"),
        "-o",
        pulled.to_str().expect("path"),
    ]);
    assert_eq!(
        std::fs::read(&pulled).expect("pulled"),
        std::fs::read(fixture.root().join("calculator.wasm")).expect("original")
    );
}
