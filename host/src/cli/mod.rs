//! cli: the `toolhost` command line (clap). The only place that prints for people and uses
//! `anyhow`; every command is a thin layer over the library.
//!
//! Exit codes: 0 success; 1 the work failed (`check` found errors, `call` ended in a typed
//! error, `chat` hit its iteration limit or its provider failed); 2 the command line was
//! wrong; 3 the host could not start (bad `toolhost.toml`, unreadable ensembles directory,
//! unusable cache directory, `chat` without a model or a key); 4 a shutdown (SIGTERM,
//! SIGINT) had to cancel calls at its drain deadline; 128 + N a second signal N ended it at
//! once (130 for SIGINT, 143 for SIGTERM). A first signal whose drain cancelled nothing
//! exits 0. A command whose stdout is closed before it has printed everything (`| head -1`)
//! ends quietly with 141, 128 + SIGPIPE ([`output`]). The table in docs/service.md says the
//! same.

// First: its macros are for every module below.
#[macro_use]
mod output;
mod access;
mod cache;
mod call;
mod chat;
mod check;
mod describe;
mod docs;
mod fleet;
mod host_file;
mod list;
mod logging;
mod login;
mod new;
mod oci;
mod offers;
mod progress;
mod serve;
mod service;
mod settings;
mod status;
mod telemetry;
mod terminal;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use toolhost::mcp::log::LogRelay;

/// A host for LLM tools: sandboxed WebAssembly components behind validated, deduplicated calls.
#[derive(Debug, Parser)]
#[command(name = "toolhost", version, about, propagate_version = true)]
pub(crate) struct Cli {
    /// Host settings file (default: ./toolhost.toml if it exists).
    #[arg(long, global = true, env = "TOOLHOST_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Directory of ensemble files (overrides [host] ensembles).
    #[arg(long, global = true, env = "TOOLHOST_ENSEMBLES", value_name = "DIR")]
    ensembles: Option<PathBuf>,
    /// Where compiled components are cached (overrides [host] cache-dir).
    #[arg(long, global = true, env = "TOOLHOST_CACHE_DIR", value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Compiled components no ensemble uses that `serve` keeps in the cache (overrides
    /// [host] cache-keep; default 8).
    #[arg(long, global = true, env = "TOOLHOST_CACHE_KEEP", value_name = "N")]
    cache_keep: Option<usize>,
    /// Compile every component on start, ignoring the cache.
    #[arg(long, global = true)]
    no_cache: bool,
    /// Append one JSON line per call to this file (overrides [host] audit).
    #[arg(long, global = true, env = "TOOLHOST_AUDIT", value_name = "FILE")]
    audit: Option<PathBuf>,
    /// Where `serve` publishes its status for `toolhost status` (overrides [host] status-file).
    #[arg(long, global = true, env = "TOOLHOST_STATUS_FILE", value_name = "FILE")]
    status_file: Option<PathBuf>,
    /// More log output on stderr (-v: info, -vv: debug, including plugins' stdout/stderr;
    /// -vvv: debug from the libraries too).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// How log lines on stderr are written: text, or one JSON object per line.
    #[arg(
        long,
        global = true,
        env = "TOOLHOST_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    log_format: logging::LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check every ensemble and invoker file, and every component they name; report every error.
    Check {
        /// Print a JSON report instead of text.
        #[arg(long)]
        json: bool,
    },
    /// List the tools: name, ensemble, enabled, component hash, description.
    List {
        /// Print JSON (with each tool's input schema and limits).
        #[arg(long)]
        json: bool,
        /// Only the tools IDENTITY may list and call under `[access]`: a static token's name
        /// (with its groups), or an access token's subject (with --scope and --group).
        #[arg(long = "as", value_name = "IDENTITY")]
        as_identity: Option<String>,
        /// A scope of the access token IDENTITY would present (repeatable).
        #[arg(long, value_name = "SCOPE", requires = "as_identity")]
        scope: Vec<String>,
        /// A group IDENTITY's access token would carry (repeatable).
        #[arg(long, value_name = "GROUP", requires = "as_identity")]
        group: Vec<String>,
    },
    /// Call one tool and print its result.
    Call {
        /// The tool's name, as `toolhost list` shows it.
        tool: String,
        /// The arguments: a JSON object, or `-` to read it from stdin.
        #[arg(default_value = "{}")]
        arguments: String,
        /// Print the outcome as JSON (result or typed error, deduplicated, duration).
        #[arg(long)]
        json: bool,
    },
    /// Render a prompt an ensemble offers: its messages for the arguments given, as an MCP
    /// client's `prompts/get` gets them (checked and audited the same way).
    Prompt {
        /// The prompt's name, as `toolhost list` shows it.
        name: String,
        /// One argument (repeat for more).
        #[arg(long = "arg", value_name = "NAME=VALUE")]
        arguments: Vec<String>,
        /// Print the messages as JSON, each content item in MCP's form.
        #[arg(long)]
        json: bool,
    },
    /// Read a resource an ensemble offers, by its URI, as an MCP client's `resources/read`
    /// reads it (checked and audited the same way).
    Read {
        /// The resource's URI (`toolhost list` shows each set's prefix or template).
        uri: String,
        /// Print the contents as JSON (text, or a blob in base64).
        #[arg(long)]
        json: bool,
    },
    /// Serve the tools over MCP: stdio by default, streamable HTTP with --http. Reloads
    /// ensembles and components as they change.
    Serve {
        /// Serve streamable HTTP on this address (e.g. 127.0.0.1:8750) at /mcp instead of stdio.
        #[arg(long, value_name = "IP:PORT")]
        http: Option<String>,
        /// Require `Authorization: Bearer <value of VAR>` on HTTP (needed to bind beyond loopback).
        #[arg(long, value_name = "VAR")]
        token_env: Option<String>,
        /// Do not watch files: serve what was loaded at start.
        #[arg(long)]
        no_watch: bool,
        /// Serve the web page at / on a non-loopback address too (it is on by default on
        /// loopback); the chat API under /api is served either way.
        #[arg(long, conflicts_with = "no_ui")]
        ui: bool,
        /// Do not serve the web page at / (the chat API stays).
        #[arg(long)]
        no_ui: bool,
    },
    /// Let a model use the tools to do what PROMPT asks: the agent loop, over several steps.
    Chat(Box<chat::ChatOptions>),
    /// Write a plugin project (source, WIT, build script, ensemble) that builds and answers
    /// `toolhost call` as written.
    New {
        /// The project's name ([a-z0-9-]): its folder, ensemble and component.
        #[arg(value_parser = new::project_name)]
        name: String,
        /// The language to write it in.
        #[arg(long, value_enum, default_value = "rust")]
        lang: new::Lang,
        /// Write it here instead of ./NAME.
        #[arg(long, value_name = "DIR")]
        dir: Option<std::path::PathBuf>,
    },
    /// Resolve and fetch every `oci://` component the ensembles name (or one REFERENCE) into
    /// the content store, so that the host starts, checks and reloads without the registry.
    Pull {
        /// One reference to pull instead (`oci://REGISTRY/REPOSITORY:TAG` or `@sha256:...`).
        reference: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Publish a component to an OCI registry, in the Wasm artifact layout wkg and Spin use.
    Push {
        /// The component file (.wasm).
        file: std::path::PathBuf,
        /// Where: `oci://REGISTRY/REPOSITORY:TAG`.
        reference: String,
        /// Sign it with this cosign private key (`cosign.key`; its password in
        /// COSIGN_PASSWORD), publishing the signature beside it.
        #[arg(long, value_name = "KEY")]
        sign: Option<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Manage the compile cache.
    #[command(subcommand)]
    Cache(CacheCommand),
    /// Say what a component is: its world, imports, tools and schemas, and an ensemble to paste.
    Describe {
        /// The component file (.wasm).
        file: std::path::PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Put the WIT doc comments of DIR into a typed component, as its `package-docs`
    /// section: the tools' descriptions (cargo with wit-bindgen leaves them out).
    AddDocs {
        /// The component file (.wasm), rewritten in place unless --output is given.
        file: std::path::PathBuf,
        /// The WIT folder (or file) the component was built from.
        #[arg(long, value_name = "DIR")]
        wit: std::path::PathBuf,
        /// Write the component here instead.
        #[arg(long, short, value_name = "FILE")]
        output: Option<std::path::PathBuf>,
    },
    /// Show what the running `toolhost serve` loaded, when, with which hashes, and what failed.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Sign this host in to the server ENSEMBLE imports, which a person signs in to
    /// (`oauth = { sign-in = true }`): prints the URL to open, takes the redirect back on a
    /// loopback port, and keeps the tokens in the host's state folder (mode 0600).
    Login {
        /// The ensemble that imports the server.
        ensemble: String,
    },
    /// Sign out: revoke the sign-in at the authorization server (where it offers revocation)
    /// and forget the tokens `toolhost login ENSEMBLE` kept.
    Logout {
        /// The ensemble that imports the server.
        ensemble: String,
    },
    /// (Internal) compile the component on stdin under limits, for the host that runs this.
    #[command(hide = true)]
    CompileWorker {
        #[arg(long)]
        memory_mib: u64,
        #[arg(long)]
        cpu_seconds: u64,
        /// The compiler: `cranelift` (optimizing) or `winch` (baseline, the first tier).
        #[arg(long, default_value = "cranelift")]
        tier: String,
    },
}

/// `toolhost cache ...`.
#[derive(Debug, Subcommand)]
enum CacheCommand {
    /// Remove the compiled components no ensemble uses (`serve` keeps the most recent few).
    Prune {
        /// Keep this many of them, the most recently used.
        #[arg(long, default_value_t = 0)]
        keep: usize,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Parses the command line, runs the command, and maps the outcome to an exit code.
pub(crate) fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // Help and version (0) on stdout, a usage error (2) on stderr: as clap's own `exit`
        // does, but a reader gone from `toolhost --help | head -1` ends as any command's.
        Err(e) => {
            let code = match e.print() {
                Err(error) if output::reader_gone(&error) => output::READER_GONE,
                _ => u8::try_from(e.exit_code()).unwrap_or(2),
            };
            return ExitCode::from(code);
        }
    };
    if let Command::CompileWorker {
        memory_mib,
        cpu_seconds,
        tier,
    } = &cli.command
    {
        let Some(tier) = toolhost::runtime::Tier::from_name(tier) else {
            eprintln!("unknown compiler tier `{tier}` (cranelift or winch)");
            return ExitCode::from(2);
        };
        // No logging, no async runtime: the worker does one thing under its limits.
        let code = toolhost::runtime::worker_main(*memory_mib, *cpu_seconds, tier);
        return ExitCode::from(code.clamp(0, 255) as u8);
    }
    // Traces, if the environment or `[telemetry]` names a collector: made before the async
    // runtime (the exporter's blocking client has a runtime of its own) and flushed when
    // dropped, last.
    let from_file = (settings::config_path(&cli).as_deref())
        .and_then(host_file::telemetry)
        .unwrap_or_default();
    let telemetry = match telemetry::start(&from_file) {
        Ok(telemetry) => telemetry,
        Err(e) => {
            logging::say(tracing::Level::ERROR, &format!("error: {e}"));
            return ExitCode::from(2);
        }
    };
    let logs = logging::init(cli.verbose, cli.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            logging::say(
                tracing::Level::ERROR,
                &format!("error: cannot start the async runtime: {e}"),
            );
            return ExitCode::from(3);
        }
    };
    let code = match runtime.block_on(run(cli, logs)) {
        Ok(code) => code,
        Err(e) => {
            // Diagnostics say `error:` themselves, each at its place; a dependency's type paths
            // are no one's business.
            let text = format!("{e:#}");
            let text = toolhost::contract::without_type_paths(&text);
            match text.strip_prefix('\n') {
                Some(diagnostics) => logging::say(tracing::Level::ERROR, diagnostics.trim_end()),
                None => logging::say(tracing::Level::ERROR, &format!("error: {text}")),
            }
            ExitCode::from(3)
        }
    };
    // The work is done: tasks still running are dropped, and a thread blocked reading stdin
    // (an MCP client that keeps it open) must not keep the process alive.
    runtime.shutdown_background();
    output::flush();
    drop(telemetry);
    code
}

async fn run(cli: Cli, logs: LogRelay) -> anyhow::Result<ExitCode> {
    let settings = settings::Settings::from_cli(&cli)?;
    match cli.command {
        Command::Check { json } => check::run(&settings, json).await,
        Command::List {
            json,
            as_identity,
            scope,
            group,
        } => {
            let identity = as_identity.map(|name| list::Identity {
                name,
                scopes: scope,
                groups: group,
            });
            list::run(&settings, json, identity).await
        }
        Command::Call {
            tool,
            arguments,
            json,
        } => call::run(&settings, &tool, &arguments, json).await,
        Command::Prompt {
            name,
            arguments,
            json,
        } => offers::prompt(&settings, &name, &arguments, json).await,
        Command::Read { uri, json } => offers::read(&settings, &uri, json).await,
        Command::Serve {
            http,
            token_env,
            no_watch,
            ui,
            no_ui,
        } => {
            let options = serve::ServeOptions {
                http,
                token_env,
                no_watch,
                page: match (ui, no_ui) {
                    (true, _) => Some(true),
                    (_, true) => Some(false),
                    _ => None,
                },
            };
            serve::run(&settings, options, logs).await
        }
        Command::Chat(options) => chat::run(&settings, *options).await,
        Command::Pull { reference, json } => oci::pull(&settings, reference.as_deref(), json).await,
        Command::Push {
            file,
            reference,
            sign,
            json,
        } => oci::push(&settings, &file, &reference, sign.as_deref(), json).await,
        Command::Status { json } => status::run(&settings, json),
        Command::Login { ensemble } => login::login(&settings, &ensemble).await,
        Command::Logout { ensemble } => login::logout(&settings, &ensemble).await,
        Command::Cache(CacheCommand::Prune { keep, json }) => {
            cache::prune(&settings, keep, json).await
        }
        Command::New { name, lang, dir } => new::run(&name, lang, dir.as_deref()),
        Command::Describe { file, json } => describe::run(&settings, &file, json).await,
        Command::AddDocs { file, wit, output } => docs::run(&file, &wit, output.as_deref()),
        Command::CompileWorker { .. } => unreachable_worker(),
    }
}

/// `compile-worker` is dispatched in [`main`] before anything starts.
fn unreachable_worker() -> anyhow::Result<ExitCode> {
    anyhow::bail!("compile-worker runs on its own, not inside another command")
}

/// `value`, or all of stdin when it is `-`; `what` names it in the error.
fn value_or_stdin(value: &str, what: &str) -> anyhow::Result<String> {
    use anyhow::Context;
    use std::io::Read;
    if value != "-" {
        return Ok(value.to_string());
    }
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .with_context(|| format!("cannot read {what} from stdin"))?;
    Ok(text)
}
