//! Builds every example plugin (`plugins/`) and test plugin (`tests/plugins/`) for
//! wasm32-wasip2, once, and writes a constant with the path of each component.
//!
//! The nested cargo uses its own target directory (`<target>/wasm32-plugins`, shared with
//! `scripts/serve.sh`) so it never waits on the lock of the build that runs this script.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The plugin workspaces, relative to this crate; their members are read from each one's
/// `Cargo.toml`, so a new plugin needs no line here.
const WORKSPACES: &[&str] = &["../plugins", "plugins"];

/// A workspace's members, as its `Cargo.toml` lists them.
fn members(root: &Path) -> Vec<String> {
    let manifest = root.join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest)
        .unwrap_or_else(|e| panic!("reading {}: {e}", manifest.display()));
    let table: toml::Table = text
        .parse()
        .unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
    let members = table
        .get("workspace")
        .and_then(|w| w.get("members"))
        .and_then(|m| m.as_array())
        .unwrap_or_else(|| panic!("{} lists no workspace members", manifest.display()));
    members
        .iter()
        .map(|m| {
            m.as_str()
                .unwrap_or_else(|| panic!("{}: a member is not a string", manifest.display()))
                .to_owned()
        })
        .collect()
}

fn main() {
    let manifest_dir =
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    // OUT_DIR is <target>/<profile>/build/<pkg>-<hash>/out.
    let target_dir = out_dir
        .ancestors()
        .nth(4)
        .map(|t| t.join("wasm32-plugins"))
        .unwrap_or_else(|| out_dir.join("wasm32-plugins"));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());

    println!(
        "cargo:rerun-if-changed={}",
        manifest_dir.join("../wit").display()
    );
    let mut constants = String::new();
    for workspace in WORKSPACES {
        let root = manifest_dir.join(workspace);
        let members = members(&root);
        for file in ["Cargo.toml", "Cargo.lock"] {
            println!("cargo:rerun-if-changed={}", root.join(file).display());
        }
        for member in &members {
            println!("cargo:rerun-if-changed={}", root.join(member).display());
        }
        build_workspace(&cargo, &root, &target_dir);
        for member in &members {
            let wasm = target_dir
                .join("wasm32-wasip2/release")
                .join(format!("{member}.wasm"));
            assert!(
                wasm.exists(),
                "the plugin build did not produce {}",
                wasm.display()
            );
            constants.push_str(&format!(
                "/// Path of the `{member}` component, built for wasm32-wasip2.\npub const {}: &str = {:?};\n",
                member.to_uppercase(),
                wasm.display().to_string()
            ));
        }
    }
    constants.push_str(&ui_cases(&manifest_dir.join("ui")));
    let root = manifest_dir.parent().unwrap_or(&manifest_dir).to_path_buf();
    constants.push_str(&format!(
        "/// The repository root.\npub const REPO_ROOT: &str = {:?};\n",
        root.display().to_string()
    ));
    std::fs::write(out_dir.join("plugins.rs"), constants).expect("OUT_DIR is writable");
}

/// A macro that calls `$m!(<stage>, <case>)` for every golden case (a directory of
/// `tests/ui/config`, `tests/ui/resolve` or `tests/ui/host`), so that each case is a test of its own in the one
/// test binary.
fn ui_cases(ui: &Path) -> String {
    println!("cargo:rerun-if-changed={}", ui.display());
    let mut cases: Vec<(&str, String)> = Vec::new();
    for stage in ["config", "resolve", "host"] {
        let dir = ui.join(stage);
        println!("cargo:rerun-if-changed={}", dir.display());
        for entry in std::fs::read_dir(&dir).expect("tests/ui/<stage> exists") {
            let entry = entry.expect("a tests/ui entry");
            if entry.path().is_dir() {
                cases.push((stage, entry.file_name().to_string_lossy().into_owned()));
            }
        }
    }
    cases.sort();
    let calls: String = cases
        .iter()
        .map(|(stage, case)| format!("        $m!({stage}, {case});\n"))
        .collect();
    format!(
        "/// Calls `$m!(stage, case)` for each of the {} golden cases in `tests/ui`.\n\
         #[macro_export]\nmacro_rules! for_each_ui_case {{\n    ($m:ident) => {{\n{calls}    }};\n}}\n\
         /// How many golden cases `tests/ui` holds.\npub const UI_CASES: usize = {};\n",
        cases.len(),
        cases.len()
    )
}

fn build_workspace(cargo: &str, root: &Path, target_dir: &Path) {
    let mut command = Command::new(cargo);
    command
        .args([
            "build",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--manifest-path",
        ])
        .arg(root.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(target_dir);
    // Flags meant for the host build must not leak into the wasm build.
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_TARGET",
        "CARGO_TARGET_DIR",
        "RUSTC_WORKSPACE_WRAPPER",
    ] {
        command.env_remove(var);
    }
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("could not run {cargo}: {e}"));
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let hint = if stderr.contains("wasm32-wasip2")
            && stderr.contains("target may not be installed")
        {
            "\n\nThe wasm32-wasip2 target is missing. Install it with:\n    rustup target add wasm32-wasip2\n"
        } else {
            ""
        };
        panic!(
            "building the plugins in {} failed:\n{stderr}{hint}",
            root.display()
        );
    }
}
