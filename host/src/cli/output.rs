//! What the commands print on stdout, through [`outln!`] and [`out!`] instead of `println!`:
//! a reader that stops reading (`toolhost list | head -1`) ends the command quietly with
//! [`READER_GONE`], where `println!` would panic with "failed printing to stdout: Broken
//! pipe" and a backtrace.
//!
//! Rust starts a program with SIGPIPE ignored, so a write to a closed pipe fails with
//! `BrokenPipe` instead of killing the process. That is kept, not set back to the default:
//! the host writes to pipes and sockets of its own (its compile worker's stdin, an imported
//! server's stdin, clients' connections), where a peer that goes away must fail one call or
//! one connection, never end the host. Only the command's own stdout ends the command.

use std::io::Write;

/// The exit code of a command whose stdout was closed before it had printed everything:
/// 128 + SIGPIPE (13), what a shell reports for `yes | head -1`'s `yes`, and the project's
/// "128 + the signal" (docs/service.md).
pub(crate) const READER_GONE: u8 = 141;

/// Writes `text` to stdout; a closed stdout ends the process (see the module docs).
pub(crate) fn write(text: std::fmt::Arguments<'_>) {
    let mut stdout = std::io::stdout().lock();
    if let Err(error) = stdout.write_fmt(text) {
        end(&error);
    }
}

/// Writes out what stdout still buffers (a last line without its newline), with the same
/// ending as [`write`] when the reader has gone.
pub(crate) fn flush() {
    if let Err(error) = std::io::stdout().lock().flush() {
        end(&error);
    }
}

/// Whether `error` says that nobody reads stdout any more.
pub(crate) fn reader_gone(error: &std::io::Error) -> bool {
    error.kind() == std::io::ErrorKind::BrokenPipe
}

/// Ends the process after a failed write to stdout: quietly with [`READER_GONE`] when the
/// reader went away, else saying why (a full disk under `> file`), with 1, the work failed.
fn end(error: &std::io::Error) -> ! {
    if reader_gone(error) {
        std::process::exit(i32::from(READER_GONE));
    }
    super::logging::say(
        tracing::Level::ERROR,
        &format!("error: cannot write to stdout: {error}"),
    );
    std::process::exit(1)
}

/// `println!` that ends the command quietly when stdout's reader has gone.
macro_rules! outln {
    () => {
        crate::cli::output::write(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        crate::cli::output::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` that ends the command quietly when stdout's reader has gone.
macro_rules! out {
    ($($arg:tt)*) => {
        crate::cli::output::write(format_args!($($arg)*))
    };
}
