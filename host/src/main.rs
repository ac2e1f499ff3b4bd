//! The `toolhost` command. See `cli` for the commands; the library does the work.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
