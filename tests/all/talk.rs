//! Tools that talk back (`toolhost:plugin@0.2.0`), over MCP: results of every kind of content
//! item with a structured result, and progress with the request's token, only to the session
//! whose call made it and cut at the per-call limit, from Rust and from Python. The harness the
//! other `talk_*` tests share lives here: the talker's ensemble, and a client that answers
//! sampling and elicitation as each test asks.

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
pub(crate) enum Answer {
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
pub(crate) struct Talker {
    pub(crate) plain: bool,
    pub(crate) answer: Answer,
    pub(crate) progress: Arc<Mutex<Vec<ProgressNotificationParam>>>,
    pub(crate) sampled: Arc<AtomicUsize>,
    pub(crate) cancelled: Arc<Mutex<Vec<CancelledNotificationParam>>>,
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

pub(crate) fn fixture(grants: &str) -> Fixture {
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

pub(crate) const GRANTS: &str = "[grants]\nsampling = true\nelicitation = true\n";

/// Waits until `reports` holds `count` reports (a failure deadline, not a timing check).
pub(crate) async fn wait_for(reports: &Mutex<Vec<ProgressNotificationParam>>, count: usize) {
    let wait = async {
        while reports.lock().expect("reports").len() < count {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), wait)
        .await
        .expect("progress reports arrive");
}

pub(crate) fn text(result: &CallToolResult) -> String {
    let texts: Vec<&str> = result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
        .collect();
    texts.join("\n")
}

pub(crate) async fn start(fixture: &Fixture, client: Talker) -> RunningService<RoleClient, Talker> {
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
