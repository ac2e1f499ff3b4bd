//! Tools that talk back (`toolhost:plugin@0.2.0`), over MCP: results of every kind of content
//! item with a structured result, progress with the request's token, sampling the client's
//! model and asking the person, each only when granted, bounded per call, and only to the
//! session whose call made it.

// Sampling: deprecated at 2026-07-28, part of the revisions toolhost serves.
#![allow(deprecated)]

use crate::mcp::{call, configure, stdio_serve};
use crate::support::{Fixture, ensemble};
use rmcp::model::{
    CallToolResult, CancelledNotificationParam, ClientCapabilities, ClientConfig, ContentBlock,
    CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams, ElicitResult,
    ElicitationAction, ErrorData, ProgressNotificationParam, ProtocolVersion, SamplingMessage,
};
use rmcp::service::{NotificationContext, RequestContext, RunningService};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How a test client answers elicitations.
#[derive(Clone, Copy, Default, PartialEq)]
enum Answer {
    #[default]
    Accept,
    Decline,
    /// Accepts with content the form did not ask for (a number for the name).
    Misfit,
    /// Accepts the form's property with others beside it that the form never asked for.
    Extra,
    /// Never answers: the call must end at its own timeout.
    Never,
}

/// A client that declares sampling and elicitation (unless `plain`), answers them, and
/// counts the progress reports it gets and the requests the server cancels.
#[derive(Clone, Default)]
struct Talker {
    plain: bool,
    answer: Answer,
    progress: Arc<Mutex<Vec<ProgressNotificationParam>>>,
    sampled: Arc<AtomicUsize>,
    cancelled: Arc<Mutex<Vec<CancelledNotificationParam>>>,
}

impl ClientHandler for Talker {
    fn get_info(&self) -> ClientConfig {
        let mut config =
            ClientConfig::default().with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE);
        if !self.plain {
            config.capabilities = ClientCapabilities::builder()
                .enable_sampling()
                .enable_elicitation()
                .build();
        }
        config
    }

    async fn on_cancelled(
        &self,
        params: CancelledNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.cancelled.lock().expect("cancelled").push(params);
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.lock().expect("progress").push(params);
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        self.sampled.fetch_add(1, Ordering::SeqCst);
        let asked = params
            .messages
            .first()
            .and_then(|m| m.content.first())
            .and_then(|c| c.as_text())
            .map(|t| t.text.clone())
            .unwrap_or_default();
        assert_eq!(params.system_prompt.as_deref(), Some("Answer briefly."));
        Ok(CreateMessageResult::new(
            SamplingMessage::assistant_text(format!("answer to {asked}")),
            "test-model".into(),
        ))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let ElicitRequestParams::FormElicitationParams { message, .. } = request else {
            panic!("a form was expected");
        };
        match self.answer {
            Answer::Accept if message.contains("name") => {
                Ok(ElicitResult::new(ElicitationAction::Accept)
                    .with_content(json!({"name": "Ada"})))
            }
            Answer::Accept if message.contains("Delete") => Ok(ElicitResult::new(
                ElicitationAction::Accept,
            )
            .with_content(json!({"sure": true}))),
            Answer::Accept => {
                Ok(ElicitResult::new(ElicitationAction::Accept).with_content(json!({"n": 1})))
            }
            Answer::Misfit => {
                Ok(ElicitResult::new(ElicitationAction::Accept).with_content(json!({"name": 7})))
            }
            Answer::Extra => Ok(ElicitResult::new(ElicitationAction::Accept).with_content(
                json!({"name": "Ada", "isAdmin": true, "__proto__": {"polluted": 1}}),
            )),
            Answer::Decline => Ok(ElicitResult::new(ElicitationAction::Decline)),
            Answer::Never => {
                std::future::pending::<()>().await;
                unreachable!()
            }
        }
    }
}

fn fixture(grants: &str) -> Fixture {
    let fixture = Fixture::new();
    std::fs::copy(toolhost_testkit::TALKER, fixture.root().join("talker.wasm")).expect("copy");
    let invokers = "[defaults]\ntimeout-ms = 3000\n\n\
        [[invokers]]\nname = \"gallery\"\n\n\
        [[invokers]]\nname = \"report\"\n\n\
        [[invokers]]\nname = \"flood\"\nlimits = { timeout-ms = 20000 }\n\n\
        [[invokers]]\nname = \"wrong_structure\"\n\n\
        [[invokers]]\nname = \"bad_structure\"\n\n\
        [[invokers]]\nname = \"quiet\"\ntool = \"report\"\ncapabilities = { progress = false }\n\n\
        [[invokers]]\nname = \"ask_model\"\ncapabilities = { sampling = true }\n\n\
        [[invokers]]\nname = \"ask_model_ungranted\"\ntool = \"ask_model\"\n\n\
        [[invokers]]\nname = \"ask_person\"\ncapabilities = { elicitation = true }\n\n\
        [[invokers]]\nname = \"ask_badly\"\ncapabilities = { elicitation = true }\n\n\
        [[invokers]]\nname = \"ask_forever\"\ncapabilities = { elicitation = true }\n";
    fixture.write(
        "talker.toml",
        &ensemble("talker", "talker", &format!("{grants}\n{invokers}")),
    );
    fixture
}

const GRANTS: &str = "[grants]\nsampling = true\nelicitation = true\n";

/// Waits until `reports` holds `count` reports (a failure deadline, not a timing check).
async fn wait_for(reports: &Mutex<Vec<ProgressNotificationParam>>, count: usize) {
    let wait = async {
        while reports.lock().expect("reports").len() < count {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), wait)
        .await
        .expect("progress reports arrive");
}

fn text(result: &CallToolResult) -> String {
    let texts: Vec<&str> = result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
        .collect();
    texts.join("\n")
}

async fn start(fixture: &Fixture, client: Talker) -> RunningService<RoleClient, Talker> {
    client
        .serve(stdio_serve(fixture))
        .await
        .expect("MCP session")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_items_and_a_structured_result_reach_the_client() {
    let fixture = fixture(GRANTS);
    let client = start(&fixture, Talker::default()).await;
    let tools = client.list_all_tools().await.expect("tools/list");
    let gallery = tools.iter().find(|t| t.name == "gallery").expect("gallery");
    let schema = gallery
        .output_schema
        .as_ref()
        .expect("outputSchema advertised");
    assert_eq!(schema.get("required"), Some(&json!(["items"])));

    let result = call(&client, "gallery", json!({})).await;
    assert_eq!(result.is_error, Some(false), "{result:?}");
    let kinds: Vec<&str> = result
        .content
        .iter()
        .map(|c| match c {
            ContentBlock::Text(_) => "text",
            ContentBlock::Image(_) => "image",
            ContentBlock::Audio(_) => "audio",
            ContentBlock::Resource(_) => "resource",
            _ => "other",
        })
        .collect();
    assert_eq!(kinds, ["text", "image", "audio", "resource"]);
    let image = result.content[1].as_image().expect("image");
    assert_eq!(
        (image.mime_type.as_str(), image.data.as_str()),
        ("image/png", "iVBORw==")
    );
    assert_eq!(
        result.content[3]
            .as_resource()
            .expect("resource")
            .get_text(),
        "the notes"
    );
    assert_eq!(result.structured_content, Some(json!({"items": 4})));

    // A tool that declares an output schema and breaks its word fails, saying why.
    let wrong = call(&client, "wrong_structure", json!({})).await;
    assert_eq!(wrong.is_error, Some(true));
    assert!(
        text(&wrong).contains("declares an output schema but returned no structured result"),
        "{}",
        text(&wrong)
    );
    let bad = call(&client, "bad_structure", json!({})).await;
    assert_eq!(bad.is_error, Some(true));
    assert!(
        text(&bad).starts_with("tool-error: tool `bad_structure` returned a structured result that does not match the output schema it declares"),
        "{}",
        text(&bad)
    );
    assert!(text(&bad).contains("/items"), "{}", text(&bad));
    client.cancel().await.expect("close");

    // `toolhost call --json` shows every item in MCP's form, and the text a model reads.
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
    configure(&mut command, &fixture);
    let out = command
        .args(["call", "gallery", "{}", "--json"])
        .output()
        .expect("call");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report["content"][1]["type"], "image");
    assert_eq!(report["content"][2]["data"], "UklGRg==");
    assert_eq!(report["structured"], json!({"items": 4}));
    assert_eq!(
        report["result"],
        "a chart and a sound\n[image image/png, 4 bytes]\n[audio audio/wav, 4 bytes]\nthe notes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_goes_to_the_calling_session_alone_and_a_flood_is_cut_at_the_limit() {
    let fixture = fixture(GRANTS);
    let caller = Talker::default();
    let reports = caller.progress.clone();
    let client = start(&fixture, caller).await;
    let other = Talker::default();
    let other_reports = other.progress.clone();
    let bystander = start(&fixture, other).await;

    let result = call(&client, "report", json!({"steps": 3})).await;
    assert_eq!(text(&result), "reported 3");
    // rmcp hands each notification to the handler on a task of its own: in any order.
    wait_for(&reports, 3).await;
    let mut seen: Vec<(f64, Option<f64>, Option<String>)> = reports
        .lock()
        .expect("reports")
        .iter()
        .map(|p| (p.progress, p.total, p.message.clone()))
        .collect();
    seen.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert_eq!(
        seen,
        [1.0, 2.0, 3.0].map(|n| (n, Some(3.0), Some(format!("step {n}"))))
    );

    // Taken away: the tool still runs, its reports go nowhere.
    reports.lock().expect("reports").clear();
    assert_eq!(
        text(&call(&client, "quiet", json!({"steps": 3})).await),
        "reported 3"
    );
    assert!(reports.lock().expect("reports").is_empty());

    // A flood: the call ends well, and the client got the per-call limit of reports.
    let flood = call(&client, "flood", json!({"steps": 100000})).await;
    assert_eq!(text(&flood), "flooded 100000", "{flood:?}");
    let limit = toolhost::contract::PROGRESS_PER_CALL as usize;
    wait_for(&reports, limit).await;
    // One more round trip: anything past the limit would have arrived before its answer.
    call(&client, "gallery", json!({})).await;
    assert_eq!(reports.lock().expect("reports").len(), limit);
    // The other session saw none of it.
    assert!(other_reports.lock().expect("reports").is_empty());
    bystander.cancel().await.expect("close");
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_asks_the_clients_model_only_when_granted_and_bounded() {
    let fixture = fixture(GRANTS);
    let talker = Talker::default();
    let sampled = talker.sampled.clone();
    let client = start(&fixture, talker).await;
    let once = call(
        &client,
        "ask_model",
        json!({"prompt": "capital of France?"}),
    )
    .await;
    assert_eq!(text(&once), "answer to capital of France? (test-model)");

    let ungranted = call(&client, "ask_model_ungranted", json!({})).await;
    assert!(
        text(&ungranted).starts_with("not-granted: sampling is not granted"),
        "{}",
        text(&ungranted)
    );

    sampled.store(0, Ordering::SeqCst);
    let looping = call(&client, "ask_model", json!({"times": 50})).await;
    let lines: Vec<String> = text(&looping).lines().map(str::to_string).collect();
    let limit = toolhost::contract::SAMPLES_PER_CALL as usize;
    assert_eq!(lines.len(), limit + 1, "{lines:?}");
    assert!(lines[limit].starts_with("limit-reached: a call may sample at most 8 times"));
    assert_eq!(sampled.load(Ordering::SeqCst), limit);
    client.cancel().await.expect("close");

    // A client that did not declare sampling is never sent the request.
    let plain = Talker {
        plain: true,
        ..Talker::default()
    };
    let sampled = plain.sampled.clone();
    let client = start(&fixture, plain).await;
    let refused = call(&client, "ask_model", json!({})).await;
    assert!(
        text(&refused)
            .starts_with("unsupported: the client did not declare the sampling capability"),
        "{}",
        text(&refused)
    );
    let person = call(&client, "ask_person", json!({})).await;
    assert!(text(&person).starts_with("unsupported: the client did not declare the elicitation"));
    assert_eq!(sampled.load(Ordering::SeqCst), 0);
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elicitation_asks_the_person_with_a_form_and_a_silent_person_ends_at_the_timeout() {
    let fixture = fixture(GRANTS);
    let client = start(&fixture, Talker::default()).await;
    let accepted = call(&client, "ask_person", json!({})).await;
    assert_eq!(text(&accepted), r#"accepted: {"name":"Ada"}"#);
    let bad = call(&client, "ask_badly", json!({})).await;
    assert!(
        text(&bad).starts_with("failed: the requested schema is not one MCP elicitation allows"),
        "{}",
        text(&bad)
    );
    let forever = call(&client, "ask_forever", json!({})).await;
    assert!(
        text(&forever).starts_with("asked 4 times, then limit-reached"),
        "{}",
        text(&forever)
    );
    client.cancel().await.expect("close");

    let declining = Talker {
        answer: Answer::Decline,
        ..Talker::default()
    };
    let client = start(&fixture, declining).await;
    assert_eq!(
        text(&call(&client, "ask_person", json!({})).await),
        "declined"
    );
    client.cancel().await.expect("close");

    // A client's answer is checked against the form it was sent: the tool gets `failed`.
    let misfit = Talker {
        answer: Answer::Misfit,
        ..Talker::default()
    };
    let client = start(&fixture, misfit).await;
    let refused = text(&call(&client, "ask_person", json!({})).await);
    assert!(
        refused.starts_with("failed: the answer does not fit the requested schema at /name:"),
        "{refused}"
    );
    client.cancel().await.expect("close");

    // Properties the form did not ask for never reach the tool, named in the failure.
    let extra = Talker {
        answer: Answer::Extra,
        ..Talker::default()
    };
    let client = start(&fixture, extra).await;
    let refused = text(&call(&client, "ask_person", json!({})).await);
    assert!(
        refused.starts_with(
            "failed: the answer does not fit the requested schema at /isAdmin: the form did not ask"
        ),
        "{refused}"
    );
    client.cancel().await.expect("close");

    let silent = Talker {
        answer: Answer::Never,
        ..Talker::default()
    };
    let client = start(&fixture, silent).await;
    let waited = tokio::time::timeout(
        Duration::from_secs(60),
        call(&client, "ask_person", json!({})),
    )
    .await
    .expect("the call ends by itself");
    assert_eq!(waited.is_error, Some(true));
    assert!(text(&waited).starts_with("timeout:"), "{}", text(&waited));
    // The question the timeout abandoned is withdrawn at the client, not left open.
    let withdrawn = async {
        loop {
            if let Some(param) = client
                .service()
                .cancelled
                .lock()
                .expect("cancelled")
                .first()
            {
                return param.clone();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let param = tokio::time::timeout(Duration::from_secs(30), withdrawn)
        .await
        .expect("notifications/cancelled for the abandoned question");
    assert!(param.request_id.is_some(), "{param:?}");
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asking_for_sampling_or_elicitation_the_ensemble_does_not_grant_is_a_file_line_error() {
    let fixture = fixture("");
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
    configure(&mut command, &fixture);
    let out = command.arg("check").output().expect("check");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stdout);
    assert!(
        stderr.contains(
            "invoker `ask_model` asks for sampling, which ensemble `talker` does not grant"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("talker.toml:"), "{stderr}");
    assert!(stderr.contains("asks for elicitation"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_plugin_reports_progress_and_asks_the_person_as_the_readme_shows() {
    let fixture = Fixture::new();
    let wasm = toolhost_testkit::languages::python_talker();
    std::fs::copy(&wasm, fixture.root().join("py.wasm")).expect("copy");
    fixture.write(
        "py.toml",
        &ensemble(
            "py",
            "py",
            "[grants]\nelicitation = true\n\n[[invokers]]\nname = \"countdown\"\n\n\
             [[invokers]]\nname = \"confirm\"\ncapabilities = { elicitation = true }\n",
        ),
    );
    // Compiled once here, so that `serve` finds it in the shared cache at once.
    crate::support::runtime()
        .load(&wasm, std::fs::read(&wasm).expect("read"))
        .await
        .expect("the Python component loads");
    let talker = Talker::default();
    let reports = talker.progress.clone();
    let client = start(&fixture, talker).await;
    assert_eq!(
        text(&call(&client, "countdown", json!({"from": 3})).await),
        "liftoff"
    );
    wait_for(&reports, 3).await;
    let mut messages: Vec<String> = reports
        .lock()
        .expect("reports")
        .iter()
        .filter_map(|p| p.message.clone())
        .collect();
    messages.sort();
    assert_eq!(messages, ["0 to go", "1 to go", "2 to go"]);
    assert_eq!(text(&call(&client, "confirm", json!({})).await), "deleted");
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_2026_07_28_progress_flows_and_asking_the_client_is_unsupported_at_once() {
    use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
    let fixture = fixture(GRANTS);
    let talker = Talker::default();
    let reports = talker.progress.clone();
    let sampled = talker.sampled.clone();
    let client = talker
        .serve_with_lifecycle(
            stdio_serve(&fixture),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("a 2026-07-28 connection");
    assert_eq!(
        client.peer_info().expect("discovered").protocol_version,
        ProtocolVersion::V_2026_07_28
    );
    assert_eq!(
        text(&call(&client, "report", json!({"steps": 2})).await),
        "reported 2"
    );
    wait_for(&reports, 2).await;
    for tool in ["ask_model", "ask_person"] {
        let refused = call(&client, tool, json!({})).await;
        assert!(
            text(&refused).starts_with("unsupported: the client speaks MCP 2026-07-28"),
            "{}",
            text(&refused)
        );
    }
    assert_eq!(sampled.load(Ordering::SeqCst), 0);
    client.cancel().await.expect("close");
}

/// Answers every elicitation of a chat with a fixed name.
struct Person;

impl toolhost::agent::Approver for Person {
    fn approve<'a>(
        &'a self,
        _request: &'a toolhost::agent::ApprovalRequest,
    ) -> toolhost::contract::BoxFuture<'a, toolhost::agent::Approval> {
        Box::pin(std::future::ready(toolhost::agent::Approval::Approved))
    }

    fn elicit<'a>(
        &'a self,
        request: &'a toolhost::agent::ElicitRequest,
    ) -> toolhost::contract::BoxFuture<
        'a,
        Result<toolhost::contract::ElicitAnswer, toolhost::contract::AskError>,
    > {
        assert_eq!(request.tool, "ask_person");
        assert_eq!(request.schema["required"], json!(["name"]));
        Box::pin(std::future::ready(Ok(
            toolhost::contract::ElicitAnswer::Accept(json!({"name": "Grace"})),
        )))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_chat_sampling_uses_the_chats_model_and_elicitation_asks_the_person() {
    use crate::scripted::{Scripted, openai};
    use toolhost::agent::{Agent, AgentOptions};
    use toolhost::provider::conversation::{Conversation, Message};
    use toolhost::provider::{ProviderKind, ProviderSettings};

    let fixture = fixture(GRANTS);
    let server = Scripted::start(vec![
        openai::stream("", &[("m", "ask_model", r#"{"prompt": "a haiku"}"#)]),
        // The tool's own request: the chat's model, asked without tools.
        openai::text("five seven five"),
        openai::stream("", &[("p", "ask_person", "{}")]),
        openai::text("all done"),
    ]);
    let mut settings = ProviderSettings::new(ProviderKind::OpenAi, "scripted-model");
    settings.base_url = server.base_url.clone();
    settings.api_key = Some("test-key".into());
    let provider = settings.build().expect("provider");
    let host = Arc::new(fixture.host().await);
    let agent = Agent::new(
        host,
        Arc::from(provider),
        Arc::new(Person),
        AgentOptions::default(),
    );
    let session = Arc::new(toolhost::invoke::Session::new("chat-talk"));
    let mut conversation = Conversation::new(Some("You are a test.".into()));
    conversation.push_user("go");
    let outcome = agent
        .run(&mut conversation, &session, &|_| {})
        .await
        .expect("the run ends");
    assert_eq!(outcome.text, "all done");

    let results: Vec<String> = conversation
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Results { results } => Some(results[0].content.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        results,
        ["five seven five (openai)", r#"accepted: {"name":"Grace"}"#]
    );
    let requests = server.requests();
    let sampled = &requests[1].body;
    assert!(sampled.get("tools").is_none(), "{sampled}");
    assert_eq!(sampled["messages"][0]["content"], "Answer briefly.");
    assert_eq!(sampled["messages"][1]["content"], "a haiku");
}

/// Adds the talker's `ask_person`, granted elicitation, to `fixture`.
pub(crate) fn add_ask_person(fixture: &Fixture) {
    std::fs::copy(toolhost_testkit::TALKER, fixture.root().join("talker.wasm")).expect("copy");
    fixture.write(
        "talker.toml",
        &ensemble(
            "talker",
            "talker",
            &format!(
                "{GRANTS}\n[[invokers]]\nname = \"ask_person\"\n\
                 capabilities = {{ elicitation = true }}\nlimits = {{ timeout-ms = 30000 }}\n"
            ),
        ),
    );
}

/// The web chat asks the person on the page: an `elicitation_request` event in the run's
/// stream, answered by a request naming it; content the form's schema refuses is a 400 that
/// names the property and leaves the question pending; the log keeps question and answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_the_web_chat_a_tools_question_is_answered_by_a_request_naming_it() {
    use crate::scripted::{Scripted, openai};
    use crate::web::{base, chat, get, post_json, serve};

    let ask = |id: &str| openai::stream("", &[(id, "ask_person", "{}")]);
    let model = Scripted::start(vec![
        ask("p1"),
        openai::text("Hello, Grace."),
        ask("p2"),
        openai::text("As you wish."),
        ask("p3"),
        openai::text("Nobody there."),
    ]);
    let fixture = crate::web::fixture(&model.base_url, "approval-timeout-s = 2");
    add_ask_person(&fixture);
    let server = serve(&fixture, &[]);
    let api = format!("{}/api/conversations", base(&server));

    // Accepted, after one answer the schema refuses.
    let mut events = chat(&api, json!({"message": "Who am I?"})).await;
    let first = events.until("elicitation_request").await;
    let id = first[0]["id"].as_str().expect("id").to_string();
    let question = first.last().expect("question");
    assert_eq!(question["id"], "p1-ask-1");
    assert_eq!(question["call_id"], "p1");
    assert_eq!(question["tool"], "ask_person");
    assert_eq!(question["message"], "What is your name?");
    assert_eq!(question["schema"]["required"], json!(["name"]));
    let answer = |question: &str, body: Value| {
        let url = format!("{api}/{id}/elicitations/{question}");
        async move { post_json(&url, body).await }
    };
    let (status, refused) = answer(
        "p1-ask-1",
        json!({"action": "accept", "content": {"name": 7}}),
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    let refused = refused["error"].as_str().expect("error");
    assert!(refused.starts_with("/content/name: "), "{refused}");
    for extra in ["extra", "isAdmin", "__proto__"] {
        let mut content = json!({"name": "Grace"});
        content[extra] = json!(true);
        let (status, refused) =
            answer("p1-ask-1", json!({"action": "accept", "content": content})).await;
        assert_eq!(status, 400, "{extra}: {refused}");
        assert_eq!(
            refused["error"],
            format!("/content/{extra}: the form did not ask for this property"),
        );
    }
    assert_eq!(answer("p1-ask-1", json!({"action": "maybe"})).await.0, 400);
    assert_eq!(
        answer("p1-ask-1", json!({"action": "accept"})).await.0,
        400,
        "no content"
    );
    assert_eq!(answer("nope", json!({"action": "decline"})).await.0, 404);
    let accept = json!({"action": "accept", "content": {"name": "Grace"}});
    assert_eq!(answer("p1-ask-1", accept.clone()).await.0, 204);
    assert_eq!(answer("p1-ask-1", accept).await.0, 404, "answered already");
    let rest = events.rest().await;
    let result = rest
        .iter()
        .find(|e| e["type"] == "tool_result")
        .expect("result");
    assert_eq!(
        result["content"], r#"accepted: {"name":"Grace"}"#,
        "{rest:#?}"
    );
    assert!(
        rest.iter()
            .any(|e| e["type"] == "elicitation" && e["action"] == "accept"),
        "{rest:#?}"
    );

    // Declined.
    let mut events = chat(&format!("{api}/{id}/messages"), json!({"message": "Again"})).await;
    events.until("elicitation_request").await;
    assert_eq!(
        answer("p2-ask-1", json!({"action": "decline"})).await.0,
        204
    );
    let rest = events.rest().await;
    let result = rest
        .iter()
        .find(|e| e["type"] == "tool_result")
        .expect("result");
    assert_eq!(result["content"], "declined", "{rest:#?}");

    // Nobody answers: the tool is told so after approval-timeout-s, and the model goes on.
    let mut events = chat(
        &format!("{api}/{id}/messages"),
        json!({"message": "Once more"}),
    )
    .await;
    let rest = events.rest().await;
    let result = rest
        .iter()
        .find(|e| e["type"] == "tool_result")
        .expect("result");
    assert_eq!(
        result["content"], "failed: nobody answered within 2 s ([chat] approval-timeout-s)",
        "{rest:#?}"
    );
    assert!(
        rest.iter()
            .any(|e| e["type"] == "elicitation" && e["action"] == "timeout"),
        "{rest:#?}"
    );

    // The log keeps each question and how it ended.
    let (_, kept) = get(&format!("{api}/{id}")).await;
    let log = kept["log"].as_array().expect("log");
    let actions: Vec<&Value> = log
        .iter()
        .filter(|e| e["type"] == "elicitation")
        .map(|e| &e["action"])
        .collect();
    assert_eq!(
        actions,
        [&json!("accept"), &json!("decline"), &json!("timeout")]
    );
    assert_eq!(
        log.iter()
            .filter(|e| e["type"] == "elicitation_request")
            .count(),
        3
    );
    assert_eq!(
        model.requests().len(),
        6,
        "every scripted answer was asked for"
    );
    // As docs/chat-api.openapi.yaml describes them.
    let validator = crate::web::event_validator();
    for event in log {
        let errors: Vec<String> = validator
            .iter_errors(event)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{event}: {errors:?}");
    }
}
