//! What a model can make the chat hold or send (issue #29), in process and through `toolhost
//! chat`: one answer asking for thousands of calls, a run's results past its budget, a request
//! past its budget, and an answer whose stream breaks off. Each test asserts the bound itself,
//! not only that the host lives. The web chat's side is `chat_bounds_web`, which shares the
//! fixture here.

use crate::cli::{stderr, toolhost_with_stdin};
use crate::scripted::{Reply, Scripted, anthropic, openai};
use crate::support::{Fixture, cache_dir, ensemble, peak_kib};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use toolhost::agent::{Agent, AgentOptions, ApprovalPolicy, Ending, Event, RunLimits};
use toolhost::invoke::Session;
use toolhost::provider::conversation::{Conversation, Message};
use toolhost::provider::{ProviderKind, ProviderSettings};

pub(crate) const DEADLINE: Duration = Duration::from_secs(120);

/// `big_output` (a string of `bytes` bytes) from the testbed, results remembered per session.
pub(crate) fn fixture() -> Fixture {
    let fixture = Fixture::new();
    fixture.write(
        "testbed.toml",
        &ensemble(
            "testbed",
            "testbed",
            "[[invokers]]\ninvoker = { name = \"big_output\" }\n",
        ),
    );
    fixture
}

/// `count` calls of `big_output`, each of `bytes` bytes and each with other arguments (so
/// dedup cannot answer them), as (id, name, arguments text).
pub(crate) fn big_calls(count: usize, bytes: usize) -> Vec<(String, String, String)> {
    (0..count)
        .map(|n| {
            (
                format!("call_{n}"),
                "big_output".to_string(),
                json!({"bytes": bytes, "n": n}).to_string(),
            )
        })
        .collect()
}

pub(crate) fn borrowed(calls: &[(String, String, String)]) -> Vec<(&str, &str, &str)> {
    calls
        .iter()
        .map(|(a, b, c)| (a.as_str(), b.as_str(), c.as_str()))
        .collect()
}

/// Collects a run's events.
#[derive(Default)]
struct Collected(Mutex<Vec<Event>>);

impl Collected {
    fn results(&self) -> Vec<(String, String)> {
        self.0
            .lock()
            .expect("events")
            .iter()
            .filter_map(|e| match e {
                Event::ToolResult {
                    outcome, content, ..
                } => Some((outcome.clone(), content.clone())),
                _ => None,
            })
            .collect()
    }
}

/// Runs one conversation in process against `replies`, with `limits`.
async fn run(
    kind: ProviderKind,
    replies: Vec<Reply>,
    limits: RunLimits,
    conversation: &mut Conversation,
) -> (
    Scripted,
    Collected,
    Result<toolhost::agent::RunOutcome, String>,
) {
    let fixture = fixture();
    let server = Scripted::start(replies);
    let mut settings = ProviderSettings::new(kind, "scripted-model");
    settings.base_url = server.base_url.clone();
    settings.api_key = Some("k".into());
    settings.retry.base_delay = Duration::from_millis(5);
    let host = Arc::new(fixture.host().await);
    let agent = Agent::new(
        host,
        Arc::from(settings.build().expect("provider")),
        Arc::new(ApprovalPolicy::refuse_all()),
        AgentOptions {
            limits,
            ..AgentOptions::default()
        },
    );
    let events = Collected::default();
    let sink = |e: Event| events.0.lock().expect("events").push(e);
    let session = Arc::new(Session::new("bounds"));
    let outcome = agent
        .run(conversation, &session, &sink)
        .await
        .map_err(|e| e.to_string());
    (server, events, outcome)
}

/// The size of the JSON body the host sent in request `n`.
fn request_bytes(server: &Scripted, n: usize) -> usize {
    server.requests()[n].body.to_string().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_answer_asking_for_thousands_of_calls_runs_the_bound_and_refuses_the_rest_once() {
    let calls = big_calls(3000, 100);
    let mut conversation = Conversation::default();
    conversation.push_user("go");
    let (server, events, outcome) = run(
        ProviderKind::OpenAi,
        vec![openai::stream("", &borrowed(&calls)), openai::text("done")],
        RunLimits::default(),
        &mut conversation,
    )
    .await;
    assert_eq!(outcome.expect("the run ends").ending, Ending::Answer);
    assert_eq!(events.results().len(), 33);
    // 32 ran, and one refusal stands for the 2,968 others (in the calls' order here; events
    // come as calls end).
    let Message::Results { results } = &conversation.messages[2] else {
        panic!("the results")
    };
    assert_eq!(results.len(), 33);
    assert!(
        results[..32]
            .iter()
            .all(|r| !r.is_error && r.content.len() == 100),
        "{:?}",
        &results[..32]
    );
    let refusal = &results[32].content;
    assert!(
        refusal.starts_with("resource-limit: not run: this answer asked for 3000 tool calls, and at most 32 run per answer")
            && refusal.contains("this call and the 2967 after it were not run"),
        "{refusal}"
    );
    // The conversation and the next request carry those 33 calls and results, not 3,000.
    let Message::Assistant { calls, .. } = &conversation.messages[1] else {
        panic!("the answer")
    };
    assert_eq!(calls.len(), 33);
    let sent = &server.requests()[1].body["messages"];
    let tool_messages = sent
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "tool")
        .count();
    assert_eq!(tool_messages, 33);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_results_stop_at_its_budget_and_later_calls_are_not_run() {
    // Three answers of 4 calls of 300 KB: the budget of 1 MiB is reached in the first.
    let replies = (0..3)
        .map(|turn| {
            let calls: Vec<(String, String, String)> = big_calls(4, 300_000)
                .into_iter()
                .map(|(id, name, args)| {
                    (
                        format!("{id}_{turn}"),
                        name,
                        args.replace('}', &format!(",\"turn\":{turn}}}")),
                    )
                })
                .collect();
            openai::stream("", &borrowed(&calls))
        })
        .chain([openai::text("done")])
        .collect();
    let limits = RunLimits {
        max_run_result_bytes: 1 << 20,
        ..RunLimits::default()
    };
    let mut conversation = Conversation::default();
    conversation.push_user("go");
    let (server, events, outcome) =
        run(ProviderKind::OpenAi, replies, limits, &mut conversation).await;
    assert_eq!(outcome.expect("the run ends").ending, Ending::Answer);
    let results = events.results();
    assert_eq!(results.len(), 12);
    let kept: usize = results.iter().map(|(_, content)| content.len()).sum();
    // The budget, and the markers that say where it cut.
    assert!(kept <= (1 << 20) + 12 * 300, "{kept} bytes of results kept");
    let cut = results
        .iter()
        .filter(|(_, c)| {
            c.contains("this run's tool results reached [chat] max-run-result-mib (1 MiB)")
        })
        .count();
    assert!(cut >= 1, "a result cut with its marker");
    // Once the budget is spent, the calls of later answers are refused without running.
    let refused: Vec<&String> = results[4..].iter().map(|(_, c)| c).collect();
    assert!(
        refused
            .iter()
            .all(|c| c.contains("not run: this run's tool results already reached")),
        "{refused:?}"
    );
    for n in 1..4 {
        assert!(request_bytes(&server, n) < (1 << 20) + (64 << 10));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_past_its_budget_is_cut_oldest_first_and_says_so() {
    // Earlier turns left 3 results of 600 KB; the request may be 1 MiB.
    let mut conversation = Conversation::default();
    for turn in 0..3 {
        conversation.push_user(format!("turn {turn}"));
        conversation.messages.push(Message::Assistant {
            text: String::new(),
            calls: vec![toolhost::provider::conversation::Invocation::new(
                format!("c{turn}"),
                "big_output",
                json!({"bytes": 600_000}),
            )],
        });
        conversation.messages.push(Message::Results {
            results: vec![toolhost::provider::conversation::ToolResult {
                call_id: format!("c{turn}"),
                name: "big_output".into(),
                content: format!("{turn}").repeat(600_000),
                is_error: false,
            }],
        });
    }
    conversation.push_user("and now?");
    let limits = RunLimits {
        max_request_bytes: 1 << 20,
        ..RunLimits::default()
    };
    for kind in [ProviderKind::OpenAi, ProviderKind::Anthropic] {
        let reply = match kind {
            ProviderKind::Anthropic => anthropic::text("ok"),
            _ => openai::text("ok"),
        };
        let mut conversation = conversation.clone();
        let (server, _, outcome) = run(kind, vec![reply], limits, &mut conversation).await;
        assert_eq!(outcome.expect("answered").ending, Ending::Answer);
        let body = server.requests()[0].body.to_string();
        assert!(
            body.len() < (1 << 20) + (64 << 10),
            "{kind}: {} bytes",
            body.len()
        );
        // The oldest results are cut to their start with the marker, the newest is whole.
        assert!(body.contains("left out here: the conversation is larger than a request"));
        assert!(
            body.contains(&"2".repeat(600_000)),
            "{kind}: the newest result is whole"
        );
        assert!(
            !body.contains(&"0".repeat(2000)),
            "{kind}: the oldest is cut"
        );
        // The conversation itself keeps every result whole.
        let Message::Results { results } = &conversation.messages[2] else {
            panic!("results")
        };
        assert_eq!(results[0].content.len(), 600_000);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_that_breaks_off_is_asked_again_then_ends_in_an_error() {
    for kind in [ProviderKind::OpenAi, ProviderKind::Anthropic] {
        let (cut, whole) = match kind {
            ProviderKind::Anthropic => (
                anthropic::cut_short("Half an ans"),
                anthropic::text("Whole."),
            ),
            _ => (openai::cut_short("Half an ans"), openai::text("Whole.")),
        };
        // Cut once, then whole: the answer is the whole one, after a `retry` event.
        let mut conversation = Conversation::default();
        conversation.push_user("hi");
        let (_, events, outcome) = run(
            kind,
            vec![cut.clone(), whole],
            RunLimits::default(),
            &mut conversation,
        )
        .await;
        let outcome = outcome.expect("answered on the second try");
        assert_eq!(
            (outcome.ending, outcome.text.as_str()),
            (Ending::Answer, "Whole.")
        );
        let retries: Vec<Event> = events
            .0
            .lock()
            .expect("events")
            .iter()
            .filter(|e| matches!(e, Event::Retry { .. }))
            .cloned()
            .collect();
        let [
            Event::Retry {
                attempt: 2,
                attempts: 3,
                reason,
            },
        ] = retries.as_slice()
        else {
            panic!("{kind}: one retry event: {retries:?}")
        };
        assert!(reason.contains("broke off"), "{reason}");
        assert_eq!(
            conversation.messages.len(),
            2,
            "only the whole answer is kept"
        );
        // Cut every time: an error once the tries are spent, never a partial answer.
        let mut conversation = Conversation::default();
        conversation.push_user("hi");
        let (server, _, outcome) = run(
            kind,
            vec![cut.clone(), cut.clone(), cut],
            RunLimits::default(),
            &mut conversation,
        )
        .await;
        let error = outcome.expect_err("no whole answer");
        assert!(error.contains("the answer broke off"), "{kind}: {error}");
        assert_eq!(server.requests().len(), 3);
        assert_eq!(
            conversation.messages.len(),
            1,
            "nothing of the partial answers kept"
        );
    }
}

#[test]
fn toolhost_chat_exits_1_when_every_answer_breaks_off() {
    let fixture = fixture();
    let server = Scripted::start(vec![
        openai::cut_short("Half"),
        openai::cut_short("Half"),
        openai::cut_short("Half"),
    ]);
    let cache = cache_dir();
    let output = toolhost_with_stdin(
        &fixture,
        &[
            "--cache-dir",
            cache.to_str().expect("path"),
            "chat",
            "hi",
            "--model",
            "scripted-model",
            "--base-url",
            &server.base_url,
        ],
        None,
    );
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(1), "{err}");
    assert!(err.contains("the answer broke off"), "{err}");
    assert!(err.contains("asking again: try 2 of 3"), "{err}");
}

#[test]
fn toolhost_chat_runs_32_of_20000_calls_in_one_answer_and_stays_small() {
    let fixture = fixture();
    let calls: Vec<(String, String, Value)> = (0..20_000)
        .map(|n| {
            (
                format!("c{n}"),
                "big_output".to_string(),
                json!(json!({"bytes": 10, "n": n}).to_string()),
            )
        })
        .collect();
    let calls: Vec<(&str, &str, Value)> = calls
        .iter()
        .map(|(id, name, args)| (id.as_str(), name.as_str(), args.clone()))
        .collect();
    let server = Scripted::start(vec![openai::whole("", &calls), openai::whole("done", &[])]);
    let cache = cache_dir();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_toolhost"));
    crate::mcp::configure(&mut command, &fixture);
    let child = command
        .args([
            "--cache-dir",
            cache.to_str().expect("path"),
            "chat",
            "go",
            "--json",
            "--no-stream",
            "--model",
            "scripted-model",
            "--base-url",
            &server.base_url,
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("toolhost chat");
    let pid = child.id();
    let peak = std::thread::spawn(move || {
        let mut peak = 0;
        while std::path::Path::new(&format!("/proc/{pid}")).exists() {
            peak = peak.max(peak_kib(pid));
            std::thread::sleep(Duration::from_millis(5));
        }
        peak
    });
    let output = child.wait_with_output().expect("chat ends");
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let events: Vec<Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON event"))
        .collect();
    let results: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "tool_result")
        .collect();
    assert_eq!(results.len(), 33, "32 ran and one refusal");
    assert_eq!(results.iter().filter(|r| r["outcome"] == "ok").count(), 32);
    // The request back to the model carries 33 results, not 20,000.
    let sent = &server.requests()[1].body["messages"];
    let tools = sent
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "tool")
        .count();
    assert_eq!(tools, 33);
    let peak = peak.join().expect("peak");
    eprintln!("peak RSS of toolhost chat: {} MiB", peak >> 10);
    assert!(
        peak < 300 << 10,
        "toolhost chat peaked at {} MiB",
        peak >> 10
    );
}
