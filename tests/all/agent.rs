//! The agent loop against scripted provider servers that speak the real wire formats: what
//! the loop does with the model's answers (a multi-step task, the calls of a turn run together,
//! a repeated call, the iteration limit, every kind of error, `task_completion`, `ask_question`,
//! a reloaded catalog), and what it sends back. The harness the other `agent_*` tests share
//! lives here.

use crate::scripted::{Recorded, Reply, Scripted, anthropic, openai};
use crate::support::{Fixture, ensemble};
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use toolhost::agent::{
    Agent, AgentError, AgentOptions, ApprovalPolicy, Approver, Ending, Event, RunOutcome,
};
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
pub(crate) struct Events(Mutex<Vec<Event>>);

impl Events {
    fn sink(&self) -> impl Fn(Event) + Send + Sync + '_ {
        |e| self.0.lock().expect("events").push(e)
    }

    pub(crate) fn all(&self) -> Vec<Event> {
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

    pub(crate) fn text(&self) -> String {
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
pub(crate) struct Run {
    _fixture: Fixture,
    pub(crate) server: Scripted,
    agent: Agent,
    host: Arc<toolhost::invoke::Host>,
    session: Arc<Session>,
    pub(crate) events: Events,
}

impl Run {
    pub(crate) async fn new(kind: ProviderKind, replies: Vec<Reply>) -> Self {
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

    pub(crate) async fn with(
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

    pub(crate) async fn ask(
        &self,
        conversation: &mut Conversation,
    ) -> Result<RunOutcome, AgentError> {
        let sink = self.events.sink();
        self.agent.run(conversation, &self.session, &sink).await
    }

    pub(crate) async fn prompt(&self, prompt: &str) -> (Conversation, RunOutcome) {
        let mut conversation = Conversation::new(Some("You are a test.".into()));
        conversation.push_user(prompt);
        let outcome = self.ask(&mut conversation).await.expect("the run ends");
        (conversation, outcome)
    }

    pub(crate) fn data(&self) -> std::path::PathBuf {
        self._fixture.root().join("data")
    }
}

/// The `role: tool` messages of an OpenAI request: (tool_call_id, content).
pub(crate) fn tool_messages(request: &Recorded) -> Vec<(String, String)> {
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
pub(crate) fn number(content: &str) -> f64 {
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
