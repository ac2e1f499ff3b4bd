//! Tools that misbehave on purpose, and tools that observe the sandbox, for the test suite.
//! Every tool takes a JSON object; see `call` for the arguments each one reads.

wit_bindgen::generate!({
    path: "../../../wit/toolhost-plugin-0.1.0",
    world: "plugin",
});

use exports::toolhost::plugin::tool::{Guest, ToolError, ToolSpec};
use serde_json::{Value, json};
use std::io::Write;
use toolhost::plugin::host::{LogLevel, log};

struct Testbed;

const TOOLS: &[(&str, &str)] = &[
    ("spin", "Loop forever."),
    ("grow", "Allocate memory without bound."),
    (
        "recurse",
        "Recurse without bound until the stack overflows.",
    ),
    ("panic", "Panic with the message in `message`."),
    ("big_output", "Return a string of `bytes` bytes."),
    (
        "flood_stdout",
        "Write `bytes` bytes to stdout and stderr, then return \"done\".",
    ),
    ("log_flood", "Call host.log `count` times."),
    ("log", "Write `message` to host.log at warning level."),
    (
        "header_flood",
        "Make wasi:http header fields of `bytes` bytes each and keep them all, until refused.",
    ),
    ("read", "Read the file at `path`."),
    ("write", "Write `text` to the file at `path`."),
    ("list", "List the directory at `path`."),
    ("env", "Return the environment the component sees."),
    ("sleep", "Sleep `ms` milliseconds, then return."),
    (
        "count",
        "Append a line to `path` (a granted read-write file), sleep `sleep_ms` if given, and return how many lines it has.",
    ),
    (
        "wait_for",
        "Wait until the file at `path` exists (up to `ms` milliseconds), then return its text.",
    ),
    ("fail", "Return a tool error of the plugin's own."),
    ("fail_big", "Return a tool error of `bytes` bytes."),
    ("say", "Return `text` as it is."),
    (
        "mark",
        "Try to leave `secret` for the next call (in its memory and its environment) and say what an earlier call left.",
    ),
    ("connect", "Open a TCP connection to `address` (host:port) and write a line to it."),
    ("udp_send", "Send a UDP datagram to `address`."),
    ("resolve", "Look up the addresses of `name` (host:port) through DNS."),
    (
        "http_flood",
        "Send `count` wasi:http GET requests to http://`authority`/, one after another, and fail if any of them did.",
    ),
];

/// What one call of `mark` leaves behind: a count and a secret in linear memory, and the
/// secret in the environment. A later call in the same instance would see all three.
static MARKS: std::sync::Mutex<(u32, Option<String>)> = std::sync::Mutex::new((0, None));

fn mark(secret: &str) -> String {
    let mut marks = MARKS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let seen = json!({
        "calls_before": marks.0,
        "secret_before": marks.1,
        "env_before": std::env::var("TESTBED_MARK").ok(),
    });
    marks.0 += 1;
    marks.1 = Some(secret.to_string());
    // SAFETY: a component instance has one thread; nothing reads the environment at once.
    unsafe { std::env::set_var("TESTBED_MARK", secret) };
    println!("left {secret}");
    seen.to_string()
}

fn arg<'a>(args: &'a Value, key: &str) -> &'a Value {
    args.get(key).unwrap_or(&Value::Null)
}

fn io(e: std::io::Error) -> ToolError {
    ToolError::Failed(e.to_string())
}

impl Guest for Testbed {
    fn describe() -> Vec<ToolSpec> {
        TOOLS
            .iter()
            .map(|(name, description)| ToolSpec {
                name: (*name).into(),
                description: (*description).into(),
                input_schema: r#"{"type":"object"}"#.into(),
            })
            .collect()
    }

    fn call(name: String, arguments: String) -> Result<String, ToolError> {
        let args: Value = serde_json::from_str(&arguments)
            .map_err(|e| ToolError::InvalidArguments(e.to_string()))?;
        let path = arg(&args, "path").as_str().unwrap_or("");
        match name.as_str() {
            "spin" => {
                let mut x: u64 = 0;
                loop {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            }
            "grow" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 1 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            "recurse" => Ok(recurse(std::hint::black_box(1)).to_string()),
            "panic" => panic!("{}", arg(&args, "message").as_str().unwrap_or("boom")),
            "big_output" => Ok("x".repeat(arg(&args, "bytes").as_u64().unwrap_or(0) as usize)),
            "flood_stdout" => {
                let total = arg(&args, "bytes").as_u64().unwrap_or(0) as usize;
                let chunk = vec![b'o'; 65536];
                let mut written = 0;
                while written < total {
                    let n = chunk.len().min(total - written);
                    // Errors are ignored: a host may close the stream once its cap is reached.
                    let _ = std::io::stdout().write_all(&chunk[..n]);
                    let _ = std::io::stderr().write_all(&chunk[..n]);
                    written += n;
                }
                Ok("done".into())
            }
            "log_flood" => {
                for i in 0..arg(&args, "count").as_u64().unwrap_or(0) {
                    log(LogLevel::Warn, &format!("log line {i}"));
                }
                Ok("logged".into())
            }
            "header_flood" => {
                let value = vec![b'x'; arg(&args, "bytes").as_u64().unwrap_or(8000) as usize];
                let mut kept = Vec::new();
                loop {
                    let fields = wasip2::http::types::Fields::new();
                    if fields.append("x-flood", &value).is_err() {
                        return Ok(format!("refused after {}", kept.len()));
                    }
                    kept.push(fields);
                }
            }
            "say" => Ok(arg(&args, "text").as_str().unwrap_or("").to_string()),
            "mark" => Ok(mark(arg(&args, "secret").as_str().unwrap_or(""))),
            "fail_big" => Err(ToolError::Failed(
                "e".repeat(arg(&args, "bytes").as_u64().unwrap_or(0) as usize),
            )),
            "log" => {
                log(LogLevel::Warn, arg(&args, "message").as_str().unwrap_or(""));
                Ok("logged".into())
            }
            "read" => std::fs::read_to_string(path).map_err(io),
            "write" => std::fs::write(path, arg(&args, "text").as_str().unwrap_or(""))
                .map(|_| "written".into())
                .map_err(io),
            "list" => {
                let mut names: Vec<String> = std::fs::read_dir(path)
                    .map_err(io)?
                    .filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect();
                names.sort();
                Ok(json!(names).to_string())
            }
            "env" => Ok(json!(std::env::vars().collect::<Vec<_>>()).to_string()),
            "sleep" => {
                std::thread::sleep(std::time::Duration::from_millis(
                    arg(&args, "ms").as_u64().unwrap_or(0),
                ));
                Ok(json!({ "slept_ms": arg(&args, "ms") }).to_string())
            }
            "count" => {
                let mut file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(io)?;
                file.write_all(b"run\n").map_err(io)?;
                drop(file);
                // After the line is written, so a test can see that the call is running.
                if let Some(ms) = arg(&args, "sleep_ms").as_u64() {
                    std::thread::sleep(std::time::Duration::from_millis(ms));
                }
                let lines = std::fs::read_to_string(path).map_err(io)?.lines().count();
                Ok(json!({ "runs": lines, "args": args }).to_string())
            }
            "wait_for" => {
                // Proves two calls run at once: this one ends only when another writes `path`.
                let deadline = std::time::Instant::now()
                    + std::time::Duration::from_millis(arg(&args, "ms").as_u64().unwrap_or(0));
                loop {
                    if let Ok(text) = std::fs::read_to_string(path) {
                        return Ok(text);
                    }
                    if std::time::Instant::now() >= deadline {
                        return Err(ToolError::Failed(format!("{path} did not appear")));
                    }
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
            }
            "fail" => Err(ToolError::Failed("the tool failed on purpose".into())),
            "connect" => {
                let address = arg(&args, "address").as_str().unwrap_or("");
                let mut stream = std::net::TcpStream::connect(address).map_err(io)?;
                stream.write_all(b"hello from the sandbox\n").map_err(io)?;
                Ok("connected".into())
            }
            "udp_send" => {
                let address = arg(&args, "address").as_str().unwrap_or("");
                let socket = std::net::UdpSocket::bind("0.0.0.0:0").map_err(io)?;
                socket.send_to(b"hello", address).map_err(io)?;
                Ok("sent".into())
            }
            "resolve" => {
                use std::net::ToSocketAddrs;
                let name = arg(&args, "name").as_str().unwrap_or("");
                let found: Vec<String> = name.to_socket_addrs().map_err(io)?.map(|a| a.to_string()).collect();
                Ok(json!(found).to_string())
            }
            "http_flood" => {
                use wasip2::http::outgoing_handler::handle;
                use wasip2::http::types::{Fields, OutgoingRequest, Scheme};
                let authority = arg(&args, "authority").as_str().unwrap_or("");
                let mut failed = 0;
                for _ in 0..arg(&args, "count").as_u64().unwrap_or(1) {
                    let request = OutgoingRequest::new(Fields::new());
                    let _ = request.set_scheme(Some(&Scheme::Http));
                    let _ = request.set_authority(Some(authority));
                    let _ = request.set_path_with_query(Some("/hello"));
                    let answered = handle(request, None).ok().and_then(|response| {
                        response.subscribe().block();
                        response.get().and_then(|r| r.ok()).and_then(|r| r.ok())
                    });
                    if answered.is_none() {
                        failed += 1;
                    }
                }
                if failed > 0 {
                    return Err(ToolError::Failed(format!("{failed} requests failed")));
                }
                Ok("every request was answered".into())
            }
            other => Err(ToolError::Failed(format!("no tool {other}"))),
        }
    }
}

// Unbounded on purpose: this is the stack-overflow attack.
#[allow(unconditional_recursion)]
#[inline(never)]
fn recurse(depth: u64) -> u64 {
    let pad = std::hint::black_box([depth; 64]);
    recurse(depth + 1).wrapping_add(pad[(depth % 64) as usize])
}

export!(Testbed);
