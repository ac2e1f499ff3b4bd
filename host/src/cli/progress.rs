//! Compiles in progress, shown on stderr while `check`, `list` or `call` waits for them: a
//! first compile of a Python or JavaScript component takes tens of seconds, and silence for
//! that long looks like a hang.

use std::convert::Infallible;
use std::io::{IsTerminal, Write};
use std::time::Duration;
use toolhost::runtime::Runtime;

/// A compile is shown once it has taken this long.
const SHOWN_AFTER: f64 = 1.0;
/// Without a terminal, a compile still running is shown again this often (seconds).
const EVERY: u64 = 10;

/// Shows the compiles that have run for over a second, until dropped: on a terminal one line
/// kept up to date, otherwise (or with JSON logs) a line when a compile passes a second and
/// every 10 s after.
pub(crate) async fn show_compiles(runtime: &Runtime) -> Infallible {
    let terminal = std::io::stderr().is_terminal() && !super::logging::is_json();
    let mut shown_at: std::collections::HashMap<std::path::PathBuf, u64> = Default::default();
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let mut drawn = false;
    loop {
        tick.tick().await;
        let slow: Vec<_> = runtime
            .compiles()
            .into_iter()
            .filter(|c| c.seconds >= SHOWN_AFTER)
            .collect();
        if terminal {
            let mut stderr = std::io::stderr().lock();
            if slow.is_empty() && !drawn {
                continue;
            }
            let line: Vec<String> = slow
                .iter()
                .map(|c| format!("{} ({:.0} s)", c.path.display(), c.seconds))
                .collect();
            let text = if line.is_empty() {
                String::new()
            } else {
                format!("compiling {}", line.join(", "))
            };
            let _ = write!(stderr, "\r\x1b[2K{}", super::terminal::safe(&text));
            let _ = stderr.flush();
            drawn = !line.is_empty();
            continue;
        }
        for compile in &slow {
            let seconds = compile.seconds as u64;
            let due = shown_at
                .get(&compile.path)
                .is_none_or(|last| seconds >= last + EVERY);
            if due {
                shown_at.insert(compile.path.clone(), seconds);
                let path = compile.path.display().to_string();
                super::logging::say(
                    tracing::Level::INFO,
                    &format!(
                        "still compiling {} ({seconds} s so far; once: later starts use the cache)",
                        super::terminal::safe(&path)
                    ),
                );
            }
        }
    }
}

/// Clears the line `show_compiles` keeps on a terminal.
pub(crate) fn clear() {
    let mut stderr = std::io::stderr();
    if stderr.is_terminal() && !super::logging::is_json() {
        let _ = write!(stderr, "\r\x1b[2K");
        let _ = stderr.flush();
    }
}
