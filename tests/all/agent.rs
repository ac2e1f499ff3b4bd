//! The agent loop against scripted provider servers that speak the real wire formats: what
//! the loop does with the model's answers, and what it sends back.

use crate::scripted::{self, Recorded, Reply, Scripted, anthropic, openai};
use crate::support::{Fixture, ensemble};
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use toolhost::agent::{
    Agent, AgentError, AgentOptions, Approval, ApprovalPolicy, ApprovalRequest, Approver, Ending,
    Event, RunOutcome,
};
use toolhost::contract::BoxFuture;
use toolhost::invoke::{CallPolicy, Session};
use toolhost::provider::conversation::{Conversation, Message};
use toolhost::provider::{ProviderKind, ProviderSettings};

/// A fixture with `calculate`, and testbed tools over a read-write `/data`: `read`, `write`
/// (destructive), `wait_for`, and `spin` (100 ms timeout).
fn fixture() -> Fixture {
    let fixture = Fixture::new();
    let data = fixture.mkdir("data");
    std::fs::write(data.join("numbers.txt"), "17 and 25").expect("write numbers");
    fixture.write(
        "calculator.toml",
        &ensemble(
            "calculator",
            "calculator",
            "[[invokers]]\ninvoker = { name = \"calculate\" }\n",
        ),
    );
    let rw = "capabilities = { files = [{ guest = \"/data\", access = \"read-write\" }] }";
    fixture.write(
        "testbed.toml",
        &ensemble(
            "testbed",
            "testbed",
            &format!(
                "[grants]\nfiles = [{{ host = \"../data\", guest = \"/data\", access = \"read-write\" }}]\n\n\
                 [[invokers]]\ninvoker = {{ name = \"read\" }}\n{rw}\n\n\
                 [[invokers]]\ninvoker = {{ name = \"write\", destructive = true }}\n{rw}\n\n\
                 [[invokers]]\ninvoker = {{ name = \"wait_for\", dedup = \"off\" }}\n{rw}\n\n\
                 [[invokers]]\ninvoker = {{ name = \"spin\" }}\nlimits = {{ timeout-ms = 100 }}\n"
            ),
        ),
    );
    fixture
}

fn settings(kind: ProviderKind, server: &Scripted) -> ProviderSettings {
    let mut settings = ProviderSettings::new(kind, "scripted-model");
    settings.base_url = server.base_url.clone();
    settings.api_key = Some("test-key".into());
    settings.retry.base_delay = Duration::from_millis(5);
    settings
}

/// Collects a run's events.
#[derive(Default)]
struct Events(Mutex<Vec<Event>>);

impl Events {
    fn sink(&self) -> impl Fn(Event) + Send + Sync + '_ {
        |e| self.0.lock().expect("events").push(e)
    }

    fn all(&self) -> Vec<Event> {
        self.0.lock().expect("events").clone()
    }

    /// The `tool_result` events: (name, outcome, deduplicated).
    fn results(&self) -> Vec<(String, String, bool)> {
        self.all()
            .into_iter()
            .filter_map(|e| match e {
                Event::ToolResult {
                    name,
                    outcome,
                    deduplicated,
                    ..
                } => Some((name, outcome, deduplicated)),
                _ => None,
            })
            .collect()
    }

    fn text(&self) -> String {
        self.all()
            .into_iter()
            .filter_map(|e| match e {
                Event::TextDelta { text } => Some(text),
                _ => None,
            })
            .collect()
    }
}

/// Everything one test needs: the fixture, the server and the agent.
struct Run {
    _fixture: Fixture,
    server: Scripted,
    agent: Agent,
    host: Arc<toolhost::invoke::Host>,
    session: Arc<Session>,
    events: Events,
}

impl Run {
    async fn new(kind: ProviderKind, replies: Vec<Reply>) -> Self {
        Run::with(
            kind,
            replies,
            |_| {},
            Arc::new(ApprovalPolicy::refuse_all()),
            AgentOptions::default(),
            CallPolicy::default(),
        )
        .await
    }

    async fn with(
        kind: ProviderKind,
        replies: Vec<Reply>,
        adjust: impl FnOnce(&mut ProviderSettings),
        approver: Arc<dyn Approver>,
        options: AgentOptions,
        policy: CallPolicy,
    ) -> Self {
        let fixture = fixture();
        let server = Scripted::start(replies);
        let mut provider = settings(kind, &server);
        adjust(&mut provider);
        let provider = provider.build().expect("provider");
        let host = Arc::new(fixture.host().await);
        Run {
            _fixture: fixture,
            server,
            agent: Agent::new(Arc::clone(&host), Arc::from(provider), approver, options),
            host,
            session: Arc::new(Session::with_policy("agent-test", policy)),
            events: Events::default(),
        }
    }

    async fn ask(&self, conversation: &mut Conversation) -> Result<RunOutcome, AgentError> {
        let sink = self.events.sink();
        self.agent.run(conversation, &self.session, &sink).await
    }

    async fn prompt(&self, prompt: &str) -> (Conversation, RunOutcome) {
        let mut conversation = Conversation::new(Some("You are a test.".into()));
        conversation.push_user(prompt);
        let outcome = self.ask(&mut conversation).await.expect("the run ends");
        (conversation, outcome)
    }

    fn data(&self) -> std::path::PathBuf {
        self._fixture.root().join("data")
    }
}

/// The `role: tool` messages of an OpenAI request: (tool_call_id, content).
fn tool_messages(request: &Recorded) -> Vec<(String, String)> {
    request.body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap_or_default().to_string(),
                m["content"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// The `result` of the calculator's answer.
fn number(content: &str) -> f64 {
    let value: serde_json::Value = serde_json::from_str(content).expect("calculator JSON");
    value["result"].as_f64().expect("a result")
}

fn tool_names(request: &Recorded) -> Vec<String> {
    request.body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| {
                    t["function"]["name"]
                        .as_str()
                        .or(t["name"].as_str())
                        .unwrap_or_default()
                        .to_string()
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_step_task_reads_calculates_and_answers() {
    let run = Run::new(
        ProviderKind::OpenAi,
        vec![
            openai::stream(
                "I will read the file.",
                &[("call_1", "read", r#"{"path": "/data/numbers.txt"}"#)],
            ),
            openai::stream(
                "",
                &[("call_2", "calculate", r#"{"expression": "17 + 25"}"#)],
            ),
            openai::text("The sum is 42."),
        ],
    )
    .await;
    let (conversation, outcome) = run.prompt("Add the numbers in /data/numbers.txt").await;
    assert_eq!(outcome.ending, Ending::Answer);
    assert_eq!(outcome.text, "The sum is 42.");
    assert_eq!(outcome.iterations, 3);
    assert_eq!(outcome.usage.input_tokens, 300);
    assert_eq!(outcome.usage.output_tokens, 30);
    assert_eq!(run.events.text(), "I will read the file.The sum is 42.");
    assert_eq!(conversation.messages.len(), 6);

    let requests = run.server.requests();
    assert_eq!(requests.len(), 3);
    let first = &requests[0];
    assert_eq!(first.path, "/v1/chat/completions");
    assert_eq!(first.header("authorization"), Some("Bearer test-key"));
    assert_eq!(first.body["model"], "scripted-model");
    assert_eq!(first.body["stream"], true);
    assert_eq!(first.body["messages"][0]["role"], "system");
    let names = tool_names(first);
    for expected in [
        "task_completion",
        "ask_question",
        "converse",
        "calculate",
        "read",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} not offered: {names:?}"
        );
    }
    let calculate = first.body["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .find(|t| t["function"]["name"] == "calculate")
        .expect("calculate offered");
    assert_eq!(calculate["type"], "function");
    assert_eq!(calculate["function"]["parameters"]["type"], "object");

    // The second request carries the assistant's call and the file's text.
    let second = &requests[1];
    let assistant = &second.body["messages"][2];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(assistant["tool_calls"][0]["id"], "call_1");
    assert_eq!(
        assistant["tool_calls"][0]["function"]["arguments"],
        r#"{"path": "/data/numbers.txt"}"#
    );
    assert_eq!(
        tool_messages(second),
        vec![("call_1".to_string(), "17 and 25".to_string())]
    );
    let third = tool_messages(&requests[2]);
    assert_eq!(third[1].0, "call_2");
    assert_eq!(number(&third[1].1), 42.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_calls_of_one_turn_run_together_and_answer_in_call_order() {
    // `wait_for` ends only when `write` has made the file: run one after the other, in call
    // order, it would time out.
    let run = Run::with(
        ProviderKind::OpenAi,
        vec![
            openai::stream(
                "",
                &[
                    ("a", "wait_for", r#"{"path": "/data/flag", "ms": 20000}"#),
                    ("b", "write", r#"{"path": "/data/flag", "text": "up"}"#),
                    ("c", "calculate", r#"{"expression": "2 * 3"}"#),
                ],
            ),
            openai::text("done"),
        ],
        |_| {},
        Arc::new(ApprovalPolicy::approve_all()),
        AgentOptions::default(),
        CallPolicy::default(),
    )
    .await;
    let (conversation, outcome) = run.prompt("go").await;
    assert_eq!(outcome.ending, Ending::Answer);
    let Message::Results { results } = &conversation.messages[2] else {
        panic!("expected results, got {:?}", conversation.messages[2]);
    };
    let got: Vec<(&str, &str, bool)> = results
        .iter()
        .map(|r| (r.call_id.as_str(), r.content.as_str(), r.is_error))
        .collect();
    assert_eq!(
        got,
        vec![
            ("a", "up", false),
            ("b", "written", false),
            ("c", r#"{"expression":"2 * 3","result":6.0}"#, false)
        ]
    );
    let ids: Vec<String> = tool_messages(&run.server.requests()[1])
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(ids, ["a", "b", "c"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_call_is_answered_from_the_first() {
    let call = r#"{"expression": "6 * 7"}"#;
    let run = Run::new(
        ProviderKind::OpenAi,
        vec![
            openai::stream("", &[("c1", "calculate", call)]),
            openai::stream("", &[("c2", "calculate", r#"{ "expression" : "6 * 7" }"#)]),
            openai::text("42"),
        ],
    )
    .await;
    let (_, outcome) = run.prompt("twice").await;
    assert_eq!(outcome.ending, Ending::Answer);
    assert_eq!(
        run.events.results(),
        vec![
            ("calculate".to_string(), "ok".to_string(), false),
            ("calculate".to_string(), "ok".to_string(), true),
        ]
    );
    assert_eq!(number(&tool_messages(&run.server.requests()[2])[1].1), 42.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_iteration_limit_ends_the_run_and_keeps_the_transcript() {
    let looping = |n: usize| {
        openai::stream(
            "",
            &[(
                "",
                "calculate",
                &format!(r#"{{"expression": "{n} + 1"}}"#) as &str,
            )],
        )
    };
    let run = Run::with(
        ProviderKind::OpenAi,
        (0..5).map(looping).collect(),
        |_| {},
        Arc::new(ApprovalPolicy::refuse_all()),
        AgentOptions {
            max_iterations: 2,
            ..AgentOptions::default()
        },
        CallPolicy::default(),
    )
    .await;
    let (conversation, outcome) = run.prompt("loop").await;
    assert_eq!(outcome.ending, Ending::IterationLimit);
    assert_eq!(outcome.iterations, 2);
    assert!(outcome.text.contains("max-iterations"), "{}", outcome.text);
    assert_eq!(run.server.requests().len(), 2);
    assert_eq!(run.server.unused(), 3);
    // user, (assistant, results) x 2
    assert_eq!(conversation.messages.len(), 5);
    // Ids the provider left out were generated, unique in the conversation.
    let ids: Vec<String> = conversation
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Assistant { calls, .. } => Some(calls[0].id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(ids.len(), 2);
    assert!(ids.iter().all(|id| !id.is_empty()));
    assert_ne!(ids[0], ids[1]);
    match run.events.all().last() {
        Some(Event::Done {
            ending: Ending::IterationLimit,
            ..
        }) => {}
        other => panic!("the last event is {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_error_goes_back_to_the_model_which_recovers() {
    let run = Run::with(
        ProviderKind::OpenAi,
        vec![
            openai::stream(
                "",
                &[
                    ("e1", "calculate", r#"{"expression": "1 +"#),
                    ("e2", "no_such_tool", "{}"),
                    ("e3", "calculate", r#"{"expression": 5}"#),
                    ("e4", "spin", "{}"),
                    ("e5", "read", r#"{"path": "/data/numbers.txt"}"#),
                    ("e6", "task_completion", "{}"),
                ],
            ),
            openai::stream("", &[("ok", "calculate", r#"{"expression": "1 + 1"}"#)]),
            openai::text("2"),
        ],
        |_| {},
        Arc::new(ApprovalPolicy::refuse_all()),
        AgentOptions::default(),
        CallPolicy {
            allow: None,
            deny: vec!["read".into()],
        },
    )
    .await;
    let (_, outcome) = run.prompt("try").await;
    assert_eq!(outcome.ending, Ending::Answer);
    assert_eq!(outcome.text, "2");
    let requests = run.server.requests();
    // A denied tool is not offered at all.
    assert!(!tool_names(&requests[0]).contains(&"read".to_string()));
    let back = tool_messages(&requests[1]);
    let expect = [
        ("e1", "invalid-arguments: the arguments are not valid JSON"),
        ("e2", "unknown-tool: there is no tool named `no_such_tool`"),
        (
            "e3",
            "invalid-arguments: the arguments do not match the schema",
        ),
        ("e4", "timeout: "),
        ("e5", "denied: tool `read` is not allowed"),
        (
            "e6",
            "invalid-arguments: `task_completion` needs a string argument `result`",
        ),
    ];
    assert_eq!(back.len(), expect.len());
    for ((id, content), (want_id, want)) in back.iter().zip(expect) {
        assert_eq!(id, want_id);
        assert!(content.starts_with(want), "{id}: {content}");
    }
    assert!(back[2].1.contains("/expression"), "{}", back[2].1);
    assert_eq!(number(&tool_messages(&requests[2])[6].1), 2.0);
}

/// Records each approval request and answers with a policy.
struct Recording {
    policy: ApprovalPolicy,
    asked: Mutex<Vec<ApprovalRequest>>,
}

impl Approver for Recording {
    fn approve<'a>(&'a self, request: &'a ApprovalRequest) -> BoxFuture<'a, Approval> {
        self.asked.lock().expect("asked").push(request.clone());
        Box::pin(async move { self.policy.decide(&request.tool) })
    }
}

async fn write_with(policy: ApprovalPolicy) -> (Run, Arc<Recording>, RunOutcome) {
    let approver = Arc::new(Recording {
        policy,
        asked: Mutex::default(),
    });
    let run = Run::with(
        ProviderKind::OpenAi,
        vec![
            openai::stream(
                "",
                &[
                    ("w", "write", r#"{"path": "/data/out.txt", "text": "hi"}"#),
                    ("r", "read", r#"{"path": "/data/numbers.txt"}"#),
                ],
            ),
            openai::text("finished"),
        ],
        |_| {},
        Arc::clone(&approver) as Arc<dyn Approver>,
        AgentOptions::default(),
        CallPolicy::default(),
    )
    .await;
    let (_, outcome) = run.prompt("write it").await;
    (run, approver, outcome)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destructive_call_runs_once_approved() {
    let (run, approver, outcome) =
        write_with(ApprovalPolicy::approve_only(vec!["write".into()])).await;
    assert_eq!(outcome.ending, Ending::Answer);
    let asked = approver.asked.lock().expect("asked");
    assert_eq!(asked.len(), 1, "only the destructive call asks");
    assert_eq!(asked[0].tool, "write");
    assert_eq!(
        asked[0].arguments,
        json!({"path": "/data/out.txt", "text": "hi"})
    );
    assert_eq!(
        std::fs::read_to_string(run.data().join("out.txt")).expect("written"),
        "hi"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_destructive_call_does_not_run_and_the_model_is_told() {
    let (run, approver, outcome) = write_with(ApprovalPolicy::refuse_all()).await;
    assert_eq!(outcome.ending, Ending::Answer);
    assert_eq!(approver.asked.lock().expect("asked").len(), 1);
    assert!(!run.data().join("out.txt").exists());
    let back = tool_messages(&run.server.requests()[1]);
    assert!(
        back[0].1.starts_with("denied: `write` is destructive"),
        "{}",
        back[0].1
    );
    assert_eq!(back[1].1, "17 and 25", "the other call still ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_completion_ends_the_run_without_another_model_call() {
    let run = Run::new(
        ProviderKind::OpenAi,
        vec![
            openai::stream(
                "Computing.",
                &[
                    ("c", "calculate", r#"{"expression": "40 + 2"}"#),
                    ("t", "task_completion", r#"{"result": "The answer is 42."}"#),
                ],
            ),
            openai::text("never asked"),
        ],
    )
    .await;
    let (conversation, outcome) = run.prompt("finish").await;
    assert_eq!(outcome.ending, Ending::Completed);
    assert_eq!(outcome.text, "The answer is 42.");
    assert_eq!(run.server.requests().len(), 1);
    assert_eq!(run.server.unused(), 1);
    // The other call of the turn ran, and its result is kept.
    let Some(Message::Results { results }) = conversation.messages.last() else {
        panic!("the transcript ends with the results");
    };
    assert_eq!(number(&results[0].content), 42.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_question_pauses_and_the_run_continues_with_the_reply() {
    let run = Run::new(
        ProviderKind::Anthropic,
        vec![
            anthropic::stream(
                "",
                &[("q", "ask_question", r#"{"question": "Which file?"}"#)],
            ),
            anthropic::text("Thanks, reading numbers.txt."),
        ],
    )
    .await;
    let (mut conversation, outcome) = run.prompt("read a file").await;
    assert_eq!(outcome.ending, Ending::Question);
    assert_eq!(outcome.text, "Which file?");
    conversation.push_user("numbers.txt");
    let outcome = run.ask(&mut conversation).await.expect("continues");
    assert_eq!(outcome.ending, Ending::Answer);
    // The question's result and the reply share one user message, the result first.
    let second = &run.server.requests()[1];
    let last = second.body["messages"]
        .as_array()
        .expect("messages")
        .last()
        .cloned();
    let last = last.expect("a last message");
    assert_eq!(last["role"], "user");
    assert_eq!(last["content"][0]["type"], "tool_result");
    assert_eq!(last["content"][0]["tool_use_id"], "q");
    assert_eq!(
        last["content"][1],
        json!({"type": "text", "text": "numbers.txt"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_gets_all_results_of_a_turn_in_one_user_message_first() {
    let run = Run::new(
        ProviderKind::Anthropic,
        vec![
            anthropic::stream(
                "Two at once.",
                &[
                    ("tu_1", "calculate", r#"{"expression": "2 + 2"}"#),
                    ("tu_2", "calculate", r#"{"expression": "nope("}"#),
                ],
            ),
            anthropic::text("4, and one error."),
        ],
    )
    .await;
    let (_, outcome) = run.prompt("calculate").await;
    assert_eq!(outcome.ending, Ending::Answer);
    assert_eq!(outcome.usage.input_tokens, 400);
    let requests = run.server.requests();
    let first = &requests[0];
    assert_eq!(first.path, "/v1/messages");
    assert_eq!(first.header("x-api-key"), Some("test-key"));
    assert_eq!(first.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(first.body["system"], "You are a test.");
    assert_eq!(first.body["stream"], true);
    assert!(first.body["max_tokens"].as_u64().is_some());
    let calculate = first.body["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .find(|t| t["name"] == "calculate")
        .expect("offered");
    assert_eq!(calculate["input_schema"]["type"], "object");

    let messages = requests[1].body["messages"]
        .as_array()
        .expect("messages")
        .clone();
    assert_eq!(messages.len(), 3);
    let assistant = &messages[1];
    assert_eq!(
        assistant["content"][0],
        json!({"type": "text", "text": "Two at once."})
    );
    assert_eq!(assistant["content"][1]["type"], "tool_use");
    assert_eq!(
        assistant["content"][1]["input"],
        json!({"expression": "2 + 2"})
    );
    let results = messages[2]["content"].as_array().expect("blocks");
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["tool_use_id"], "tu_1");
    assert_eq!(number(results[0]["content"].as_str().expect("text")), 4.0);
    assert_eq!(results[0]["is_error"], false);
    assert_eq!(results[1]["tool_use_id"], "tu_2");
    assert_eq!(results[1]["is_error"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_and_failing_providers_are_retried_with_backoff() {
    let run = Run::new(
        ProviderKind::OpenAi,
        vec![
            scripted::status(429, Some("0")),
            scripted::status(500, None),
            openai::text("made it"),
        ],
    )
    .await;
    let (_, outcome) = run.prompt("hello").await;
    assert_eq!(outcome.text, "made it");
    assert_eq!(run.server.requests().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_failed_try_is_a_clear_error_and_the_conversation_is_kept() {
    let run = Run::new(
        ProviderKind::Anthropic,
        vec![
            scripted::status(529, None),
            scripted::status(503, None),
            scripted::status(500, None),
            anthropic::text("too late"),
        ],
    )
    .await;
    let mut conversation = Conversation::default();
    conversation.push_user("hello");
    let error = run.ask(&mut conversation).await.expect_err("fails");
    let message = error.to_string();
    assert!(
        message.contains("anthropic: HTTP 500 after 3 attempt(s)")
            && message.contains("scripted status 500"),
        "{message}"
    );
    assert_eq!(run.server.requests().len(), 3);
    assert_eq!(conversation.messages.len(), 1);
    match run.events.all().last() {
        Some(Event::Done {
            ending: Ending::Error,
            ..
        }) => {}
        other => panic!("the last event is {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_error_is_not_retried() {
    let run = Run::new(
        ProviderKind::OpenAi,
        vec![scripted::status(401, None), openai::text("unused")],
    )
    .await;
    let mut conversation = Conversation::default();
    conversation.push_user("hello");
    let error = run.ask(&mut conversation).await.expect_err("fails");
    assert!(
        error.to_string().contains("HTTP 401 after 1 attempt(s)"),
        "{error}"
    );
    assert_eq!(run.server.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_answers_with_object_arguments_work_without_streaming() {
    let run = Run::with(
        ProviderKind::OpenAi,
        vec![
            openai::whole("", &[("x", "calculate", json!({"expression": "3 * 3"}))]),
            openai::whole("nine", &[]),
        ],
        |s| s.stream = false,
        Arc::new(ApprovalPolicy::refuse_all()),
        AgentOptions::default(),
        CallPolicy::default(),
    )
    .await;
    let (_, outcome) = run.prompt("square").await;
    assert_eq!(outcome.text, "nine");
    assert_eq!(run.events.text(), "nine");
    let requests = run.server.requests();
    assert!(requests[0].body.get("stream").is_none());
    let back = tool_messages(&requests[1]);
    assert_eq!(back[0].0, "x");
    assert_eq!(number(&back[0].1), 9.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_prompted_provider_calls_tools_written_as_blocks() {
    let first = "Let me compute.\n<tool>{\"name\": \"calculate\", \"arguments\": {\"expression\": \"5 * 5\"}}</tool>\n<tool>{\"name\": calculate}</tool>";
    let run = Run::new(
        ProviderKind::Prompted,
        vec![openai::text(first), openai::text("It is 25.")],
    )
    .await;
    let (conversation, outcome) = run.prompt("five squared").await;
    assert_eq!(outcome.text, "It is 25.");
    // The blocks never reach the person's screen.
    assert_eq!(run.events.text(), "Let me compute.\n\nIt is 25.");
    let requests = run.server.requests();
    assert!(requests[0].body.get("tools").is_none());
    let system = requests[0].body["messages"][0]["content"]
        .as_str()
        .expect("system prompt")
        .to_string();
    assert!(system.starts_with("You are a test."));
    assert!(system.contains("<tool>{\"name\": \"TOOL_NAME\""));
    assert!(system.contains("- calculate: Evaluate an arithmetic expression"));
    let Message::Results { results } = &conversation.messages[2] else {
        panic!("results expected");
    };
    assert_eq!(number(&results[0].content), 25.0);
    assert!(results[1].is_error);
    assert!(
        results[1].content.contains("not valid JSON"),
        "{}",
        results[1].content
    );
    let back = requests[1].body["messages"].as_array().expect("messages");
    let assistant = back[2]["content"].as_str().expect("assistant text");
    assert!(
        assistant.contains("<tool>{\"name\":\"calculate\""),
        "{assistant}"
    );
    let user = back[3]["content"].as_str().expect("results text");
    assert!(
        user.starts_with("<tool_result name=\"calculate\" status=\"ok\">\n{\"expression\":\"5 * 5\",\"result\":25.0}\n</tool_result>"),
        "{user}"
    );
    assert!(user.contains("status=\"error\""), "{user}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reloaded_catalog_is_offered_on_the_next_turn() {
    let run = Run::new(
        ProviderKind::OpenAi,
        vec![openai::text("first"), openai::text("second")],
    )
    .await;
    let mut conversation = Conversation::default();
    conversation.push_user("hi");
    run.ask(&mut conversation).await.expect("runs");
    std::fs::remove_file(run._fixture.ensembles().join("calculator.toml")).expect("remove");
    let resolved = run._fixture.resolve().await;
    run.host.catalog().replace(resolved.catalog, Vec::new());
    conversation.push_user("again");
    run.ask(&mut conversation).await.expect("runs again");
    let requests = run.server.requests();
    assert!(tool_names(&requests[0]).contains(&"calculate".to_string()));
    assert!(!tool_names(&requests[1]).contains(&"calculate".to_string()));
    assert!(tool_names(&requests[1]).contains(&"read".to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_stream_ends_at_the_answer_size_bound() {
    let run = Run::with(
        ProviderKind::OpenAi,
        vec![scripted::endless_openai_stream()],
        |settings| settings.max_response_bytes = 1 << 20,
        Arc::new(ApprovalPolicy::refuse_all()),
        AgentOptions::default(),
        CallPolicy::default(),
    )
    .await;
    let mut conversation = Conversation::default();
    conversation.push_user("talk");
    let error = run
        .ask(&mut conversation)
        .await
        .expect_err("the answer never ends");
    let message = error.to_string();
    assert!(
        message.contains("the answer is longer than 1 MiB (max-response-mib)"),
        "{message}"
    );
    // What streamed before the bound is at most the bound.
    assert!(run.events.text().len() <= 1 << 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_answer_past_the_size_bound_is_not_read() {
    let huge = serde_json::json!({"choices": [{"message": {"content": "x".repeat(3 << 20)}}]});
    let run = Run::with(
        ProviderKind::OpenAi,
        vec![scripted::Reply::json(huge)],
        |settings| {
            settings.stream = false;
            settings.max_response_bytes = 1 << 20;
        },
        Arc::new(ApprovalPolicy::refuse_all()),
        AgentOptions::default(),
        CallPolicy::default(),
    )
    .await;
    let mut conversation = Conversation::default();
    conversation.push_user("talk");
    let error = run.ask(&mut conversation).await.expect_err("too long");
    assert!(error.to_string().contains("longer than 1 MiB"), "{error}");
}
