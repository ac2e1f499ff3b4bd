//! What compiling in the bounded worker costs, beside compiling in the host's own process:
//! wall time and peak resident memory of each, for the shipped plugins and (where
//! `scripts/test-tools.sh` installed componentize-py) a Python component.
//!
//! Both sides run as a process of their own, measured by `/usr/bin/time`: the in-process side
//! is this benchmark run again with `--in-process FILE` (an engine with the host's settings
//! and one `precompile_component`), the worker side is `toolhost compile-worker` with the
//! default bounds. Each is the best of three runs.
//!
//! Run: `cargo bench -p toolhost --bench compile`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn time(command: &mut Command, input: &Path) -> (f64, u64) {
    let output = command
        .stdin(std::fs::File::open(input).expect("the component"))
        .stdout(Stdio::null())
        .output()
        .expect("/usr/bin/time runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    let mut fields = last.split_whitespace();
    let seconds = fields
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(f64::NAN);
    let kib = fields.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    assert!(output.status.success(), "{stderr}");
    (seconds, kib)
}

fn best(mut run: impl FnMut() -> (f64, u64)) -> (f64, u64) {
    (0..3)
        .map(|_| run())
        .fold((f64::MAX, u64::MAX), |a, b| (a.0.min(b.0), a.1.min(b.1)))
}

/// A Python component built with componentize-py, if it is installed.
fn python_component(dir: &Path) -> Option<PathBuf> {
    let repo = Path::new(toolhost_testkit::REPO_ROOT);
    let componentize = repo.join("target/test-tools/venv/bin/componentize-py");
    if !componentize.is_file() {
        eprintln!("(no componentize-py: run scripts/test-tools.sh to measure a Python component)");
        return None;
    }
    std::fs::copy(repo.join("tests/plugins/python/app.py"), dir.join("app.py")).ok()?;
    let wasm = dir.join("python-shout.wasm");
    let status = Command::new(componentize)
        .current_dir(dir)
        .arg("-d")
        .arg(repo.join("wit/toolhost-plugin-0.1.0"))
        .args(["-w", "plugin", "componentize", "app", "-o"])
        .arg(&wasm)
        .stdout(Stdio::null())
        .status()
        .ok()?;
    status.success().then_some(wasm)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, _] = args.as_slice()
        && flag == "--in-process"
    {
        use std::io::Read;
        let mut wasm = Vec::new();
        std::io::stdin().read_to_end(&mut wasm).expect("stdin");
        let engine =
            wasmtime::Engine::new(&toolhost::runtime::engine_config(128, 0)).expect("engine");
        engine.precompile_component(&wasm).expect("compiles");
        return;
    }
    let temp = tempfile::tempdir().expect("temp");
    let mut components: Vec<PathBuf> = [
        toolhost_testkit::CALCULATOR,
        toolhost_testkit::TEXT,
        toolhost_testkit::JSON,
        toolhost_testkit::FILES,
        toolhost_testkit::FETCH,
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    components.extend(python_component(temp.path()));
    let me = std::env::current_exe().expect("this benchmark");
    let defaults = toolhost::runtime::CompileSettings::default();
    println!(
        "{:24} {:>8}  {:>22}  {:>22}",
        "component", "size", "in process: s, MiB", "in the worker: s, MiB"
    );
    for component in &components {
        let inside = best(|| {
            time(
                Command::new("/usr/bin/time")
                    .args(["-f", "%e %M"])
                    .arg(&me)
                    .args(["--in-process", "-"]),
                component,
            )
        });
        let worker = best(|| {
            time(
                Command::new("/usr/bin/time")
                    .args([
                        "-f",
                        "%e %M",
                        env!("CARGO_BIN_EXE_toolhost"),
                        "compile-worker",
                    ])
                    .args(["--memory-mib", &defaults.memory_mib.to_string()])
                    .args(["--cpu-seconds", &defaults.cpu_seconds.to_string()]),
                component,
            )
        });
        let size = std::fs::metadata(component).map_or(0, |m| m.len());
        println!(
            "{:24} {:>7.1}M  {:>10.2} s {:>7.0} MiB  {:>10.2} s {:>7.0} MiB",
            component.file_name().unwrap_or_default().to_string_lossy(),
            size as f64 / (1 << 20) as f64,
            inside.0,
            inside.1 as f64 / 1024.0,
            worker.0,
            worker.1 as f64 / 1024.0,
        );
    }
}
