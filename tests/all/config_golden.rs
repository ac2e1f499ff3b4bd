//! Golden tests for bad configuration: each directory under `tests/ui/config/` and
//! `tests/ui/resolve/` is an ensembles directory with mistakes in it, and `expected.err` holds
//! the exact text `check` prints for them (components are written as `.wat` text, assembled
//! into `.wasm` when the case is copied). Each case is a test of its own (the testkit's build
//! script lists them), so one failing case does not hide another. Run with `BLESS=1` to
//! rewrite the expectations after improving a message on purpose.
//!
//! Here every case goes through the whole resolve. The cases of `config/` are the mistakes
//! the configuration alone shows; `toolhost-config`'s own golden test (crates/config/tests)
//! checks them against its drafts alone, with no engine built, and expects the same text.
//! The cases of `host/` are a `toolhost.toml` each, and `expected.err` what `toolhost check`
//! says of it on stderr (the host file is read by the CLI, before any ensemble).

use crate::support::Fixture;
use std::path::{Path, PathBuf};

fn ui_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/ui")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read ui case") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else if entry.path().extension().is_some_and(|e| e == "wat") {
            // Components are written as text in the cases and assembled here.
            let wasm = wat::parse_file(entry.path()).expect("a case's .wat assembles");
            std::fs::write(target.with_extension("wasm"), wasm).expect("write");
        } else if entry.file_name() != "expected.err" {
            std::fs::copy(entry.path(), target).expect("copy");
        }
    }
}

/// Resolves the case's ensembles and compares every diagnostic with `expected.err`.
async fn check_case(stage: &str, name: &str) {
    let case = ui_dir().join(stage).join(name);
    let fixture = Fixture::new();
    let ensembles = fixture.ensembles();
    copy_dir(&case, &ensembles);
    let resolved = fixture.resolve().await;
    let prefix = format!("{}/", fixture.root().display());
    let actual: String = resolved
        .diagnostics()
        .map(|d| d.to_string().replace(&prefix, "") + "\n")
        .collect();
    let expected_path = case.join("expected.err");
    if std::env::var_os("BLESS").is_some() {
        std::fs::write(&expected_path, &actual).expect("write expected.err");
        return;
    }
    let expected = std::fs::read_to_string(&expected_path).unwrap_or_default();
    assert!(!actual.is_empty(), "{name}: no error at all");
    assert!(
        actual == expected,
        "{name} differs (BLESS=1 rewrites it):\n--- expected\n{expected}--- actual\n{actual}"
    );
}

/// Runs `toolhost check` with the case's `toolhost.toml` and compares what it says with
/// `expected.err`.
fn check_host_case(name: &str) {
    let case = ui_dir().join("host").join(name);
    let fixture = Fixture::new();
    copy_dir(&case, fixture.root());
    let output = crate::cli::toolhost_with_stdin(&fixture, &["check"], None);
    assert_eq!(
        output.status.code(),
        Some(3),
        "{name}: a bad host file stops the host"
    );
    let prefix = format!("{}/", fixture.root().display());
    let actual = String::from_utf8_lossy(&output.stderr).replace(&prefix, "");
    let expected_path = case.join("expected.err");
    if std::env::var_os("BLESS").is_some() {
        std::fs::write(&expected_path, &actual).expect("write expected.err");
        return;
    }
    let expected = std::fs::read_to_string(&expected_path).unwrap_or_default();
    assert!(
        actual == expected,
        "{name} differs (BLESS=1 rewrites it):\n--- expected\n{expected}--- actual\n{actual}"
    );
}

macro_rules! golden_case {
    (host, $case:ident) => {
        #[test]
        fn $case() {
            check_host_case(stringify!($case));
        }
    };
    ($stage:ident, $case:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $case() {
            check_case(stringify!($stage), stringify!($case)).await;
        }
    };
}

toolhost_testkit::for_each_ui_case!(golden_case);

// Every kind of mistake has a golden case: fewer than 20 means cases were lost.
const _: () = assert!(
    toolhost_testkit::UI_CASES >= 20,
    "expected at least 20 golden cases in tests/ui"
);
