//! How loads and calls fail: [`LoadError`], [`RunError`], and the reading of a trap (or of a
//! plugin's stderr) that tells which one it was.

use std::path::PathBuf;
use toolhost_contract::{CallLimits, RunError};
use wasmtime::Trap;

/// Why a component could not be loaded.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LoadError {
    #[error("{path} is not a valid WebAssembly component: {reason}")]
    Compile { path: PathBuf, reason: String },
    #[error("{path} cannot be linked: {reason}")]
    Link { path: PathBuf, reason: String },
    /// A typed component whose exports cannot be offered as tools.
    #[error("{path} cannot be offered as tools: {reason}")]
    Typed { path: PathBuf, reason: String },
    #[error("describe() of {path} failed: {reason}")]
    Describe { path: PathBuf, reason: String },
    /// A cheap check or a bound of the compile refused it; it is not compiled again until its
    /// bytes change.
    #[error("{path} was refused: {reason}")]
    Refused { path: PathBuf, reason: String },
    /// The host could not compile it right now (the worker could not be started, say): not
    /// the component's fault, so it is tried again at a later reload.
    #[error("{path} could not be compiled now: {reason}")]
    Unavailable { path: PathBuf, reason: String },
}

impl LoadError {
    /// Whether the failure belongs to the component's bytes, so that loading the same bytes
    /// again fails the same way and need not be tried (until they change).
    pub(crate) fn is_lasting(&self) -> bool {
        !matches!(self, LoadError::Unavailable { .. })
    }

    /// The same failure, told about `path` (the same bytes may be loaded from another file).
    pub(crate) fn at(mut self, at: &std::path::Path) -> Self {
        let (LoadError::Compile { path, .. }
        | LoadError::Link { path, .. }
        | LoadError::Typed { path, .. }
        | LoadError::Describe { path, .. }
        | LoadError::Refused { path, .. }
        | LoadError::Unavailable { path, .. }) = &mut self;
        *path = at.to_path_buf();
        self
    }
}

/// Says why `bytes` cannot be a component, for the two mistakes a plugin author makes most:
/// a file that is not WebAssembly at all, and a core module built for the wrong target.
pub(super) fn not_a_component(bytes: &[u8]) -> Option<&'static str> {
    const CORE_MODULE: [u8; 4] = [1, 0, 0, 0];
    if !bytes.starts_with(b"\0asm") {
        return Some(
            "it is not a WebAssembly file (it does not start with the \\0asm magic bytes)",
        );
    }
    if bytes.get(4..8) == Some(&CORE_MODULE) {
        return Some(
            "it is a core WebAssembly module, not a component; build a component: Rust with \
             `cargo build --target wasm32-wasip2`, Python with componentize-py, JavaScript with \
             componentize-js, C with clang and wasi-libc linked by wasm-component-ld \
             (`-fuse-ld=wasm-component-ld`); see docs/plugins.md (\"Writing a plugin\")",
        );
    }
    None
}

/// Turns a trap (or an instantiation failure) into the error the caller sees.
pub(super) fn classify(
    error: &wasmtime::Error,
    memory_refused: bool,
    limits: CallLimits,
    stderr: &str,
) -> RunError {
    if let Some(pool) = error.downcast_ref::<wasmtime::PoolConcurrencyLimitError>() {
        return RunError::HostCapacity {
            detail: pool.to_string(),
        };
    }
    if let Some(wasmtime::component::ResourceTableError::Full) =
        error.downcast_ref::<wasmtime::component::ResourceTableError>()
    {
        return RunError::TooManyResources {
            limit: super::MAX_RESOURCES_PER_CALL,
        };
    }
    let trap = error.downcast_ref::<Trap>();
    if trap == Some(&Trap::Interrupt) {
        return RunError::Timeout {
            limit: limits.timeout,
        };
    }
    if memory_refused {
        return RunError::MemoryLimit {
            limit_bytes: limits.memory_bytes,
        };
    }
    if let Some(message) = language_exception(stderr) {
        return RunError::Crashed { message };
    }
    // What came before a panic says more than the panic itself.
    let before_panic = stderr
        .find("panicked at ")
        .map(|at| stderr[..at].rfind('\n').map_or("", |line| &stderr[..line]));
    let message = match (trap, panic_message(stderr)) {
        (_, Some(panic)) => format!("panicked: {panic}"),
        (Some(Trap::StackOverflow), None) => "stack overflow".to_string(),
        // Rust and C keep their stack in linear memory: overflowing it runs off the bottom.
        (Some(Trap::MemoryOutOfBounds), None) => {
            format!(
                "{} (most often a stack overflow in the plugin)",
                Trap::MemoryOutOfBounds
            )
        }
        (Some(trap), None) => trap.to_string(),
        (None, None) => format!("{error:#}"),
    };
    // Python's traceback and JavaScript's error are written to stderr before the trap.
    let message = match stderr_tail(before_panic.unwrap_or(stderr)) {
        Some(tail) => format!("{message}; its stderr ended with:\n{tail}"),
        None => message,
    };
    RunError::Crashed { message }
}

/// An exception of the language a component was written in, as its author would read it,
/// without the toolchain's own frames: a JavaScript value thrown out of a function
/// (componentize-js reports that it could not convert it into the function's error variant,
/// naming what was thrown, then aborts), or a Python exception (componentize-py's runtime
/// prints the traceback, then panics at a line of its own source).
fn language_exception(stderr: &str) -> Option<String> {
    const JS_THROWN: &str = "(received `";
    const JS_END: &str = "`) specified for `";
    if let Some(start) = stderr.find(JS_THROWN) {
        let rest = &stderr[start + JS_THROWN.len()..];
        if let Some(end) = rest.find(JS_END) {
            let thrown = toolhost_contract::cut(&rest[..end], 2048, |_| "...".into());
            return Some(format!(
                "JavaScript exception: {} (a function of the world ends with its result or \
                 by throwing its error variant, e.g. `throw {{ tag: \"failed\", val: \
                 \"why\" }}`; anything else thrown is a crash)",
                toolhost_audit::redact_text(&thrown)
            ));
        }
    }
    const PY_TRACEBACK: &str = "Traceback (most recent call last):";
    if stderr.contains("Python function threw an unexpected exception")
        && let Some(start) = stderr.rfind(PY_TRACEBACK)
    {
        // Up to componentize-py's own panic, which follows the traceback.
        let traceback = &stderr[start..];
        let traceback = traceback
            .find("\nthread '")
            .map_or(traceback, |end| &traceback[..end]);
        let tail = stderr_tail(traceback)?;
        let last = tail.lines().last().unwrap_or_default().trim().to_string();
        return Some(format!("Python exception: {last}\n{tail}"));
    }
    None
}

/// The last lines of a plugin's stderr (at most 12 lines and 2 KiB, secrets redacted), for
/// the message of a crash.
fn stderr_tail(stderr: &str) -> Option<String> {
    const LINES: usize = 12;
    const BYTES: usize = 2048;
    let trimmed = stderr.trim_end();
    if trimmed.trim().is_empty() {
        return None;
    }
    let mut start = trimmed
        .rmatch_indices('\n')
        .nth(LINES - 1)
        .map_or(0, |(i, _)| i + 1);
    if trimmed.len() - start > BYTES {
        start = trimmed.len() - BYTES;
        while !trimmed.is_char_boundary(start) {
            start += 1;
        }
    }
    Some(toolhost_audit::redact_text(&trimmed[start..]))
}

/// The message of a Rust panic in captured stderr ("thread '..' panicked at FILE:\nMESSAGE\nnote: ..").
fn panic_message(stderr: &str) -> Option<String> {
    let start = stderr.find("panicked at ")?;
    let rest = &stderr[start + "panicked at ".len()..];
    let (place, message) = rest.split_once('\n')?;
    let message = message.split("\nnote: ").next().unwrap_or(message).trim();
    let place = place.trim_end_matches(':');
    Some(if message.is_empty() {
        format!("at {place}")
    } else {
        format!("{message} (at {place})")
    })
}

#[cfg(test)]
mod tests {
    use super::{language_exception, panic_message, stderr_tail};

    #[test]
    fn a_language_exception_is_told_without_the_toolchain() {
        // As componentize-js 0.23 writes it.
        let js = "invalid variant tag value `undefined` (received `ReferenceError: x is not \
                  defined`) specified for `ToolError` Stack:\n  export_tool_0_1_0$call@/tmp/a/\
                  sources/initializer.js:226:17\nRedirecting call to abort() to mozalloc_abort\n";
        let message = language_exception(js).expect("recognised");
        assert!(
            message.starts_with("JavaScript exception: ReferenceError: x is not defined ("),
            "{message}"
        );
        assert!(!message.contains("initializer.js") && !message.contains("mozalloc"));
        // As componentize-py 0.25 writes it.
        let py = "Traceback (most recent call last):\n  File \"/0/app.py\", line 20, in call\n\
                  ValueError: boom\n\nthread '<unnamed>' panicked at runtime/src/lib.rs:1293:29:\n\
                  Python function threw an unexpected exception\nnote: run with \
                  `RUST_BACKTRACE=1`\n";
        let message = language_exception(py).expect("recognised");
        assert_eq!(
            message,
            "Python exception: ValueError: boom\nTraceback (most recent call last):\n  File \
             \"/0/app.py\", line 20, in call\nValueError: boom"
        );
        // A Rust panic is not a language exception.
        assert_eq!(
            language_exception("thread 'main' panicked at src/lib.rs:1:1:\nboom\n"),
            None
        );
    }

    #[test]
    fn the_stderr_tail_is_its_last_lines_bounded_and_redacted() {
        assert_eq!(stderr_tail("  \n"), None);
        let traceback = "Traceback (most recent call last):\n  File \"app.py\", line 3\n\
            ModuleNotFoundError: No module named 'heapq'\n";
        assert_eq!(
            stderr_tail(traceback).as_deref(),
            Some(traceback.trim_end())
        );
        let many: String = (0..100).map(|i| format!("line {i}\n")).collect();
        let tail = stderr_tail(&many).expect("tail");
        assert!(
            tail.starts_with("line 88\n") && tail.ends_with("line 99"),
            "{tail}"
        );
        let long = "é".repeat(5000);
        assert!(stderr_tail(&long).expect("tail").len() <= 2048);
        let secret = stderr_tail("token sk-abcdefghijklmnopqrstuvwxyz leaked").expect("tail");
        assert!(!secret.contains("sk-abcdef"), "{secret}");
    }

    #[test]
    fn finds_the_panic_message() {
        let stderr = "\nthread '<unnamed>' panicked at src/lib.rs:77:24:\nboom\nnote: run with `RUST_BACKTRACE=1`\n";
        assert_eq!(
            panic_message(stderr).as_deref(),
            Some("boom (at src/lib.rs:77:24)")
        );
        assert_eq!(panic_message("nothing"), None);
    }
}
