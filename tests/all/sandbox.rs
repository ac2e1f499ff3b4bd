//! The sandbox and the limits hold against a plugin that misbehaves on purpose (`testbed`),
//! and a normal call works right after each attack.

use crate::support::{Fixture, ensemble, err, ok, session};
use serde_json::json;
use toolhost::invoke::{ErrorKind, Host};

/// An ensemble over `testbed` with every tool as an invoker, and the given limits.
fn testbed(limits: &str, extra: &str) -> String {
    let tools = [
        "spin",
        "grow",
        "recurse",
        "panic",
        "big_output",
        "flood_stdout",
        "log_flood",
        "read",
        "write",
        "list",
        "env",
        "sleep",
        "fail",
    ];
    let invokers: String = tools
        .iter()
        .map(|t| format!("[[invokers]]\ninvoker = {{ name = \"{t}\" }}\n\n"))
        .collect();
    ensemble(
        "testbed",
        "testbed",
        &format!("[defaults]\n{limits}\ndedup = \"off\"\n\n{extra}\n{invokers}"),
    )
}

async fn host_with(limits: &str) -> (Fixture, Host) {
    let fixture = Fixture::new();
    fixture.write("testbed.toml", &testbed(limits, ""));
    fixture.write_echo();
    let host = fixture.host().await;
    (fixture, host)
}

/// A normal tool still answers.
async fn still_serving(host: &Host) {
    let outcome = host
        .invoke(&session(), "echo", json!({"text": "still here"}))
        .await;
    assert_eq!(ok(&outcome), r#"{"text":"still here"}"#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_loop_ends_at_its_timeout_and_the_next_call_works() {
    let (_fixture, host) = host_with("timeout-ms = 200").await;
    let outcome = host.invoke(&session(), "spin", json!({})).await;
    let error = err(&outcome);
    assert_eq!(error.kind, ErrorKind::Timeout);
    assert!(error.message.contains("200 ms"), "{}", error.message);
    still_serving(&host).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_blocked_in_a_host_sleep_also_times_out() {
    let (_fixture, host) = host_with("timeout-ms = 200").await;
    // Had the sleep not been cut short, the call would have succeeded after a minute.
    let error = err(&host
        .invoke(&session(), "sleep", json!({"ms": 60_000}))
        .await);
    assert_eq!(error.kind, ErrorKind::Timeout);
    still_serving(&host).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_bomb_hits_the_memory_limit() {
    let (_fixture, host) = host_with("memory-mib = 32").await;
    let error = err(&host.invoke(&session(), "grow", json!({})).await);
    assert_eq!(error.kind, ErrorKind::ResourceLimit, "{}", error.message);
    assert!(
        error.message.contains("memory limit of 32 MiB"),
        "{}",
        error.message
    );
    still_serving(&host).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stack_overflow_is_a_crash() {
    let (_fixture, host) = host_with("").await;
    let error = err(&host.invoke(&session(), "recurse", json!({})).await);
    assert_eq!(error.kind, ErrorKind::Crashed);
    // The shadow stack lives in linear memory, so Rust overflows it into an out-of-bounds access.
    assert!(
        error.message.contains("stack overflow"),
        "{}",
        error.message
    );
    still_serving(&host).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_becomes_crashed_with_its_message() {
    let (_fixture, host) = host_with("").await;
    let error = err(&host
        .invoke(
            &session(),
            "panic",
            json!({"message": "the plugin gave up"}),
        )
        .await);
    assert_eq!(error.kind, ErrorKind::Crashed);
    assert!(
        error.message.contains("panicked: the plugin gave up"),
        "{}",
        error.message
    );
    still_serving(&host).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_over_the_limit_is_a_resource_limit() {
    let (_fixture, host) = host_with("max-output-bytes = 1000\nmemory-mib = 256").await;
    let fits = host
        .invoke(&session(), "big_output", json!({"bytes": 1000}))
        .await;
    assert_eq!(ok(&fits).len(), 1000);
    let error = err(&host
        .invoke(&session(), "big_output", json!({"bytes": 64 << 20}))
        .await);
    assert_eq!(error.kind, ErrorKind::ResourceLimit);
    assert!(
        error.message.contains("limit of 1000 bytes"),
        "{}",
        error.message
    );
    still_serving(&host).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_stdout_is_capped_and_never_reaches_the_hosts_stdout() {
    let (_fixture, host) = host_with("timeout-ms = 20000").await;
    // 64 MiB each to stdout and stderr; the capture keeps 64 KiB and drops the rest.
    let outcome = host
        .invoke(&session(), "flood_stdout", json!({"bytes": 64 << 20}))
        .await;
    assert_eq!(ok(&outcome), "done");
    still_serving(&host).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_log_calls_is_dropped_past_the_budget() {
    let (_fixture, host) = host_with("").await;
    let outcome = host
        .invoke(&session(), "log_flood", json!({"count": 100_000}))
        .await;
    assert_eq!(ok(&outcome), "logged");
    still_serving(&host).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_grant_no_file_is_reachable() {
    let (_fixture, host) = host_with("").await;
    for path in ["/etc/passwd", "/", ".", "../etc/passwd", "/data/x"] {
        let error = err(&host
            .invoke(&session(), "read", json!({ "path": path }))
            .await);
        assert_eq!(
            error.kind,
            ErrorKind::ToolError,
            "{path}: {}",
            error.message
        );
        let listing = host
            .invoke(&session(), "list", json!({ "path": path }))
            .await;
        assert!(
            listing.result.is_err(),
            "listing {path} worked: {:?}",
            listing.result
        );
    }
    still_serving(&host).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_directory_is_readable_and_nothing_outside_it_is() {
    let fixture = Fixture::new();
    let data = fixture.mkdir("data");
    std::fs::write(data.join("inside.txt"), "inside").expect("write");
    std::fs::write(fixture.root().join("outside.txt"), "outside").expect("write");
    std::os::unix::fs::symlink(fixture.root().join("outside.txt"), data.join("escape"))
        .expect("symlink");
    std::os::unix::fs::symlink("/etc", data.join("etc")).expect("symlink");
    let grants =
        "[grants]\nfiles = [{ host = \"../data\", guest = \"/data\", access = \"read\" }]\n";
    let invokers = ["read", "write", "list"]
        .iter()
        .map(|t| format!("[[invokers]]\ninvoker = {{ name = \"{t}\" }}\ncapabilities = {{ files = [{{ guest = \"/data\", access = \"read\" }}] }}\n"))
        .collect::<String>();
    fixture.write(
        "testbed.toml",
        &ensemble("testbed", "testbed", &format!("{grants}\n{invokers}")),
    );
    let host = fixture.host().await;
    let s = session();
    assert_eq!(
        ok(&host
            .invoke(&s, "read", json!({"path": "/data/inside.txt"}))
            .await),
        "inside"
    );
    assert_eq!(
        ok(&host.invoke(&s, "list", json!({"path": "/data"})).await),
        r#"["escape","etc","inside.txt"]"#
    );
    for path in [
        "/data/../outside.txt",
        "/data/escape",
        "/data/etc/passwd",
        "/outside.txt",
        "/etc/passwd",
    ] {
        let error = err(&host.invoke(&s, "read", json!({ "path": path })).await);
        assert_eq!(error.kind, ErrorKind::ToolError, "{path} was readable");
    }
    let error = err(&host
        .invoke(&s, "write", json!({"path": "/data/new.txt", "text": "x"}))
        .await);
    assert_eq!(
        error.kind,
        ErrorKind::ToolError,
        "a read-only grant allowed a write"
    );
    assert!(!data.join("new.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_write_grant_allows_writes_inside_only() {
    let fixture = Fixture::new();
    let data = fixture.mkdir("data");
    let grants =
        "[grants]\nfiles = [{ host = \"../data\", guest = \"/data\", access = \"read-write\" }]\n";
    let invoker = "[[invokers]]\ninvoker = { name = \"write\" }\ncapabilities = { files = [{ guest = \"/data\", access = \"read-write\" }] }\n";
    fixture.write(
        "testbed.toml",
        &ensemble("testbed", "testbed", &format!("{grants}\n{invoker}")),
    );
    let host = fixture.host().await;
    let s = session();
    assert_eq!(
        ok(&host
            .invoke(
                &s,
                "write",
                json!({"path": "/data/new.txt", "text": "hello"})
            )
            .await),
        "written"
    );
    assert_eq!(
        std::fs::read_to_string(data.join("new.txt")).expect("written"),
        "hello"
    );
    let error = err(&host
        .invoke(
            &s,
            "write",
            json!({"path": "/data/../escaped.txt", "text": "x"}),
        )
        .await);
    assert_eq!(error.kind, ErrorKind::ToolError);
    assert!(!fixture.root().join("escaped.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_made_below_a_grant_after_load_is_not_followed() {
    // Instantiated for the call, and prepared before it (an instance made while the
    // directory was still one must not be used once it is a link).
    for prepared in [0, 1] {
        a_link_made_below_a_grant_is_refused(prepared).await;
    }
}

async fn a_link_made_below_a_grant_is_refused(prepared: u32) {
    // `/data` is granted read-write to one invoker and `/data/reports` read-only to another.
    // A tool with the first could replace `reports` by a link to `/`; the second must not
    // then see the host's root.
    let fixture = Fixture::new();
    let data = fixture.mkdir("data");
    std::fs::create_dir(data.join("reports")).expect("reports");
    std::fs::write(data.join("reports/q1.txt"), "fine").expect("q1");
    let rest = format!(
        "[defaults]\nprepared = {prepared}\n\n\
         [grants]\nfiles = [{{ host = \"../data\", guest = \"/data\", access = \"read-write\" }}]\n\n\
         [[invokers]]\ninvoker = {{ name = \"list\", dedup = \"off\" }}\n\
         capabilities = {{ files = [{{ guest = \"/data/reports\", access = \"read\" }}] }}\n"
    );
    fixture.write("testbed.toml", &ensemble("testbed", "testbed", &rest));
    let host = fixture.host().await;
    host.catalog().snapshot().fill_stocks();
    let s = session();
    assert!(
        ok(&host
            .invoke(&s, "list", json!({"path": "/data/reports"}))
            .await)
        .contains("q1.txt")
    );
    if prepared > 0 {
        // The call's replacement is prepared while `reports` is still a directory.
        let tool = host
            .catalog()
            .snapshot()
            .get("list")
            .cloned()
            .expect("list");
        let stock = tool.policy().stock.clone().expect("a stock");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while stock.state().ready == 0 {
            assert!(std::time::Instant::now() < deadline, "never prepared");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    std::fs::rename(data.join("reports"), data.join("old")).expect("move away");
    std::os::unix::fs::symlink("../../../../../../../..", data.join("reports")).expect("link");
    let error = err(&host
        .invoke(&s, "list", json!({"path": "/data/reports"}))
        .await);
    assert_eq!(error.kind, ErrorKind::Unavailable, "{error:?}");
    assert!(error.message.contains("symbolic link"), "{}", error.message);

    // Loading the catalog again refuses the link outright.
    let resolved = fixture.resolve().await;
    let errors: Vec<String> = resolved.diagnostics().map(|d| d.to_string()).collect();
    assert!(
        errors
            .iter()
            .any(|e| e.contains("which is a symbolic link")),
        "{errors:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_environment_is_invisible_unless_granted() {
    // SAFETY of set_var: the variable is unique to this test and only read by the resolver.
    unsafe { std::env::set_var("TOOLHOST_TEST_GRANTED", "visible") };
    unsafe { std::env::set_var("TOOLHOST_TEST_SECRET", "hidden") };
    let fixture = Fixture::new();
    let rest = "[grants]\nenv = [\"TOOLHOST_TEST_GRANTED\"]\n\n\
        [[invokers]]\ninvoker = { name = \"env\" }\n\n\
        [[invokers]]\ninvoker = { name = \"granted_env\", tool = \"env\" }\ncapabilities = { env = [\"TOOLHOST_TEST_GRANTED\"] }\n";
    fixture.write("testbed.toml", &ensemble("testbed", "testbed", rest));
    let host = fixture.host().await;
    assert_eq!(ok(&host.invoke(&session(), "env", json!({})).await), "[]");
    assert_eq!(
        ok(&host.invoke(&session(), "granted_env", json!({})).await),
        r#"[["TOOLHOST_TEST_GRANTED","visible"]]"#
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugins_own_error_is_a_tool_error() {
    let (_fixture, host) = host_with("").await;
    let error = err(&host.invoke(&session(), "fail", json!({})).await);
    assert_eq!(error.kind, ErrorKind::ToolError);
    assert_eq!(error.message, "the tool failed on purpose");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sockets_and_name_lookups_are_closed() {
    let fixture = Fixture::new();
    let rest = "[[invokers]]\ninvoker = { name = \"connect\" }\n\n[[invokers]]\ninvoker = { name = \"udp_send\" }\n\n\
        [[invokers]]\ninvoker = { name = \"resolve\" }\n";
    fixture.write("net.toml", &ensemble("net", "testbed", rest));
    fixture.write_echo();
    let host = fixture.host().await;
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    tcp.set_nonblocking(true).expect("nonblocking");
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").expect("udp");
    udp.set_nonblocking(true).expect("nonblocking");
    let tcp_address = tcp.local_addr().expect("address").to_string();
    let udp_address = udp.local_addr().expect("address").to_string();

    for (tool, args) in [
        ("connect", json!({ "address": tcp_address })),
        ("connect", json!({ "address": "192.0.2.1:80" })),
        ("udp_send", json!({ "address": udp_address })),
        ("resolve", json!({ "name": "localhost:80" })),
    ] {
        let error = err(&host.invoke(&session(), tool, args.clone()).await);
        assert_eq!(
            error.kind,
            ErrorKind::ToolError,
            "{tool} {args}: {}",
            error.message
        );
        assert!(
            !error.message.starts_with("no tool"),
            "the testbed is stale: {}",
            error.message
        );
    }
    // Nothing arrived on the host's side.
    assert!(tcp.accept().is_err(), "a TCP connection got through");
    assert!(
        udp.recv(&mut [0u8; 16]).is_err(),
        "a UDP datagram got through"
    );
    still_serving(&host).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defaults_capabilities_give_the_tools_offered_without_invokers_their_directory() {
    // A typed Rust component (no `describe`, every export a tool), no [[invokers]] written.
    let fixture = Fixture::new();
    let data = fixture.root().join("data");
    std::fs::create_dir_all(&data).expect("data");
    std::fs::write(data.join("note.txt"), "granted once, for every tool").expect("note");
    let grants =
        "[grants]\nfiles = [{ host = \"../data\", guest = \"/data\", access = \"read\" }]\n";
    // One ensemble names the capability once; the other does not (its grant gives nothing).
    fixture.write(
        "offered.toml",
        &ensemble(
            "offered",
            "typed",
            &format!(
                "prefix = \"offered\"\n\n[defaults]\n\
                 capabilities = {{ files = [{{ guest = \"/data\", access = \"read\" }}] }}\n\n{grants}"
            ),
        ),
    );
    fixture.write(
        "bare.toml",
        &ensemble("bare", "typed", &format!("prefix = \"bare\"\n\n{grants}")),
    );
    let host = fixture.host().await;
    let s = session();
    let read = |tool: &'static str| {
        let (host, s) = (&host, &s);
        async move {
            host.invoke(s, tool, json!({"path": "/data/note.txt"}))
                .await
        }
    };
    assert_eq!(
        ok(&read("offered_read_text").await),
        "granted once, for every tool"
    );
    let refused = err(&read("bare_read_text").await);
    assert!(
        refused.message.contains("No such file"),
        "no /data at all: {refused}"
    );
}
