//! `toolhost chat` against a scripted provider server: what a person sees, the JSON events,
//! exit codes, and where settings (and never keys) come from.

use crate::cli::{stderr, stdout, toolhost_with_stdin};
use crate::mcp::configure;
use crate::scripted::{Scripted, anthropic, openai};
use crate::support::{Fixture, cache_dir, ensemble};
use serde_json::Value;
use std::process::Output;

fn fixture() -> Fixture {
    let fixture = Fixture::new();
    fixture.write(
        "calculator.toml",
        &ensemble(
            "calculator",
            "calculator",
            "[[invokers]]\ninvoker = { name = \"calculate\" }\n",
        ),
    );
    fixture
}

fn chat(fixture: &Fixture, server: &Scripted, extra: &[&str]) -> Output {
    let cache = cache_dir();
    let mut args = vec![
        "--cache-dir",
        cache.to_str().expect("utf-8 path"),
        "chat",
        "What is 40 + 2?",
        "--model",
        "scripted-model",
        "--base-url",
        &server.base_url,
    ];
    args.extend_from_slice(extra);
    toolhost_with_stdin(fixture, &args, None)
}

fn two_step() -> Vec<crate::scripted::Reply> {
    vec![
        openai::stream(
            "Computing.",
            &[("c1", "calculate", r#"{"expression": "40 + 2"}"#)],
        ),
        openai::text("It is 42."),
    ]
}

#[test]
fn a_person_sees_the_answer_on_stdout_and_the_calls_on_stderr() {
    let fixture = fixture();
    let server = Scripted::start(two_step());
    let output = chat(&fixture, &server, &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(stdout(&output), "Computing.\nIt is 42.\n");
    let err = stderr(&output);
    assert!(
        err.contains("  -> calculate {\"expression\": \"40 + 2\"}"),
        "{err}"
    );
    assert!(
        err.contains("  ok calculate: {\"expression\":\"40 + 2\",\"result\":42.0}"),
        "{err}"
    );
    // No key named and none needed for a local server: no Authorization header.
    assert_eq!(server.requests()[0].header("authorization"), None);
}

#[test]
fn json_prints_every_event_as_a_line() {
    let fixture = fixture();
    let server = Scripted::start(two_step());
    let output = chat(&fixture, &server, &["--json"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let events: Vec<Value> = stdout(&output)
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(kinds.first(), Some(&"text_delta"));
    let call = events
        .iter()
        .find(|e| e["type"] == "tool_call")
        .expect("tool_call");
    assert_eq!(call["name"], "calculate");
    assert_eq!(call["id"], "c1");
    let result = events
        .iter()
        .find(|e| e["type"] == "tool_result")
        .expect("tool_result");
    assert_eq!(result["outcome"], "ok");
    assert_eq!(result["deduplicated"], false);
    assert!(result["duration_ms"].as_f64().is_some());
    let done = events.last().expect("events");
    assert_eq!(done["type"], "done");
    assert_eq!(done["ending"], "answer");
    assert_eq!(done["text"], "It is 42.");
    assert_eq!(done["iterations"], 2);
    assert_eq!(done["usage"]["input_tokens"], 200);
}

#[test]
fn the_iteration_limit_exits_1_with_a_clear_message() {
    let fixture = fixture();
    let server = Scripted::start(two_step());
    let output = chat(&fixture, &server, &["--max-iterations", "1"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr(&output).contains("stopped after 1 model call(s) (max-iterations)"));
}

#[test]
fn settings_come_from_toolhost_toml_and_the_key_from_the_environment() {
    let fixture = fixture();
    let server = Scripted::start(vec![anthropic::text("Hello from the config.")]);
    let config = format!(
        "schema-version = 1\n\n[chat]\nprovider = \"anthropic\"\nmodel = \"from-config\"\n\
         base-url = \"{}\"\napi-key-env = \"SCRIPTED_KEY\"\nmax-tokens = 123\n",
        server.base_url
    );
    std::fs::write(fixture.root().join("toolhost.toml"), config).expect("write");
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_toolhost"));
    configure(&mut command, &fixture);
    let output = command
        .env("SCRIPTED_KEY", "from-the-environment")
        .args(["chat", "hi"])
        .output()
        .expect("toolhost runs");
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(stdout(&output), "Hello from the config.\n");
    let request = &server.requests()[0];
    assert_eq!(request.path, "/v1/messages");
    assert_eq!(request.header("x-api-key"), Some("from-the-environment"));
    assert_eq!(request.body["model"], "from-config");
    assert_eq!(request.body["max_tokens"], 123);
}

#[test]
fn a_key_written_in_toolhost_toml_is_refused_with_its_location() {
    let fixture = fixture();
    fixture.write_host_file("chat", "model = \"m\"\napi-key = \"sk-secret\"");
    let output = toolhost_with_stdin(&fixture, &["chat", "hi"], None);
    assert_eq!(output.status.code(), Some(3));
    let err = stderr(&output);
    assert!(err.contains("toolhost.toml:5:11"), "{err}");
    assert!(err.contains("api-key-env"), "{err}");
}

#[test]
fn a_missing_model_or_key_is_a_setup_error() {
    let fixture = fixture();
    let output = toolhost_with_stdin(&fixture, &["chat", "hi"], None);
    assert_eq!(output.status.code(), Some(3));
    assert!(
        stderr(&output).contains("no model: pass --model"),
        "{}",
        stderr(&output)
    );

    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_toolhost"));
    configure(&mut command, &fixture);
    let output = command
        .env_remove("OPENAI_API_KEY")
        .args(["chat", "hi", "--model", "gpt-x"])
        .output()
        .expect("toolhost runs");
    assert_eq!(output.status.code(), Some(3));
    assert!(
        stderr(&output).contains("openai needs an API key: set OPENAI_API_KEY"),
        "{}",
        stderr(&output)
    );
}

/// A fixture whose `write` tool (testbed, read-write `/data`) is destructive.
fn destructive_fixture() -> Fixture {
    let fixture = fixture();
    fixture.mkdir("data");
    fixture.write(
        "testbed.toml",
        &ensemble(
            "testbed",
            "testbed",
            "[grants]\nfiles = [{ host = \"../data\", guest = \"/data\", access = \"read-write\" }]\n\n\
             [[invokers]]\ninvoker = { name = \"write\", destructive = true }\n\
             capabilities = { files = [{ guest = \"/data\", access = \"read-write\" }] }\n",
        ),
    );
    fixture
}

fn write_then_answer() -> Vec<crate::scripted::Reply> {
    vec![
        openai::stream(
            "",
            &[("w", "write", r#"{"path": "/data/out.txt", "text": "hi"}"#)],
        ),
        openai::text("Done."),
    ]
}

#[test]
fn without_a_terminal_a_destructive_call_is_refused_unless_yes() {
    let fixture = destructive_fixture();
    let server = Scripted::start(write_then_answer());
    let output = chat(&fixture, &server, &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(!fixture.root().join("data/out.txt").exists());
    assert!(
        stderr(&output).contains("  x write: denied: `write` is destructive"),
        "{}",
        stderr(&output)
    );

    let server = Scripted::start(write_then_answer());
    let output = chat(&fixture, &server, &["--yes"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(
        std::fs::read_to_string(fixture.root().join("data/out.txt")).expect("written"),
        "hi"
    );
}

#[test]
fn auto_approve_in_toolhost_toml_lets_a_named_tool_run() {
    let fixture = destructive_fixture();
    let server = Scripted::start(write_then_answer());
    fixture.write_host_file("chat", "auto-approve = [\"wri*\"]");
    let output = chat(&fixture, &server, &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(fixture.root().join("data/out.txt").exists());
}

#[test]
fn tool_choice_is_sent_as_auto_by_default() {
    // Servers such as llama.cpp's leave the tools out of the prompt without it.
    let fixture = fixture();
    let server = Scripted::start(two_step());
    let output = chat(&fixture, &server, &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    for request in server.requests() {
        assert_eq!(request.body["tool_choice"], "auto", "{}", request.body);
    }
}

#[test]
fn a_forced_tool_choice_holds_for_the_first_model_call_only() {
    let fixture = fixture();
    let server = Scripted::start(two_step());
    let output = chat(&fixture, &server, &["--tool-choice", "calculate"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let requests = server.requests();
    assert_eq!(
        requests[0].body["tool_choice"],
        serde_json::json!({"type": "function", "function": {"name": "calculate"}})
    );
    assert_eq!(requests[1].body["tool_choice"], "auto");

    let server = Scripted::start(two_step());
    let output = chat(&fixture, &server, &["--tool-choice", "required"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(server.requests()[0].body["tool_choice"], "required");

    // `none` holds for the whole run; no tools at all means no tool_choice field either.
    let server = Scripted::start(vec![openai::text("No tools needed.")]);
    let output = chat(&fixture, &server, &["--tool-choice", "none"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(server.requests()[0].body["tool_choice"], "none");
}

#[test]
fn tool_choice_maps_to_anthropics_wire_format_from_toolhost_toml() {
    let fixture = fixture();
    for (choice, wire) in [
        ("auto", serde_json::json!({"type": "auto"})),
        ("required", serde_json::json!({"type": "any"})),
        ("none", serde_json::json!({"type": "none"})),
        (
            "calculate",
            serde_json::json!({"type": "tool", "name": "calculate"}),
        ),
    ] {
        let server = Scripted::start(vec![anthropic::text("Done.")]);
        let config = format!(
            "schema-version = 1\n\n[chat]\nprovider = \"anthropic\"\nmodel = \"m\"\n\
             base-url = \"{}\"\napi-key-env = \"SCRIPTED_KEY\"\ntool-choice = \"{choice}\"\n",
            server.base_url
        );
        std::fs::write(fixture.root().join("toolhost.toml"), config).expect("write");
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_toolhost"));
        configure(&mut command, &fixture);
        let output = command
            .env("SCRIPTED_KEY", "k")
            .args(["chat", "hi"])
            .output()
            .expect("toolhost runs");
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        assert_eq!(server.requests()[0].body["tool_choice"], wire, "{choice}");
    }
}

#[test]
fn an_empty_tool_choice_in_toolhost_toml_is_refused_with_its_location() {
    let fixture = fixture();
    fixture.write_host_file("chat", "model = \"m\"\ntool-choice = \"\"");
    let output = toolhost_with_stdin(&fixture, &["chat", "hi"], None);
    assert_eq!(output.status.code(), Some(3));
    let err = stderr(&output);
    assert!(err.contains("toolhost.toml:5:15"), "{err}");
    assert!(err.contains("expected auto, required, none"), "{err}");
}

/// The fixture with a prompt and a resource set (`docs://` over `docs/`).
fn prompt_fixture() -> Fixture {
    let fixture = fixture();
    let docs = fixture.mkdir("docs");
    std::fs::write(docs.join("brief.md"), "Add two numbers.").expect("write");
    std::fs::write(docs.join("logo.png"), [0x89, b'P', b'N', b'G']).expect("write");
    fixture.write(
        "prompts.toml",
        "schema-version = 1\n[ensemble]\nname = \"prompts\"\n\n[[resources]]\nname = \"docs\"\n\
         directory = \"../docs\"\nuri-prefix = \"docs://\"\n\n[[prompts]]\nname = \"sum\"\n\
         description = \"Adds\"\narguments = [{ name = \"a\", required = true }]\nmessages = [\n\
         { resource = \"docs://brief.md\" },\n  { image = \"docs://logo.png\" },\n\
         { text = \"What is {{ a }} + 2?\" },\n]\n",
    );
    fixture
}

fn chat_with(fixture: &Fixture, server: &Scripted, args: &[&str]) -> Output {
    let cache = cache_dir();
    let mut all = vec![
        "--cache-dir",
        cache.to_str().expect("utf-8 path"),
        "chat",
        "--model",
        "scripted-model",
        "--base-url",
        &server.base_url,
    ];
    all.extend_from_slice(args);
    toolhost_with_stdin(fixture, &all, None)
}

#[test]
fn a_prompt_and_resources_start_the_conversation() {
    let fixture = prompt_fixture();
    let server = Scripted::start(two_step());
    let output = chat_with(
        &fixture,
        &server,
        &[
            "--prompt",
            "sum",
            "--arg",
            "a=40",
            "--resource",
            "docs://brief.md",
            "Be brief.",
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(stdout(&output), "Computing.\nIt is 42.\n");
    let err = stderr(&output);
    assert!(
        err.contains("note: an image (image/png, 4 bytes) is not text"),
        "{err}"
    );
    let messages = &server.requests()[0].body["messages"];
    let user: Vec<&str> = messages
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().expect("text"))
        .collect();
    assert_eq!(
        user,
        [
            "Resource docs://brief.md (text/markdown):\nAdd two numbers.\n\nWhat is 40 + 2?\n\n\
          Resource docs://brief.md (text/markdown):\nAdd two numbers.\n\nBe brief."
        ]
    );
}

#[test]
fn a_prompt_that_cannot_be_got_is_a_clear_error_before_any_model_call() {
    let fixture = prompt_fixture();
    let server = Scripted::start(two_step());
    for (args, says) in [
        (&["--prompt", "sum"][..], "prompt `sum` needs argument `a`"),
        (&["--prompt", "nope"][..], "no prompt `nope`"),
        (
            &["--prompt", "sum", "--arg", "a"][..],
            "--arg takes NAME=VALUE",
        ),
        (
            &["--resource", "docs://../secret", "hi"][..],
            "no resource `docs://../secret`",
        ),
        (&[][..], "say what to ask"),
    ] {
        let output = chat_with(&fixture, &server, args);
        assert_ne!(output.status.code(), Some(0), "{args:?}");
        assert!(
            stderr(&output).contains(says),
            "{args:?}: {}",
            stderr(&output)
        );
    }
    assert_eq!(server.requests().len(), 0, "no model was asked");
}
