//! The agent loop's own logic with an in-process model ([`FakeModel`]): approvals on the
//! single call path, and what the loop offers and answers. No HTTP: the wire formats have
//! their own tests (`agent`, `agent_providers`).

use crate::support::{Fixture, ensemble};
use serde_json::json;
use std::sync::{Arc, Mutex};
use toolhost::agent::{
    Agent, AgentOptions, Approval, ApprovalRequest, Approver, Ending, RunOutcome,
};
use toolhost::catalog::VersionHash;
use toolhost::contract::BoxFuture;
use toolhost::invoke::{Host, Session};
use toolhost::provider::conversation::{Conversation, Message};
use toolhost::provider::fake::{FakeModel, calls, text};

/// An ensemble over `testbed` whose `write` invoker runs the component's tool `tool`.
fn testbed(tool: &str) -> String {
    ensemble(
        "testbed",
        "testbed",
        &format!(
            "[grants]\nfiles = [{{ host = \"../data\", guest = \"/data\", access = \"read-write\" }}]\n\n\
             [[invokers]]\ninvoker = {{ name = \"write\", tool = \"{tool}\", destructive = true }}\n\
             capabilities = {{ files = [{{ guest = \"/data\", access = \"read-write\" }}] }}\n"
        ),
    )
}

async fn run(
    host: &Arc<Host>,
    model: FakeModel,
    approver: Arc<dyn Approver>,
) -> (Arc<FakeModel>, Conversation, RunOutcome) {
    let model = Arc::new(model);
    let agent = Agent::new(
        Arc::clone(host),
        Arc::clone(&model) as _,
        approver,
        AgentOptions::default(),
    );
    let mut conversation = Conversation::default();
    conversation.push_user("write it");
    let session = Arc::new(Session::new("agent-loop"));
    let outcome = agent
        .run(&mut conversation, &session, &|_| {})
        .await
        .expect("the run ends");
    (model, conversation, outcome)
}

/// Approves every call, but first reloads the catalog to a version of the tool that would
/// do something else, and remembers the version it was asked about.
struct ReloadingApprover {
    fixture: Arc<Fixture>,
    host: Arc<Host>,
    asked: Mutex<Option<VersionHash>>,
    reloaded_to: Mutex<Option<VersionHash>>,
}

impl Approver for ReloadingApprover {
    fn approve<'a>(&'a self, request: &'a ApprovalRequest) -> BoxFuture<'a, Approval> {
        Box::pin(async move {
            *self.asked.lock().expect("asked") = Some(request.version);
            self.fixture.write("testbed.toml", &testbed("read"));
            let resolved = self.fixture.resolve().await;
            let new = resolved.catalog.get("write").expect("write").version();
            *self.reloaded_to.lock().expect("reloaded") = Some(new);
            self.host.catalog().replace(resolved.catalog, Vec::new());
            Approval::Approved
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_call_runs_the_version_that_was_approved_even_across_a_reload() {
    let fixture = Arc::new(Fixture::new());
    let data = fixture.mkdir("data");
    fixture.write("testbed.toml", &testbed("write"));
    let host = Arc::new(fixture.host().await);
    let approved_version = host
        .catalog()
        .snapshot()
        .get("write")
        .expect("write")
        .version();
    let approver = Arc::new(ReloadingApprover {
        fixture: Arc::clone(&fixture),
        host: Arc::clone(&host),
        asked: Mutex::default(),
        reloaded_to: Mutex::default(),
    });
    let model = FakeModel::new(vec![
        calls(&[(
            "w",
            "write",
            json!({"path": "/data/out.txt", "text": "approved"}),
        )]),
        text("done"),
    ]);
    let (model, conversation, outcome) = run(&host, model, Arc::clone(&approver) as _).await;
    assert_eq!(outcome.ending, Ending::Answer);

    let asked = approver
        .asked
        .lock()
        .expect("asked")
        .expect("approval asked");
    let reloaded = approver
        .reloaded_to
        .lock()
        .expect("reloaded")
        .expect("reloaded");
    assert_eq!(asked, approved_version, "the person saw another version");
    assert_ne!(reloaded, asked, "the reload did not change the tool");
    // The approved version (the component's `write`) ran, not the reloaded one (`read`).
    assert_eq!(
        std::fs::read_to_string(data.join("out.txt")).expect("written"),
        "approved"
    );
    let Message::Results { results } = &conversation.messages[2] else {
        panic!("results expected: {:?}", conversation.messages);
    };
    assert_eq!(results[0].content, "written");
    // The next turn is offered the reloaded catalog.
    assert_eq!(
        host.catalog()
            .snapshot()
            .get("write")
            .expect("write")
            .version(),
        reloaded
    );
    let asked = model.asked();
    assert_eq!(asked.len(), 2);
    assert!(asked[1].tools.contains(&"write".to_string()));
    assert_eq!(asked[1].messages.len(), 3, "user, assistant, results");
}

/// Records requests and refuses them.
#[derive(Default)]
struct Refusing {
    asked: Mutex<Vec<ApprovalRequest>>,
}

impl Approver for Refusing {
    fn approve<'a>(&'a self, request: &'a ApprovalRequest) -> BoxFuture<'a, Approval> {
        self.asked.lock().expect("asked").push(request.clone());
        Box::pin(async { Approval::Refused("no".into()) })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nobody_is_asked_about_a_call_that_would_fail_anyway() {
    let fixture = Arc::new(Fixture::new());
    fixture.mkdir("data");
    fixture.write("testbed.toml", &testbed("write"));
    let host = Arc::new(fixture.host().await);
    let approver = Arc::new(Refusing::default());
    let model = FakeModel::new(vec![
        calls(&[
            ("bad", "write", json!("{not json")),
            ("unknown", "writ", json!({})),
            ("ok", "write", json!({"path": "/data/x", "text": "y"})),
        ]),
        text("done"),
    ]);
    let (_, conversation, _) = run(&host, model, Arc::clone(&approver) as _).await;
    let asked = approver.asked.lock().expect("asked");
    assert_eq!(asked.len(), 1, "only the valid call is asked about");
    assert_eq!(asked[0].arguments, json!({"path": "/data/x", "text": "y"}));
    let Message::Results { results } = &conversation.messages[2] else {
        panic!("results expected");
    };
    let kinds: Vec<&str> = results
        .iter()
        .map(|r| r.content.split(':').next().unwrap_or_default())
        .collect();
    assert_eq!(kinds, ["invalid-arguments", "unknown-tool", "denied"]);
}
