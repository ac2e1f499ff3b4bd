//! Destructive calls in the agent loop wait on the approver: one runs once approved, a refused
//! one does not run and the model is told, and the other call of the turn runs either way.

use crate::agent::{Run, tool_messages};
use crate::scripted::openai;
use serde_json::json;
use std::sync::{Arc, Mutex};
use toolhost::agent::{
    AgentOptions, Approval, ApprovalPolicy, ApprovalRequest, Approver, Ending, RunOutcome,
};
use toolhost::contract::BoxFuture;
use toolhost::invoke::CallPolicy;
use toolhost::provider::ProviderKind;

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
