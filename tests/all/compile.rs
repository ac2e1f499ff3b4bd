//! Compiling untrusted components: in the bounded worker process, with cheap checks first, an
//! authenticated cache, and failures remembered until the bytes change.

use crate::hostile::{huge_function, many_functions, register_hog};
use crate::support::{Fixture, ensemble};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use toolhost::runtime::{CompileSettings, LoadError, Runtime, RuntimeSettings, Tiering};

/// A runtime that compiles in the `toolhost` binary's worker, with these bounds and a cache:
/// Cranelift alone, as without tiers (`tiers.rs` has the bounds of both).
fn worker_runtime(cache: &Path, adjust: impl FnOnce(&mut CompileSettings)) -> Arc<Runtime> {
    worker_runtime_tiered(cache, Tiering::Off, adjust)
}

/// [`worker_runtime`] compiling as `tiering` says.
pub(crate) fn worker_runtime_tiered(
    cache: &Path,
    tiering: Tiering,
    adjust: impl FnOnce(&mut CompileSettings),
) -> Arc<Runtime> {
    let mut compile = CompileSettings {
        worker: Some(env!("CARGO_BIN_EXE_toolhost").into()),
        ..CompileSettings::default()
    };
    adjust(&mut compile);
    Arc::new(
        Runtime::new(&RuntimeSettings {
            cache_dir: Some(cache.to_path_buf()),
            max_instances: 8,
            compile,
            describe_timeout: Duration::from_secs(30),
            keep_resident: 0,
            prepared: Default::default(),
            share: Default::default(),
            tiering,
        })
        .expect("runtime"),
    )
}

pub(crate) fn refusal(result: Result<impl std::fmt::Debug, LoadError>) -> String {
    match result {
        Err(error @ LoadError::Refused { .. }) => error.to_string(),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_compiled_in_the_worker_runs_and_is_cached() {
    let temp = tempfile::tempdir().expect("temp");
    let runtime = worker_runtime(&temp.path().join("cache"), |_| {});
    let echo = std::fs::read(toolhost_testkit::ECHO).expect("echo");
    let loaded = runtime
        .load(Path::new(toolhost_testkit::ECHO), echo.clone())
        .await
        .expect("echo compiles in the worker");
    assert_eq!(loaded.tools[0].name, "echo");
    assert_eq!(runtime.compile_stats().compiled, 1);
    drop(loaded);

    // A second host on the same cache takes the worker's artifact from the cache.
    let again = worker_runtime(&temp.path().join("cache"), |_| {});
    again
        .load(Path::new(toolhost_testkit::ECHO), echo)
        .await
        .expect("from the cache");
    assert_eq!(
        (
            again.compile_stats().compiled,
            again.compile_stats().cache_hits
        ),
        (0, 1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compile_that_needs_more_memory_than_its_bound_is_refused_and_not_tried_again() {
    let temp = tempfile::tempdir().expect("temp");
    let runtime = worker_runtime(&temp.path().join("cache"), |c| c.memory_mib = 128);
    // Twice the bound in memory actually used, not only address space reserved (which
    // differs from machine to machine).
    let hog = many_functions(40_000);
    let path = Path::new("hog.wasm");
    let message = refusal(runtime.load(path, hog.clone()).await);
    assert!(
        message.contains("compiling needed more than 128 MiB (compile-memory-mib)"),
        "{message}"
    );
    // The same bytes are refused at once, without a second compile, and the refusal names
    // the file they were loaded from this time.
    let compiled = runtime.compile_stats().compiled;
    assert_eq!(refusal(runtime.load(path, hog.clone()).await), message);
    let elsewhere = refusal(runtime.load(Path::new("copy/of/hog.wasm"), hog).await);
    assert_eq!(elsewhere, message.replace("hog.wasm", "copy/of/hog.wasm"));
    assert_eq!(
        runtime.compile_stats().compiled,
        compiled,
        "it was compiled again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_running_out_anywhere_in_the_worker_names_the_memory_bound() {
    // Tighter bounds run out elsewhere: reading the component, starting the compiler's
    // threads (a panic), or an allocation (an abort). Each is the memory bound.
    let hog = many_functions(40_000);
    for mib in [16, 48, 64, 80] {
        let temp = tempfile::tempdir().expect("temp");
        let runtime = worker_runtime(&temp.path().join("cache"), |c| c.memory_mib = mib);
        let message = refusal(runtime.load(Path::new("hog.wasm"), hog.clone()).await);
        assert!(
            message.contains(&format!(
                "compiling needed more than {mib} MiB (compile-memory-mib)"
            )),
            "{mib} MiB: {message}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_cannot_start_is_not_held_against_the_component() {
    let temp = tempfile::tempdir().expect("temp");
    let runtime = worker_runtime(&temp.path().join("cache"), |c| {
        c.worker = Some(temp.path().join("no-such-program"));
    });
    let echo = std::fs::read(toolhost_testkit::ECHO).expect("echo");
    for _ in 0..2 {
        match runtime.load(Path::new("echo.wasm"), echo.clone()).await {
            Err(error @ LoadError::Unavailable { .. }) => {
                assert!(error.to_string().contains("no-such-program"), "{error}")
            }
            other => panic!("expected the worker to be unavailable, got {other:?}"),
        }
    }
    // The second load was answered from memory (a reload it starts must not start it again
    // at once); it is tried again later (`runtime::load::tests`), unlike a failure of the
    // component's own.
    assert_eq!(runtime.compile_stats().failed, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_writes_more_code_than_the_host_reads_is_cut_off_at_once() {
    use std::os::unix::fs::PermissionsExt;
    let temp = tempfile::tempdir().expect("temp");
    // A stand-in worker that answers any component with 300 MB of "code".
    let program = temp.path().join("chatty-worker");
    std::fs::write(
        &program,
        "#!/bin/sh\n/bin/cat > /dev/null\nexec /usr/bin/head -c 300000000 /dev/zero\n",
    )
    .expect("write");
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let runtime = worker_runtime(&temp.path().join("cache"), |c| {
        c.worker = Some(program.clone());
        c.memory_mib = 64;
        // Far longer than the test may take: the host must stop reading at the limit, not
        // at the deadline.
        c.timeout = Duration::from_secs(600);
    });
    let echo = std::fs::read(toolhost_testkit::ECHO).expect("echo");
    let message = refusal(runtime.load(Path::new("echo.wasm"), echo).await);
    assert!(
        message.contains(
            "its compiled code is larger than 64 MiB, the compile worker's whole address space"
        ),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_loading_in_the_background_is_not_started_twice() {
    let temp = tempfile::tempdir().expect("temp");
    let runtime = worker_runtime(&temp.path().join("cache"), |c| {
        c.timeout = Duration::from_secs(1)
    });
    let mut finished = runtime.loads_finished();
    let hog = register_hog(12_000, 12_000);
    // Reloads while it compiles ask for it again and again.
    for _ in 0..5 {
        runtime.load_in_background(
            Path::new("hog.wasm"),
            toolhost::contract::SourceHash::of(&hog),
            Arc::from(hog.clone()),
        );
    }
    tokio::time::timeout(Duration::from_secs(60), finished.recv())
        .await
        .expect("the load ends")
        .expect("a hash");
    // A second task would have waited for the first and ended right after it.
    let again = tokio::time::timeout(Duration::from_millis(500), finished.recv()).await;
    assert!(
        again.is_err(),
        "the same load ran more than once: {again:?}"
    );
    assert_eq!(runtime.compile_stats().failed, 1);
}

/// The refusal of a register hog that takes far more than a second to compile, under
/// settings that allow one second of something.
async fn slow_compile_refusal(bound: impl FnOnce(&mut CompileSettings)) -> String {
    let temp = tempfile::tempdir().expect("temp");
    let runtime = worker_runtime(&temp.path().join("cache"), bound);
    refusal(
        runtime
            .load(Path::new("hog.wasm"), register_hog(12_000, 12_000))
            .await,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compile_past_its_cpu_time_is_refused_naming_the_bound() {
    let message = slow_compile_refusal(|c| c.cpu_seconds = 1).await;
    assert!(
        message.contains("compiling took more than 1 s of CPU (compile-cpu-seconds)"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compile_past_its_deadline_is_refused_naming_the_bound() {
    let message = slow_compile_refusal(|c| c.timeout = Duration::from_secs(1)).await;
    assert!(
        message.contains("compiling took longer than 1 s (compile-timeout-s)"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_is_plainly_too_large_is_refused_before_compiling() {
    let temp = tempfile::tempdir().expect("temp");
    let runtime = worker_runtime(&temp.path().join("cache"), |c| {
        c.max_component_bytes = 1 << 20;
    });
    let big = huge_function(5 << 20);
    let message = refusal(runtime.load(Path::new("big.wasm"), big).await);
    assert!(
        message.contains("MiB a component may be (max-component-mib)"),
        "{message}"
    );

    let runtime = worker_runtime(&temp.path().join("cache2"), |_| {});
    let message = refusal(
        runtime
            .load(Path::new("body.wasm"), huge_function(5 << 20))
            .await,
    );
    assert!(message.contains("a function body is"), "{message}");
    let stats = runtime.compile_stats();
    assert_eq!(
        (stats.compiled, stats.failed),
        (0, 0),
        "nothing was compiled"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_components_artifact_copied_over_a_cache_entry_is_never_run() {
    let fixture = Fixture::new();
    // The ensemble pins echo's bytes: the pin checks the .wasm; the cache must not be
    // trusted by name either.
    let pin = blake3::hash(&std::fs::read(toolhost_testkit::ECHO).expect("echo")).to_string();
    fixture.write(
        "echo.toml",
        &format!(
            "schema-version = 1\n\n[ensemble]\nname = \"echo\"\ncomponent = \"../echo.wasm\"\n\
             blake3 = \"{pin}\"\n\n[[invokers]]\ninvoker = {{ name = \"echo\" }}\n"
        ),
    );
    fixture.write(
        "testbed.toml",
        &ensemble(
            "testbed",
            "testbed",
            "[[invokers]]\ninvoker = { name = \"fail\" }\n",
        ),
    );
    let cache = fixture.mkdir("cache");
    let first = worker_runtime(&cache, |_| {});
    let resolved = toolhost::resolve::Resolver::new(first.clone())
        .resolve_dir(&fixture.ensembles())
        .await;
    assert!(resolved.refused.is_empty(), "{:?}", resolved.refused);
    drop(resolved);

    // Put testbed's (authentic) entry where echo's is.
    let entries: Vec<_> = std::fs::read_dir(&cache)
        .expect("cache")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .collect();
    let echo_entry = entries
        .iter()
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(&pin))
        })
        .expect("echo's entry");
    let testbed_entry = entries
        .iter()
        .find(|p| *p != echo_entry)
        .expect("testbed's entry");
    std::fs::copy(testbed_entry, echo_entry).expect("substitute");

    let second = worker_runtime(&cache, |_| {});
    let resolved = toolhost::resolve::Resolver::new(second.clone())
        .resolve_dir(&fixture.ensembles())
        .await;
    assert!(resolved.refused.is_empty(), "{:?}", resolved.refused);
    let echo = resolved.catalog.get("echo").expect("echo");
    assert_eq!(echo.backend_tool(), "echo");
    assert_eq!(
        (
            second.compile_stats().compiled,
            second.compile_stats().cache_hits
        ),
        (1, 1),
        "echo's substituted entry was refused and echo compiled again; testbed's was used"
    );
    let host = toolhost::invoke::Host::new(
        Arc::new(toolhost::catalog::LiveCatalog::new(resolved.catalog)),
        None,
    );
    let outcome = host
        .invoke(
            &crate::support::session(),
            "echo",
            serde_json::json!({"text": "mine"}),
        )
        .await;
    assert_eq!(crate::support::ok(&outcome), r#"{"text":"mine"}"#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_component_compiles_in_the_worker_under_the_default_bounds() {
    let tools = crate::mcp_list::test_tools();
    let temp = tempfile::tempdir().expect("temp");
    let repo = Path::new(toolhost_testkit::REPO_ROOT);
    std::fs::copy(
        repo.join("tests/plugins/python/app.py"),
        temp.path().join("app.py"),
    )
    .expect("copy app.py");
    let wasm = temp.path().join("shout.wasm");
    let built = std::process::Command::new(tools.join("venv/bin/componentize-py"))
        .current_dir(temp.path())
        .arg("-d")
        .arg(repo.join("wit/toolhost-plugin-0.1.0"))
        .args(["-w", "plugin", "componentize", "app", "-o"])
        .arg(&wasm)
        .output()
        .expect("componentize-py runs");
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let bytes = std::fs::read(&wasm).expect("the component");
    assert!(bytes.len() > 10 << 20, "a real Python build is large");

    // The defaults of `toolhost serve`: the worker, 2048 MiB, 120 CPU-seconds, 180 s.
    let runtime = worker_runtime(&temp.path().join("cache"), |_| {});
    let loaded = runtime
        .load(&wasm, bytes)
        .await
        .expect("the Python component compiles within the default bounds");
    assert_eq!(loaded.tools[0].name, "shout");
    let sandbox = toolhost::sandbox::SandboxSpec::default();
    let limits = toolhost::contract::CallLimits {
        timeout: Duration::from_secs(30),
        memory_bytes: 256 << 20,
        max_output_bytes: 1 << 20,
        max_response_bytes: 0,
    };
    let text = runtime
        .call(
            &loaded,
            toolhost::runtime::Caller {
                invoker: "shout",
                session: "test",
                link: &(std::sync::Arc::new(toolhost::contract::Unlinked) as _),
            },
            "shout",
            &serde_json::json!({"text": "hi"}),
            limits,
            &sandbox,
            None,
        )
        .await
        .expect("shout runs");
    assert_eq!(text.text(), "HI");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_that_wants_more_than_one_calls_share_of_the_pool_is_refused_at_load() {
    use crate::hostile::many_instances;
    let temp = tempfile::tempdir().expect("temp");
    let runtime = worker_runtime(&temp.path().join("cache"), |_| {});
    // 40 core instances: more than a call's 32.
    let message = refusal(
        runtime
            .load(Path::new("instances.wasm"), many_instances(40, 0))
            .await,
    );
    assert!(message.contains("core module instances"), "{message}");
    assert!(message.contains("32 core instances"), "{message}");
    // Three memories: more than a call's 2.
    let message = refusal(
        runtime
            .load(Path::new("memories.wasm"), many_instances(3, 1))
            .await,
    );
    assert!(message.contains("memories"), "{message}");
    // Within the share, what is wrong is that it offers no tool (it exports nothing).
    let within = runtime
        .load(Path::new("fits.wasm"), many_instances(30, 0))
        .await;
    assert!(matches!(within, Err(LoadError::Typed { .. })), "{within:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn components_that_never_describe_are_cut_at_the_deadline_once_not_at_every_reload() {
    let fixture = Fixture::new();
    for n in 0..6 {
        let wasm = fixture.root().join(format!("spinner{n}.wasm"));
        std::fs::write(
            &wasm,
            crate::reload::rebuilt(Path::new(toolhost_testkit::SPINNER), &format!("s{n}")),
        )
        .expect("a spinner");
        fixture.write(
            &format!("spin{n}.toml"),
            &ensemble(
                &format!("spin{n}"),
                &format!("spinner{n}"),
                "[[invokers]]\ninvoker = { name = \"spin\" }\n",
            ),
        );
    }
    fixture.write_echo();
    let runtime = Arc::new(
        Runtime::new(&RuntimeSettings {
            cache_dir: Some(crate::support::cache_dir()),
            max_instances: 16,
            describe_timeout: Duration::from_millis(500),
            ..RuntimeSettings::default()
        })
        .expect("runtime"),
    );
    let reloader = toolhost::reload::Reloader::start(runtime.clone(), fixture.ensembles()).await;
    let status = reloader.status();
    assert_eq!(status.refused.len(), 6, "{:?}", status.refused);
    for refused in &status.refused {
        let errors = refused.errors.join("\n");
        assert!(errors.contains("did not finish within 500 ms"), "{errors}");
    }
    assert!(reloader.catalog().snapshot().get("echo").is_some());
    let described = runtime.compile_stats().described;
    // A reload does not describe them again: their failure is remembered by their bytes.
    let change = reloader.reload().await;
    assert_eq!(change.refused.len(), 6);
    assert_eq!(runtime.compile_stats().described, described);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_that_describes_too_much_is_refused_with_the_bound_named() {
    let fixture = Fixture::new();
    for (name, path) in [
        ("sprawl", toolhost_testkit::SPRAWL),
        ("verbose", toolhost_testkit::VERBOSE),
    ] {
        std::fs::copy(path, fixture.root().join(format!("{name}.wasm"))).expect("copy");
        fixture.write(
            &format!("{name}.toml"),
            &ensemble(
                name,
                name,
                "[[invokers]]\ninvoker = { name = \"tool_1\" }\n",
            ),
        );
    }
    fixture.write_echo();
    let runtime = Arc::new(
        Runtime::new(&RuntimeSettings {
            cache_dir: Some(crate::support::cache_dir()),
            ..RuntimeSettings::default()
        })
        .expect("runtime"),
    );
    let reloader = toolhost::reload::Reloader::start(runtime, fixture.ensembles()).await;
    let status = reloader.status();
    let errors = |file: &str| {
        let refused = status.refused.iter().find(|r| r.file.ends_with(file));
        refused.map(|r| r.errors.join("\n")).unwrap_or_default()
    };
    // 20,000 small tools.
    assert!(
        errors("sprawl.toml")
            .contains("it describes 20000 tools; a component may describe at most 10000"),
        "{:?}",
        status.refused
    );
    // 20 tools of 1 MiB each.
    assert!(
        errors("verbose.toml")
            .contains("more than the 16777216 bytes (16 MiB) a component may describe"),
        "{:?}",
        status.refused
    );
    assert_eq!(
        (
            toolhost::runtime::MAX_DESCRIBED_TOOLS,
            toolhost::runtime::MAX_DESCRIBED_BYTES
        ),
        (10_000, 16 << 20),
        "the messages above name the bounds"
    );
    assert!(reloader.catalog().snapshot().get("echo").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_path_that_is_a_fifo_or_a_device_is_refused_without_reading_it() {
    let fixture = Fixture::new();
    let fifo = fixture.root().join("fifo.wasm");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    fixture.write(
        "fifo.toml",
        &ensemble("fifo", "fifo", "[[invokers]]\ninvoker = { name = \"x\" }\n"),
    );
    fixture.write(
        "zero.toml",
        "schema-version = 1\n[ensemble]\nname = \"zero\"\ncomponent = \"/dev/zero\"\n\
         [[invokers]]\ninvoker = { name = \"y\" }\n",
    );
    // Would block for ever on the FIFO, or read /dev/zero without end, if either were read.
    let resolved = tokio::time::timeout(Duration::from_secs(60), fixture.resolve())
        .await
        .expect("resolving does not block");
    let errors: Vec<String> = resolved.diagnostics().map(|d| d.message.clone()).collect();
    assert_eq!(errors.len(), 2, "{errors:?}");
    for error in &errors {
        assert!(error.ends_with("it is not a regular file"), "{error}");
    }
}
