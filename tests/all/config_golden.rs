//! Golden tests for bad configuration: each directory under `tests/ui/` is an ensembles
//! directory with mistakes in it, and `expected.err` holds the exact text `check` prints for
//! them. Run with `BLESS=1` to rewrite the expectations after improving a message on purpose.

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
        } else if entry.file_name() != "expected.err" {
            std::fs::copy(entry.path(), target).expect("copy");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_descriptors_give_their_exact_errors() {
    let bless = std::env::var_os("BLESS").is_some();
    let mut cases: Vec<PathBuf> = std::fs::read_dir(ui_dir())
        .expect("tests/ui exists")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_dir())
        .collect();
    cases.sort();
    assert!(
        cases.len() >= 20,
        "expected at least 20 golden cases, found {}",
        cases.len()
    );
    let mut failures = Vec::new();
    for case in &cases {
        let fixture = Fixture::new();
        let ensembles = fixture.ensembles();
        copy_dir(case, &ensembles);
        let resolved = fixture.resolve().await;
        let prefix = format!("{}/", fixture.root().display());
        let actual: String = resolved
            .diagnostics()
            .map(|d| d.to_string().replace(&prefix, "") + "\n")
            .collect();
        let expected_path = case.join("expected.err");
        if bless {
            std::fs::write(&expected_path, &actual).expect("write expected.err");
            continue;
        }
        let expected = std::fs::read_to_string(&expected_path).unwrap_or_default();
        if actual.is_empty() {
            failures.push(format!("{}: no error at all", case.display()));
        } else if actual != expected {
            failures.push(format!(
                "{}:\n--- expected\n{expected}--- actual\n{actual}",
                case.display()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} golden case(s) differ (BLESS=1 rewrites them):\n\n{}",
        failures.len(),
        failures.join("\n")
    );
}
