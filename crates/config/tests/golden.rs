//! The golden cases of bad configuration that the configuration alone shows
//! (`tests/ui/config/*`), checked against the drafts with no engine, registry or server: each
//! case's `expected.err` is the exact text `toolhost check` prints, and the whole-host suite
//! (`tests/all/config_golden.rs`) expects the same text from a full resolve. One test per case,
//! listed when the test starts; `BLESS=1` is the whole suite's (it runs every case).

use libtest_mimic::{Arguments, Failed, Trial};
use std::path::{Path, PathBuf};

fn cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/ui/config")
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else if entry.file_name() != "expected.err" {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

/// Drafts the case's ensembles as the host lays them out (`<root>/ensembles`) and compares
/// every error with `expected.err`, paths shown from the root.
fn check_case(case: &Path) -> Result<(), Failed> {
    let root = tempfile::tempdir().map_err(|e| e.to_string())?;
    let ensembles = root.path().join("ensembles");
    copy_dir(case, &ensembles).map_err(|e| format!("copying the case: {e}"))?;
    let errors = toolhost_config::draft::check_dir(&ensembles, |_| Ok(()))
        .map_err(|e| format!("the case's directory cannot be read: {e}"))?;
    let prefix = format!("{}/", root.path().display());
    let actual: String = errors
        .iter()
        .map(|d| d.to_string().replace(&prefix, "") + "\n")
        .collect();
    let expected = std::fs::read_to_string(case.join("expected.err"))
        .map_err(|e| format!("no expected.err: {e}"))?;
    if actual.is_empty() {
        return Err("no error at all".into());
    }
    if actual != expected {
        return Err(format!("--- expected\n{expected}--- actual\n{actual}").into());
    }
    Ok(())
}

fn main() {
    let mut cases: Vec<PathBuf> = std::fs::read_dir(cases_dir())
        .expect("tests/ui/config exists")
        .map(|entry| entry.expect("a tests/ui/config entry").path())
        .filter(|path| path.is_dir())
        .collect();
    cases.sort();
    // Every kind of mistake the configuration alone shows has a case: fewer means some were
    // lost.
    assert!(
        cases.len() >= 30,
        "expected at least 30 cases in tests/ui/config"
    );
    let trials = cases
        .into_iter()
        .map(|case| {
            let name = case
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            Trial::test(name, move || check_case(&case))
        })
        .collect();
    libtest_mimic::run(&Arguments::from_args(), trials).exit();
}
