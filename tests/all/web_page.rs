//! The page and the live catalog it shows: the catalog's event stream following reloads, and
//! the page itself in a real browser (headless Chromium) with tool calls, approvals, a tool's
//! question and the catalog view.

use crate::scripted::{Reply, Scripted, openai};
use crate::support::{Fixture, ensemble};
use crate::web::{Events, base, fixture, say, serve};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_catalog_stream_follows_reloads() {
    let model = Scripted::start(vec![]);
    let fixture = fixture(&model.base_url, "");
    let server = serve(&fixture, &[]);
    let response = reqwest::get(format!("{}/api/catalog/events", base(&server)))
        .await
        .expect("GET");
    let mut events = Events {
        response,
        buffer: String::new(),
    };
    let first = events.next().await.expect("the catalog");
    assert_eq!(first["type"], "catalog");
    let tools: Vec<&str> = first["ensembles"]
        .as_array()
        .expect("ensembles")
        .iter()
        .flat_map(|e| e["tools"].as_array().expect("tools"))
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        tools.contains(&"calculate") && tools.contains(&"say"),
        "{tools:?}"
    );
    let say = &first["ensembles"]
        .as_array()
        .expect("ensembles")
        .iter()
        .find(|e| e["name"] == "danger")
        .expect("danger")["tools"][0];
    assert_eq!(say["destructive"], true);
    assert_eq!(say["input_schema"]["type"], "object");

    fixture.write(
        "broken.toml",
        "schema-version = 1\n[ensemble]\nnmae = \"x\"\n",
    );
    let refused = loop {
        let event = events.next().await.expect("a catalog after the reload");
        if let Some(refused) = event["refused"].as_array().filter(|r| !r.is_empty()) {
            break refused.clone();
        }
    };
    let errors = refused[0]["errors"].to_string();
    assert!(errors.contains("broken.toml:3:1"), "{errors}");
}

/// The page in headless Chromium (Debian's, through its chromedriver, driven by
/// `tests/clients/webchat.py`): two tool calls and their results inline in order with the final
/// text; an approval granted on the page runs the call; a denied one reaches the model as
/// refused; a tool's question is answered in a form on the page; a stored conversation reads
/// back; the catalog view follows a reload (a new tool,
/// a refused file with its file:line) without the page reloading; a prompt with its argument
/// and an attached resource start a conversation. The screenshot of the chat
/// with its tool calls expanded is left in `target/test-artifacts/webchat.png`.
#[test]
fn the_page_shows_tool_calls_approvals_and_the_live_catalog_in_a_real_browser() {
    let model = Scripted::start(page_replies());
    let fixture = fixture(&model.base_url, "");
    let pending = prepare_page(&fixture);
    let server = serve(&fixture, &[]);
    run_page(
        &format!("{}/", base(&server)),
        &fixture,
        &pending,
        &model,
        "webchat.png",
    );
}

/// The scripted model's answers `tests/clients/webchat.py` expects, in order.
pub(crate) fn page_replies() -> Vec<Reply> {
    vec![
        openai::stream("", &[("c1", "calculate", r#"{"expression": "40 + 2"}"#)]),
        openai::stream("", &[("c2", "calculate", r#"{"expression": "2 * 21"}"#)]),
        openai::text("Both are 42."),
        say("a1", "hello from say"),
        openai::text("Said it."),
        say("d1", "second"),
        openai::text("Not allowed."),
        openai::stream("", &[("p1", "ask_person", "{}")]),
        openai::text("Hello, Grace."),
        openai::text("Summary sent."),
    ]
}

/// What the page's steps use beside the web fixture (a tool that asks, a prompt and a
/// resource), and the folder of the ensembles its catalog step moves in: returned.
pub(crate) fn prepare_page(fixture: &Fixture) -> std::path::PathBuf {
    crate::talk::add_ask_person(fixture);
    crate::web_offers::add_offers(fixture);
    let pending = fixture.root().join("pending");
    std::fs::create_dir_all(&pending).expect("pending dir");
    std::fs::write(
        pending.join("extra.toml"),
        ensemble(
            "extra",
            "testbed",
            "[[invokers]]\ninvoker = { name = \"sleep\" }\n",
        ),
    )
    .expect("extra");
    std::fs::write(
        pending.join("broken.toml"),
        "schema-version = 1\n[ensemble]\nnmae = \"broken\"\n",
    )
    .expect("broken");
    pending
}

/// Runs `tests/clients/webchat.py` against the page at `url`, its screenshot left in
/// `target/test-artifacts/<screenshot>`, and checks what `model` was asked.
pub(crate) fn run_page(
    url: &str,
    fixture: &Fixture,
    pending: &std::path::Path,
    model: &Scripted,
    screenshot: &str,
) {
    let artifacts =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-artifacts");
    std::fs::create_dir_all(&artifacts).expect("artifacts dir");
    let screenshot = artifacts.join(screenshot);
    let _ = std::fs::remove_file(&screenshot);
    let python = crate::mcp_list::test_tools().join("venv/bin/python");
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/clients/webchat.py");
    let output = std::process::Command::new(python)
        .arg(script)
        .arg("--url")
        .arg(url)
        .arg("--ensembles")
        .arg(fixture.ensembles())
        .arg("--pending")
        .arg(pending)
        .arg("--screenshot")
        .arg(&screenshot)
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // The page's timings, for the record (not asserted: the machine is shared).
    for timing in stdout.lines().filter(|l| l.starts_with("timing: ")) {
        eprintln!("{timing}");
    }
    assert!(screenshot.is_file(), "no screenshot");
    // The denied call reached the model as a refusal.
    let requests = model.requests();
    assert_eq!(requests.len(), 10, "every scripted answer was asked for");
    let denied = requests[6].body.to_string();
    assert!(denied.contains("refused to run `say`"), "{denied}");
    // The prompt's text and the attached resource reached the model as the first message.
    let brought = &requests[9].body["messages"];
    let user = brought
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "user"))
        .expect("a user message");
    assert_eq!(
        user["content"],
        "Write a brief on sums.\n\nResource docs://brief.md (text/markdown):\nSums are associative."
    );
}
