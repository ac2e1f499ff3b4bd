//! Compiling in tiers: a component new to the cache answers on Winch's code, swaps to
//! Cranelift's when its compile in the background ends (no call lost across the swap), and a
//! restart serves Cranelift's code from the cache; a component Winch cannot compile is served
//! by Cranelift alone, saying so; the compile bombs of the hardening suite are bounded in both
//! tiers.

use crate::hostile::{many_functions, register_hog_module};
use crate::support::{Fixture, ensemble, ok, session};
use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use toolhost::invoke::Host;
use toolhost::reload::Reloader;
use toolhost::runtime::{CompileSettings, ComponentState, Runtime, Tier, TierUsage, Tiering};
use toolhost_testkit::languages::{javascript_components, python_components};

/// A runtime in tiers on the cache in `cache`, compiling in the `toolhost` binary's worker.
fn tiered(cache: &Path, adjust: impl FnOnce(&mut CompileSettings)) -> Arc<Runtime> {
    crate::compile::worker_runtime_tiered(cache, Tiering::On, adjust)
}

fn tier(runtime: &Runtime, tier: Tier) -> TierUsage {
    (runtime.tiers().into_iter())
        .find(|usage| usage.tier == tier)
        .expect("every tier is listed")
}

/// The one component `runtime` has loaded.
fn only_component(runtime: &Runtime) -> ComponentState {
    let components = runtime.components();
    assert_eq!(components.len(), 1, "{components:?}");
    components.into_iter().next().expect("one")
}

/// The ensemble `lang` with the component at `wasm`, every tool offered as `lang_<tool>`.
fn language_fixture(lang: &str, wasm: &Path) -> Fixture {
    let fixture = Fixture::new();
    crate::languages::write_ensemble(&fixture, lang, wasm);
    fixture
}

/// Everything the issue asks of the tiers, for one language's component: the first call
/// answers on Winch's code while Cranelift's compile runs (the host's own count of the calls
/// each tier's code ran says so), calls keep coming through the swap and none is lost, later
/// calls run Cranelift's code, and a restart on the same cache serves Cranelift's code with
/// no compile.
async fn first_winch_then_cranelift(lang: &str, wasm: &Path) {
    let fixture = language_fixture(lang, wasm);
    let cache = fixture.mkdir("cache");
    let runtime = tiered(&cache, |_| {});
    let mut promotions = runtime.promotions();
    let reloader = Reloader::start(runtime.clone(), fixture.ensembles()).await;
    let host = Arc::new(Host::new(reloader.catalog().clone(), None));
    let shout = format!("{lang}_shout");
    let said = ok(&host.invoke(&session(), &shout, json!({"text": "hi"})).await);
    assert_eq!(said, "HI");
    // The first call ran Winch's code: Cranelift's was not there yet.
    assert_eq!(
        tier(&runtime, Tier::Winch).calls,
        1,
        "{:?}",
        runtime.tiers()
    );
    assert_eq!(tier(&runtime, Tier::Cranelift).calls, 0);
    let first = only_component(&runtime);
    assert_eq!(first.tier, Tier::Winch, "{first:?}");
    assert_eq!(first.compiles.len(), 1, "{first:?}");
    assert!(!first.compiles[0].cached);

    // Calls from four tasks until the swap, and as many again after it: none lost.
    let swapped = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicU64::new(0));
    let mut load = Vec::new();
    for task in 0..4 {
        let (host, shout) = (host.clone(), shout.clone());
        let (swapped, answered) = (swapped.clone(), answered.clone());
        load.push(tokio::spawn(async move {
            let mut after = 0;
            let mut n = 0u64;
            while after < 60 {
                if swapped.load(Ordering::SeqCst) {
                    after += 1;
                }
                let text = format!("call {task} {n}");
                let outcome = host
                    .invoke(&session(), &shout, json!({ "text": text }))
                    .await;
                assert_eq!(ok(&outcome), text.to_uppercase());
                answered.fetch_add(1, Ordering::SeqCst);
                n += 1;
            }
        }));
    }
    let promoted = tokio::time::timeout(Duration::from_secs(600), promotions.recv())
        .await
        .expect("Cranelift's compile ends")
        .expect("told");
    swapped.store(true, Ordering::SeqCst);
    for task in load {
        task.await.expect("every call of the load answered");
    }
    let calls = answered.load(Ordering::SeqCst);
    assert!(calls >= 240, "{calls} calls");
    let state = only_component(&runtime);
    assert_eq!(promoted.to_string(), state.hash);
    assert_eq!(state.tier, Tier::Cranelift, "{state:?}");
    assert_eq!(
        (state.compiles.iter())
            .map(|c| (c.tier, c.cached))
            .collect::<Vec<_>>(),
        [(Tier::Winch, false), (Tier::Cranelift, false)],
        "{state:?}"
    );
    assert_eq!(state.note, None);
    // Winch's entry in the cache went once Cranelift's was there.
    let entries = std::fs::read_dir(&cache).expect("cache").flatten();
    let compiled: Vec<_> = (entries.map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter(|name| name.ends_with(".cwasm"))
        .collect();
    assert_eq!(compiled.len(), 1, "{compiled:?}");
    // Calls ran on both: Winch's before the swap, Cranelift's after (each task made 60).
    let (winch, cranelift) = (tier(&runtime, Tier::Winch), tier(&runtime, Tier::Cranelift));
    assert!(winch.calls > 1, "{winch:?}");
    assert!(cranelift.calls >= 240, "{cranelift:?}");
    assert_eq!(winch.calls + cranelift.calls, calls + 1);
    assert_eq!((winch.compiles, cranelift.compiles), (1, 1));
    assert!(winch.compile_seconds > 0.0 && cranelift.compile_seconds > 0.0);
    drop((host, reloader));

    // A restart on the same cache: Cranelift's code at once, nothing compiled.
    let again = tiered(&cache, |_| {});
    let reloader = Reloader::start(again.clone(), fixture.ensembles()).await;
    let host = Host::new(reloader.catalog().clone(), None);
    let said = ok(&host
        .invoke(&session(), &shout, json!({"text": "again"}))
        .await);
    assert_eq!(said, "AGAIN");
    assert_eq!(again.compile_stats().compiled, 0);
    let state = only_component(&again);
    assert_eq!(
        (state.tier, state.compiles.len(), state.compiles[0].cached),
        (Tier::Cranelift, 1, true),
        "{state:?}"
    );
    assert_eq!(tier(&again, Tier::Cranelift).calls, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_component_answers_on_winchs_code_then_swaps_to_cranelifts_losing_no_call() {
    first_winch_then_cranelift("py", &python_components().0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_javascript_component_answers_on_winchs_code_then_swaps_to_cranelifts_losing_no_call() {
    first_winch_then_cranelift("js", &javascript_components().0).await;
}

/// `echo.wasm` with `module` beside it: never instantiated, but compiled with the rest.
fn echo_with(module: &wasm_encoder::Module) -> Vec<u8> {
    use wasm_encoder::{ComponentSectionId, Encode, ModuleSection};
    let mut echo = std::fs::read(toolhost_testkit::ECHO).expect("echo");
    // A component's sections follow one another: one more core module section at the end.
    echo.push(ComponentSectionId::CoreModule as u8);
    let mut section = Vec::new();
    ModuleSection(module).encode(&mut section);
    echo.extend_from_slice(&section);
    echo
}

/// [`echo_with`] a function that makes a tail call (`return_call`), a proposal Winch does
/// not implement.
fn echo_with_a_tail_call() -> Vec<u8> {
    use wasm_encoder::{CodeSection, Function, FunctionSection, Instruction, Module, TypeSection};
    let mut types = TypeSection::new();
    types.ty().function([], []);
    let mut functions = FunctionSection::new();
    functions.function(0);
    let mut body = Function::new([]);
    body.instruction(&Instruction::ReturnCall(0));
    body.instruction(&Instruction::End);
    let mut code = CodeSection::new();
    code.function(&body);
    let mut module = Module::new();
    module.section(&types).section(&functions).section(&code);
    echo_with(&module)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_winch_cannot_compile_is_served_by_cranelift_alone_saying_so() {
    let fixture = Fixture::new();
    let wasm = fixture.root().join("tail-echo.wasm");
    std::fs::write(&wasm, echo_with_a_tail_call()).expect("write");
    fixture.write(
        "echo.toml",
        &ensemble(
            "echo",
            "tail-echo",
            "[[invokers]]\ninvoker = { name = \"echo\" }\n",
        ),
    );
    let cache = fixture.mkdir("cache");
    let runtime = tiered(&cache, |_| {});
    let reloader = Reloader::start(runtime.clone(), fixture.ensembles()).await;
    let host = Host::new(reloader.catalog().clone(), None);
    let said = ok(&host
        .invoke(&session(), "echo", json!({"text": "tail"}))
        .await);
    assert_eq!(said, r#"{"text":"tail"}"#);
    let state = only_component(&runtime);
    assert_eq!(state.tier, Tier::Cranelift, "{state:?}");
    assert_eq!(state.compiles.len(), 1, "{state:?}");
    let note = state.note.unwrap_or_default();
    assert!(
        note.starts_with("Winch cannot compile it (") && note.ends_with("): Cranelift alone"),
        "{note}"
    );
    assert!(note.contains("tail call"), "{note}");
    assert_eq!(tier(&runtime, Tier::Cranelift).calls, 1);

    // `toolhost check` (Winch alone, in tiers) says it in its log, and passes.
    let checked = std::process::Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .arg("--ensembles")
        .arg(fixture.ensembles())
        .args(["--cache-dir"])
        .arg(fixture.mkdir("check-cache"))
        .arg("check")
        .env_remove("TOOLHOST_CONFIG")
        .current_dir(fixture.root())
        .output()
        .expect("check runs");
    let stderr = String::from_utf8_lossy(&checked.stderr);
    assert!(checked.status.success(), "{stderr}");
    assert!(
        stderr.contains("Winch cannot compile") && stderr.contains("Cranelift compiled it alone"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compile_bombs_are_bounded_in_both_tiers() {
    let temp = tempfile::tempdir().expect("temp");
    // A compile whose memory runs past its bound in Winch's tier is refused there, naming
    // the bound, as without tiers; nothing is served and Cranelift never starts.
    let runtime = tiered(&temp.path().join("memory"), |c| c.memory_mib = 16);
    let hog = many_functions(40_000);
    let refused = crate::compile::refusal(runtime.load(Path::new("hog.wasm"), hog).await);
    assert!(
        refused.contains("compiling needed more than 16 MiB (compile-memory-mib)"),
        "{refused}"
    );
    assert_eq!(tier(&runtime, Tier::Cranelift).compiles, 0);

    // The register hog takes Cranelift far more than a second of CPU and Winch a fraction:
    // its Winch code serves, Cranelift's compile is cut at its bound, and the component goes
    // on running Winch's code, saying why.
    let runtime = tiered(&temp.path().join("cpu"), |c| c.cpu_seconds = 1);
    let mut promotions = runtime.promotions();
    let hog = echo_with(&register_hog_module(12_000, 12_000));
    let loaded = runtime
        .load(Path::new("hog.wasm"), hog)
        .await
        .expect("Winch compiles it within a second");
    assert_eq!(loaded.tier(), Tier::Winch);
    tokio::time::timeout(Duration::from_secs(120), promotions.recv())
        .await
        .expect("the promotion ends")
        .expect("told");
    let state = only_component(&runtime);
    assert_eq!(state.tier, Tier::Winch, "{state:?}");
    let note = state.note.unwrap_or_default();
    assert!(
        note.contains("Cranelift could not compile it")
            && note.contains("compiling took more than 1 s of CPU (compile-cpu-seconds)"),
        "{note}"
    );
    assert_eq!(runtime.compile_stats().failed, 1);
}

/// `toolhost status` of the `serve` the fixture's status file names.
fn status(fixture: &Fixture) -> String {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .current_dir(fixture.root())
        .env_remove("TOOLHOST_CONFIG")
        .env("TOOLHOST_STATUS_FILE", fixture.root().join("status.json"))
        .arg("status")
        .output()
        .expect("status runs");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_says_each_components_tier_and_compiles_in_metrics_status_and_its_log() {
    use crate::metrics::{sample, scrape};
    use crate::service::wait_until;
    for tiered in [true, false] {
        let fixture = Fixture::new();
        fixture.write_echo();
        let cache = fixture.mkdir("own-cache");
        let cache_env = [("TOOLHOST_CACHE_DIR", cache.to_str().expect("utf-8"))];
        if tiered {
            // `check` compiles with Winch alone, and leaves its code in the cache.
            let checked = std::process::Command::new(env!("CARGO_BIN_EXE_toolhost"))
                .current_dir(fixture.root())
                .env_remove("TOOLHOST_CONFIG")
                .env("TOOLHOST_ENSEMBLES", fixture.ensembles())
                .envs(cache_env)
                .arg("check")
                .output()
                .expect("check runs");
            let stderr = String::from_utf8_lossy(&checked.stderr);
            assert!(checked.status.success(), "{stderr}");
            assert!(stderr.contains("with winch"), "{stderr}");
            assert!(!stderr.contains("with cranelift"), "{stderr}");
        } else {
            fixture.write_host_file("host", "tiered-compile = false");
        }
        // -vv: the swap is said at debug level.
        let server = crate::mcp::HttpServer::start(&fixture, &["-vv"], &cache_env);
        let mut page = String::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        while sample(&page, "toolhost_components{tier=\"cranelift\"}") != Some(1.0) {
            assert!(std::time::Instant::now() < deadline, "{page}");
            tokio::time::sleep(Duration::from_millis(50)).await;
            page = scrape(&server.url, None).await.1;
        }
        let compiles = |tier: &str| {
            sample(
                &page,
                &format!("toolhost_compiles_since_start{{tier=\"{tier}\"}}"),
            )
        };
        // Tiered, Winch's code came from `check`'s cache; Cranelift's was compiled here.
        assert_eq!(
            (compiles("winch"), compiles("cranelift")),
            (Some(0.0), Some(1.0)),
            "{page}"
        );
        assert_eq!(
            sample(&page, "toolhost_components{tier=\"winch\"}"),
            Some(0.0)
        );
        let seconds = sample(
            &page,
            "toolhost_compile_seconds_since_start{tier=\"cranelift\"}",
        );
        assert!(seconds.is_some_and(|s| s > 0.0), "{page}");
        let expected = if tiered {
            "runs cranelift's code (winch from the cache in "
        } else {
            "runs cranelift's code (cranelift compiled in "
        };
        let mut shown = String::new();
        wait_until("status shows the component's tier", || {
            shown = status(&fixture);
            shown.contains(expected)
        });
        let line = shown
            .lines()
            .find(|l| l.starts_with("component "))
            .unwrap_or_default();
        assert!(line.contains("echo.wasm"), "{shown}");
        if tiered {
            assert!(line.contains(", then cranelift compiled in "), "{line}");
            let log = server.stderr();
            assert!(log.contains("now runs Cranelift's code"), "{log}");
        } else {
            assert!(!line.contains("winch"), "{line}");
        }
    }
}
