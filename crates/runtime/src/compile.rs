//! Compiling a component a stranger wrote, without letting it take the host down.
//!
//! 1. Cheap checks first ([`check_size`]): the file's size, and a scan (no validation) of
//!    every core module inside it: how many functions, how large a body, how many locals.
//!    What is plainly too large is refused before anything is compiled.
//! 2. Then the compile itself runs in a **worker process** (the host's own binary run as
//!    `<program> compile-worker`, [`worker_main`]): it reads the `.wasm` on stdin, sets its own
//!    address-space and CPU-time limits before it reads a byte, compiles with the host's code
//!    generation settings and writes the artifact on stdout. It opens no file and no socket.
//!    The host waits for it without blocking a thread, kills it at the wall-clock deadline,
//!    and reads at most as many bytes as the worker may have. A compile that needs more than
//!    its bounds ends only the worker; the host names the bound that was hit.
//!
//! Without a worker program (a library user that set none), the compile runs in this process
//! on a blocking thread, with the cheap checks as the only bound: see SECURITY.md.

use super::engine::{Tier, compile_config};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wasmtime::Engine;

/// How components are compiled, and the bounds of a compile.
#[derive(Debug, Clone)]
pub struct CompileSettings {
    /// The program to run as `<program> compile-worker` (the `toolhost` binary); `None`
    /// compiles in this process.
    pub worker: Option<PathBuf>,
    /// The worker's address space, in MiB (`[host] compile-memory-mib`).
    pub memory_mib: u64,
    /// The worker's CPU time, in seconds (`[host] compile-cpu-seconds`).
    pub cpu_seconds: u64,
    /// How long a compile may take on the clock (`[host] compile-timeout-s`).
    pub timeout: Duration,
    /// Compiles at once, at most (`[host] max-parallel-compiles`).
    pub parallel: usize,
    /// The largest component file accepted (`[host] max-component-mib`).
    pub max_component_bytes: u64,
}

impl Default for CompileSettings {
    fn default() -> Self {
        CompileSettings {
            worker: None,
            memory_mib: DEFAULT_COMPILE_MEMORY_MIB,
            cpu_seconds: DEFAULT_COMPILE_CPU_SECONDS,
            timeout: Duration::from_secs(DEFAULT_COMPILE_TIMEOUT_S),
            parallel: std::thread::available_parallelism().map_or(2, |n| n.get()),
            max_component_bytes: DEFAULT_MAX_COMPONENT_MIB << 20,
        }
    }
}

/// A componentize-py component (17.6 MiB) takes about 10 CPU-seconds and 344 MiB to compile
/// here (BENCHMARKS.md, "Compiling in the worker"): the defaults leave about six times that
/// room, for larger runtimes (JavaScript) and slower machines.
pub const DEFAULT_COMPILE_MEMORY_MIB: u64 = 2048;
pub const DEFAULT_COMPILE_CPU_SECONDS: u64 = 120;
pub const DEFAULT_COMPILE_TIMEOUT_S: u64 = 180;
/// A componentize-py build is about 18 MiB; a language runtime with a large library may be
/// several times that.
pub const DEFAULT_MAX_COMPONENT_MIB: u64 = 256;
/// Function bodies past this are refused before compiling: the largest in a CPython build
/// (its interpreter loop) is far below it.
pub const MAX_FUNCTION_BODY_BYTES: usize = 4 << 20;
/// Locals of one function past this are refused (wasmparser's own limit is 50,000).
pub const MAX_FUNCTION_LOCALS: u64 = 50_000;
/// Functions of all the core modules of one component, past this refused.
pub const MAX_FUNCTIONS: usize = 1_000_000;

/// Why a compile did not produce an artifact.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompileError {
    /// The component is invalid (the compiler's own message).
    #[error("{0}")]
    Invalid(String),
    /// A cheap check or a bound of the compile.
    #[error("{0}")]
    Bound(String),
    /// The worker failed in another way (the compiler itself crashed, say).
    #[error("the compile worker failed: {0}")]
    Worker(String),
    /// The worker could not be started or talked to: the host's trouble, not the
    /// component's.
    #[error("the compile worker could not be run: {0}")]
    Unavailable(String),
}

/// Refuses, before compiling, a component that is plainly too large.
pub(crate) fn check_size(bytes: &[u8], settings: &CompileSettings) -> Result<(), CompileError> {
    if bytes.len() as u64 > settings.max_component_bytes {
        return Err(CompileError::Bound(format!(
            "it is {} MiB, more than the {} MiB a component may be (max-component-mib)",
            bytes.len() >> 20,
            settings.max_component_bytes >> 20
        )));
    }
    let mut functions = 0usize;
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        // A parse error is the compiler's to report, with its own message.
        let Ok(wasmparser::Payload::CodeSectionEntry(body)) = payload else {
            continue;
        };
        functions += 1;
        if functions > MAX_FUNCTIONS {
            return Err(CompileError::Bound(format!(
                "it has more than {MAX_FUNCTIONS} functions"
            )));
        }
        let size = body.range().len();
        if size > MAX_FUNCTION_BODY_BYTES {
            return Err(CompileError::Bound(format!(
                "a function body is {size} bytes, more than {MAX_FUNCTION_BODY_BYTES}"
            )));
        }
        let mut locals = 0u64;
        if let Ok(reader) = body.get_locals_reader() {
            for local in reader.into_iter().flatten() {
                locals += u64::from(local.0);
            }
        }
        if locals > MAX_FUNCTION_LOCALS {
            return Err(CompileError::Bound(format!(
                "a function declares {locals} locals, more than {MAX_FUNCTION_LOCALS}"
            )));
        }
    }
    Ok(())
}

/// Compiles `bytes` with the compiler of `tier` into an artifact for `engine` (the host's
/// engine of that tier), in the worker when there is one.
pub(crate) async fn compile(
    engine: &Engine,
    tier: Tier,
    bytes: std::sync::Arc<[u8]>,
    settings: &CompileSettings,
) -> Result<Vec<u8>, CompileError> {
    match &settings.worker {
        Some(program) => in_worker(program, tier, &bytes, settings).await,
        None => {
            let engine = engine.clone();
            tokio::task::spawn_blocking(move || engine.precompile_component(&bytes))
                .await
                .map_err(|e| CompileError::Worker(e.to_string()))?
                .map_err(|e| CompileError::Invalid(format!("{e:#}")))
        }
    }
}

async fn in_worker(
    program: &Path,
    tier: Tier,
    bytes: &[u8],
    settings: &CompileSettings,
) -> Result<Vec<u8>, CompileError> {
    // Starting it, or talking to it through its pipes, failed: the host's trouble.
    let worker =
        |e: std::io::Error| CompileError::Unavailable(format!("{}: {e}", program.display()));
    let mut child = tokio::process::Command::new(program)
        .arg("compile-worker")
        .arg("--memory-mib")
        .arg(settings.memory_mib.to_string())
        .arg("--cpu-seconds")
        .arg(settings.cpu_seconds.to_string())
        .arg("--tier")
        .arg(tier.name())
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(worker)?;
    let (Some(mut stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(CompileError::Unavailable(
            "its pipes were not opened".into(),
        ));
    };
    // The worker cannot hold more than its address space, and native code is a small multiple
    // of the WebAssembly it comes from: the host reads no more than the lesser.
    let limit = (settings.memory_mib << 20).min(artifact_limit(bytes.len()));
    let run = async {
        let feed = async {
            // A worker that dies early closes the pipe: its exit status says why.
            let _ = stdin.write_all(bytes).await;
            drop(stdin);
        };
        let mut message = Vec::new();
        // The pipe is closed as soon as the limit is read, so a worker with more to write
        // ends (on the broken pipe) instead of waiting for the deadline.
        let read = async move {
            let mut artifact = Vec::new();
            let mut stdout = stdout.take(limit + 1);
            let read = stdout.read_to_end(&mut artifact).await;
            drop(stdout);
            read.map(|_| artifact)
        };
        // The first 64 KiB of stderr say why it failed; the rest is read and dropped, so a
        // worker that writes more never blocks on a full pipe until the deadline.
        let errors = async {
            let mut stderr = stderr;
            let _ = (&mut stderr)
                .take(64 * 1024)
                .read_to_end(&mut message)
                .await;
            let _ = tokio::io::copy(&mut stderr, &mut tokio::io::sink()).await;
        };
        let (_, read, ()) = tokio::join!(feed, read, errors);
        let artifact = read.map_err(worker)?;
        let status = child.wait().await.map_err(worker)?;
        Ok::<_, CompileError>((
            status,
            artifact,
            String::from_utf8_lossy(&message).into_owned(),
        ))
    };
    let (status, artifact, message) = match tokio::time::timeout(settings.timeout, run).await {
        Ok(done) => done?,
        Err(_) => {
            let _ = child.kill().await;
            return Err(CompileError::Bound(format!(
                "compiling took longer than {} s (compile-timeout-s)",
                settings.timeout.as_secs()
            )));
        }
    };
    if artifact.len() as u64 > limit {
        let why = if limit == settings.memory_mib << 20 {
            "the compile worker's whole address space (compile-memory-mib)".to_string()
        } else {
            format!(
                "32 times the component's size and 64 MiB more ({} KiB of WebAssembly)",
                bytes.len() >> 10
            )
        };
        return Err(CompileError::Bound(format!(
            "its compiled code is larger than {} MiB, {why}",
            limit >> 20
        )));
    }
    if status.success() {
        return Ok(artifact);
    }
    Err(worker_failure(status, &message, settings))
}

/// The most native code the host reads back for a component of `wasm_bytes`: 32 times its
/// size and 64 MiB more (a componentize-py build of 17.6 MiB makes about 35 MiB).
fn artifact_limit(wasm_bytes: usize) -> u64 {
    (wasm_bytes as u64)
        .saturating_mul(32)
        .saturating_add(64 << 20)
}

/// Says which bound a worker that failed hit, from how it ended.
fn worker_failure(
    status: std::process::ExitStatus,
    message: &str,
    settings: &CompileSettings,
) -> CompileError {
    use std::os::unix::process::ExitStatusExt;
    const SIGABRT: i32 = 6;
    const SIGKILL: i32 = 9;
    const SIGXCPU: i32 = 24;
    let memory = || {
        CompileError::Bound(format!(
            "compiling needed more than {} MiB (compile-memory-mib)",
            settings.memory_mib
        ))
    };
    match (status.code(), status.signal()) {
        (Some(EXIT_OUT_OF_MEMORY), _) => memory(),
        (Some(EXIT_INVALID), _) => match message.trim().strip_prefix(INVALID) {
            Some(reason) => CompileError::Invalid(reason.trim().to_string()),
            None => CompileError::Worker(message.trim().to_string()),
        },
        // Rust's report of an allocation refused, before it aborts.
        (_, Some(SIGABRT)) if message.contains("memory allocation of") => memory(),
        (_, Some(SIGXCPU)) => CompileError::Bound(format!(
            "compiling took more than {} s of CPU (compile-cpu-seconds)",
            settings.cpu_seconds
        )),
        // The hard CPU limit, 5 s past the soft one, or the system's out-of-memory killer.
        (_, Some(SIGKILL)) => CompileError::Bound(format!(
            "the compile worker was killed: compiling took more than {} s of CPU \
             (compile-cpu-seconds), or the system ran out of memory",
            settings.cpu_seconds
        )),
        // An allocation refused where Rust cannot report it (a thread's stack, say).
        (_, Some(signal)) => CompileError::Bound(format!(
            "the compile worker ended on signal {signal}, most likely for want of memory: \
             compiling needed more than {} MiB (compile-memory-mib)",
            settings.memory_mib
        )),
        _ => CompileError::Worker(message.trim().to_string()),
    }
}

/// How the worker reports an invalid component on stderr, and the code it exits with.
const INVALID: &str = "invalid component:";
const EXIT_INVALID: i32 = 1;
/// The worker's exit code when memory or address space ran out where it could see it: an
/// allocation that returned an error, an `mmap` or a thread refused. (An allocation Rust
/// cannot recover from aborts instead, with its own message.)
const EXIT_OUT_OF_MEMORY: i32 = 4;

/// Whether `error` comes from memory or address space running out (`ENOMEM`, or `EAGAIN`
/// where a thread could not be made), anywhere in its chain.
fn out_of_memory(error: &(dyn std::error::Error + 'static)) -> bool {
    const ENOMEM: i32 = 12;
    const EAGAIN: i32 = 11;
    let mut next = Some(error);
    while let Some(error) = next {
        let code = error
            .downcast_ref::<std::io::Error>()
            .map(|e| {
                if e.kind() == std::io::ErrorKind::OutOfMemory {
                    Some(ENOMEM)
                } else {
                    e.raw_os_error()
                }
            })
            .or_else(|| {
                error
                    .downcast_ref::<rustix::io::Errno>()
                    .map(|e| Some(e.raw_os_error()))
            })
            .flatten();
        if matches!(code, Some(ENOMEM | EAGAIN)) {
            return true;
        }
        next = error.source();
    }
    false
}

/// Whether a wasmtime error is memory running out: its own `OutOfMemory` (an allocation it
/// refused without aborting, reported as "out of memory (failed to allocate N bytes)"), or
/// an OS error of that kind anywhere in its chain.
fn wasmtime_out_of_memory(error: &wasmtime::Error) -> bool {
    error.is::<wasmtime::OutOfMemory>() || out_of_memory(error.as_ref())
}

/// The worker's side: sets its limits, compiles stdin with the compiler of `tier`, writes the
/// artifact to stdout. Returns the process's exit code. Called by the `toolhost
/// compile-worker` command.
pub fn worker_main(memory_mib: u64, cpu_seconds: u64, tier: Tier) -> i32 {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    use std::io::{Read, Write};
    let bytes = memory_mib.saturating_mul(1 << 20);
    let limits = [
        (Resource::As, bytes),
        (Resource::Cpu, cpu_seconds),
        // No core file of a hostile compile.
        (Resource::Core, 0),
    ];
    for (resource, value) in limits {
        // SIGXCPU at the soft limit, SIGKILL 5 s later if it is ignored.
        let maximum = if resource == Resource::Cpu {
            value.saturating_add(5)
        } else {
            value
        };
        // A process may lower its limits, never raise them: where the host already runs
        // under a tighter hard limit (a service manager's, say), that one stays.
        let hard = getrlimit(resource).maximum;
        let within = |wanted: u64| Some(hard.map_or(wanted, |hard| wanted.min(hard)));
        let limit = Rlimit {
            current: within(value),
            maximum: within(maximum),
        };
        if let Err(e) = setrlimit(resource, limit) {
            eprintln!("cannot set the compile worker's limit {resource:?}: {e}");
            return 3;
        }
    }
    // A thread wasmtime could not start panics (rayon's pool, when the address space is
    // spent): that is the memory bound too, and said so through the exit code.
    std::panic::set_hook(Box::new(|info| {
        let text = info.to_string();
        if text.contains("Resource temporarily unavailable") || text.contains("os error 12") {
            eprintln!("out of memory: {text}");
            std::process::exit(EXIT_OUT_OF_MEMORY);
        }
        eprintln!("compile worker panicked: {text}");
    }));
    let mut wasm = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut wasm) {
        eprintln!("cannot read the component: {e}");
        return if out_of_memory(&e) {
            EXIT_OUT_OF_MEMORY
        } else {
            3
        };
    }
    let engine = match Engine::new(&compile_config(tier)) {
        Ok(engine) => engine,
        Err(e) if wasmtime_out_of_memory(&e) => {
            eprintln!("out of memory: {e:#}");
            return EXIT_OUT_OF_MEMORY;
        }
        Err(e) => {
            eprintln!("cannot configure wasmtime: {e:#}");
            return 3;
        }
    };
    match engine.precompile_component(&wasm) {
        Ok(artifact) => match std::io::stdout().lock().write_all(&artifact) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("cannot write the artifact: {e}");
                3
            }
        },
        Err(e) if wasmtime_out_of_memory(&e) => {
            eprintln!("out of memory: {e:#}");
            EXIT_OUT_OF_MEMORY
        }
        Err(e) => {
            eprintln!("{INVALID} {e:#}");
            EXIT_INVALID
        }
    }
}
