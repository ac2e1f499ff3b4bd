//! Prompts and resources an ensemble writes in its TOML, served by `toolhost serve` to the
//! official MCP client (rmcp) over stdio: listing, getting with arguments (and every way to
//! get them wrong), reading within the directory and its bounds (and every way out of it),
//! completion, subscriptions told of changes on disk, list changes after a reload, audit
//! records, and names that collide across ensembles.

// resources/subscribe is the handshake revisions' way, which toolhost serves.
#![allow(deprecated)]

use crate::mcp::{DEADLINE, stdio_serve};
use crate::support::Fixture;
use rmcp::model::{
    ArgumentInfo, ClientConfig, CompleteRequestParams, ContentBlock, GetPromptRequestParams,
    PromptReference, ProtocolVersion, ReadResourceRequestParams, Reference, ResourceContents,
    ResourceTemplateReference, ResourceUpdatedNotificationParam, SubscribeRequestParams,
    UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Map, Value, json};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

/// An ensemble `notes` with prefix `n`: a prompt with arguments, one that embeds a resource,
/// one that renders too much, and the files of `../docs` at `docs://notes/`.
const NOTES: &str = r#"schema-version = 1

[ensemble]
name = "notes"
prefix = "n"

[[resources]]
name = "docs"
description = "The team's notes"
directory = "../docs"
uri-prefix = "docs://notes/"
max-file-kib = 1
mime-types = { "logo" = "image/png" }

[[prompts]]
name = "review"
title = "Review a file"
description = "Ask for a review of one file"
arguments = [
  { name = "path", description = "The file", required = true },
  { name = "focus", description = "What to look at", values = ["bugs", "style", "speed"] },
]
messages = [
  { text = "Review {{ path }}{% if focus %}, looking for {{ focus }}{% endif %}." },
  { role = "assistant", text = "Which part first?" },
]

[[prompts]]
name = "discuss"
description = "Discuss a note, embedded whole"
arguments = [{ name = "note", required = true }]
messages = [
  { resource = "docs://notes/{{ note }}" },
  { image = "docs://notes/logo" },
]

[[prompts]]
name = "flood"
description = "Renders far more than a message may hold"
messages = [{ text = "{% for i in range(5000) %}{{ '0123456789' * 10 }}{% endfor %}" }]
"#;

/// The fixture: `notes.toml` and its files (one too large, one hidden, a link out).
pub(crate) fn fixture() -> Fixture {
    let fixture = Fixture::new();
    let docs = fixture.mkdir("docs");
    std::fs::create_dir_all(docs.join("guides")).expect("mkdir");
    std::fs::write(docs.join("intro.md"), "# Intro\nWelcome.").expect("write");
    std::fs::write(docs.join("guides/setup.txt"), "Run the two commands.").expect("write");
    std::fs::write(docs.join("logo"), [0x89, b'P', b'N', b'G', 0, 1, 2]).expect("write");
    std::fs::write(docs.join("big.txt"), "x".repeat(2000)).expect("write");
    std::fs::write(docs.join(".env"), "TOKEN=secret").expect("write");
    std::fs::write(fixture.root().join("secret.txt"), "outside").expect("write");
    std::os::unix::fs::symlink(fixture.root().join("secret.txt"), docs.join("out"))
        .expect("symlink");
    fixture.write("notes.toml", NOTES);
    fixture
}

/// A client that remembers resource updates and list changes.
#[derive(Clone, Default)]
struct Watcher {
    seen: Arc<Mutex<Vec<String>>>,
    arrived: Arc<Notify>,
}

impl Watcher {
    fn note(&self, what: String) {
        self.seen.lock().expect("seen").push(what);
        self.arrived.notify_one();
    }

    /// Waits for a notification equal to `what`; returns every one seen so far.
    async fn wait_for(&self, what: &str) -> Vec<String> {
        let wait = async {
            loop {
                let arrived = self.arrived.notified();
                let seen = self.seen.lock().expect("seen").clone();
                if seen.iter().any(|s| s == what) {
                    return seen;
                }
                arrived.await;
            }
        };
        tokio::time::timeout(DEADLINE, wait)
            .await
            .unwrap_or_else(|_| panic!("no `{what}` in {:?}", self.seen.lock().expect("seen")))
    }
}

impl ClientHandler for Watcher {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::default().with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.note(format!("updated {}", params.uri));
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.note("resources changed".into());
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.note("prompts changed".into());
    }
}

/// A prompt's messages, each `Role: text`; a message that is not text fails the test.
pub(crate) fn said(got: &rmcp::model::GetPromptResult) -> Vec<String> {
    got.messages
        .iter()
        .map(|m| match &m.content {
            ContentBlock::Text(t) => format!("{:?}: {}", m.role, t.text),
            other => panic!("not text: {other:?}"),
        })
        .collect()
}

fn arguments(value: Value) -> Map<String, Value> {
    value.as_object().expect("an object").clone()
}

async fn get(
    client: &RunningService<RoleClient, impl ClientHandler>,
    name: &str,
    args: Value,
) -> Result<rmcp::model::GetPromptResult, String> {
    client
        .get_prompt(GetPromptRequestParams::new(name).with_arguments(arguments(args)))
        .await
        .map_err(|e| e.to_string())
}

async fn read(
    client: &RunningService<RoleClient, impl ClientHandler>,
    uri: &str,
) -> Result<ResourceContents, String> {
    client
        .read_resource(ReadResourceRequestParams::new(uri))
        .await
        .map(|mut r| r.contents.remove(0))
        .map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompts_are_listed_got_with_their_arguments_and_completed() {
    let fixture = fixture();
    let client = ().serve(stdio_serve(&fixture)).await.expect("MCP session");

    let prompts = client.list_all_prompts().await.expect("prompts/list");
    let names: Vec<&str> = prompts.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        ["n_discuss", "n_flood", "n_review"],
        "sorted, prefixed"
    );
    let review = &prompts[2];
    assert_eq!(review.title.as_deref(), Some("Review a file"));
    let args = review.arguments.as_ref().expect("arguments");
    assert_eq!(args[0].name, "path");
    assert_eq!(args[0].required, Some(true));
    assert_eq!(args[1].required, Some(false));

    let got = get(
        &client,
        "n_review",
        json!({"path": "src/lib.rs", "focus": "bugs"}),
    )
    .await
    .expect("prompts/get");
    assert_eq!(
        got.description.as_deref(),
        Some("Ask for a review of one file")
    );
    assert_eq!(
        said(&got),
        [
            "User: Review src/lib.rs, looking for bugs.",
            "Assistant: Which part first?"
        ]
    );
    // An optional argument left out is undefined.
    let got = get(&client, "n_review", json!({"path": "a.rs"}))
        .await
        .expect("get");
    assert!(format!("{:?}", got.messages[0]).contains("Review a.rs."));

    // Every way to get the arguments wrong is refused with the prompt and argument named.
    for (name, args, says) in [
        (
            "n_review",
            json!({}),
            "prompt `n_review` needs argument `path`",
        ),
        (
            "n_review",
            json!({"path": "a", "colour": "red"}),
            "has no argument `colour` (its arguments: path, focus)",
        ),
        (
            "n_review",
            json!({"path": 7}),
            "argument `path` must be a string",
        ),
        (
            "n_review",
            json!({"path": "x".repeat(17_000)}),
            "argument `path` is 17000 bytes",
        ),
        ("review", json!({"path": "a"}), "no prompt `review`"),
        ("n_flood", json!({}), "rendered past 262144 bytes"),
        (
            "n_discuss",
            json!({"note": "../secret.txt"}),
            "no resource `docs://notes/../secret.txt`",
        ),
    ] {
        let error = get(&client, name, args).await.expect_err("refused");
        assert!(error.contains(says), "{name}: {error}");
    }

    // A resource embedded whole, and an image resource.
    let got = get(&client, "n_discuss", json!({"note": "intro.md"}))
        .await
        .expect("get");
    let embedded = serde_json::to_value(&got.messages).expect("json");
    assert_eq!(embedded[0]["content"]["type"], "resource");
    assert_eq!(
        embedded[0]["content"]["resource"]["uri"],
        "docs://notes/intro.md"
    );
    assert_eq!(
        embedded[0]["content"]["resource"]["text"],
        "# Intro\nWelcome."
    );
    assert_eq!(embedded[1]["content"]["type"], "image");
    assert_eq!(embedded[1]["content"]["mimeType"], "image/png");
    assert_eq!(embedded[1]["content"]["data"], "iVBORwABAg==");

    // Completion offers the argument's values that start with what was typed.
    let complete = |argument: &str, value: &str| {
        CompleteRequestParams::new(
            Reference::Prompt(PromptReference::new("n_review")),
            ArgumentInfo::new(argument, value),
        )
    };
    let values = client
        .complete(complete("focus", "s"))
        .await
        .expect("complete");
    assert_eq!(values.completion.values, ["style", "speed"]);
    let values = client
        .complete(complete("path", "s"))
        .await
        .expect("complete");
    assert!(values.completion.values.is_empty());

    // Each get is audited with its kind; the refused ones too.
    let gets = fixture.audited("prompt");
    assert_eq!(gets.len(), 10, "{gets:?}");
    assert_eq!(gets[0]["tool"], "n_review");
    assert_eq!(gets[0]["ensemble"], "notes");
    assert_eq!(gets[0]["outcome"], "ok");
    assert_eq!(gets[2]["outcome"], "refused");
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_are_listed_and_read_within_their_directory_and_bounds() {
    let fixture = fixture();
    let client = ().serve(stdio_serve(&fixture)).await.expect("MCP session");

    let listed = client.list_all_resources().await.expect("resources/list");
    let uris: Vec<(&str, Option<&str>)> = listed
        .iter()
        .map(|r| (r.uri.as_str(), r.mime_type.as_deref()))
        .collect();
    assert_eq!(
        uris,
        [
            ("docs://notes/big.txt", Some("text/plain")),
            ("docs://notes/guides/setup.txt", Some("text/plain")),
            ("docs://notes/intro.md", Some("text/markdown")),
            ("docs://notes/logo", Some("image/png")),
        ],
        "hidden files and links out are not listed"
    );
    let templates = client
        .list_all_resource_templates()
        .await
        .expect("templates");
    assert_eq!(templates.len(), 1);
    assert_eq!(templates[0].uri_template, "docs://notes/{+path}");

    match read(&client, "docs://notes/guides/setup.txt")
        .await
        .expect("read")
    {
        ResourceContents::TextResourceContents {
            text, mime_type, ..
        } => {
            assert_eq!(text, "Run the two commands.");
            assert_eq!(mime_type.as_deref(), Some("text/plain"));
        }
        other => panic!("not text: {other:?}"),
    }
    match read(&client, "docs://notes/logo").await.expect("read") {
        ResourceContents::BlobResourceContents { blob, .. } => assert_eq!(blob, "iVBORwABAg=="),
        other => panic!("not a blob: {other:?}"),
    }
    let error = read(&client, "docs://notes/big.txt")
        .await
        .expect_err("too large");
    assert!(
        error.contains("is 2000 bytes; this host serves at most 1024"),
        "{error}"
    );

    // Every way out of the directory names nothing, as a resource that is not there does.
    for uri in [
        "docs://notes/../secret.txt",
        "docs://notes/%2e%2e/secret.txt",
        "docs://notes/guides/../../secret.txt",
        "docs://notes//etc/passwd",
        "docs://notes/out",
        "docs://notes/.env",
        "docs://notes/guides",
        "docs://notes/missing.md",
        "file:///etc/passwd",
    ] {
        let error = read(&client, uri).await.expect_err("refused");
        assert!(error.contains("no resource"), "{uri}: {error}");
        assert!(
            !error.contains("outside") && !error.contains("secret\""),
            "{error}"
        );
    }
    let long = format!("docs://notes/{}", "a/".repeat(5000));
    assert!(read(&client, &long).await.is_err());

    // Completion of the template's path.
    let values = client
        .complete(CompleteRequestParams::new(
            Reference::Resource(ResourceTemplateReference::new("docs://notes/{+path}")),
            ArgumentInfo::new("path", "gu"),
        ))
        .await
        .expect("complete");
    assert_eq!(values.completion.values, ["guides/setup.txt"]);

    // The host goes on answering, and each read was audited.
    assert!(read(&client, "docs://notes/intro.md").await.is_ok());
    assert_eq!(fixture.audited("resource").len(), 14);
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_is_told_when_its_resources_change_and_a_reload_changes_the_lists() {
    let fixture = fixture();
    let watcher = Watcher::default();
    let client = watcher
        .clone()
        .serve(stdio_serve(&fixture))
        .await
        .expect("MCP session");
    let docs = fixture.root().join("docs");
    let subscribe = |uri: &str| client.subscribe(SubscribeRequestParams::new(uri));
    subscribe("docs://notes/intro.md").await.expect("subscribe");
    subscribe("docs://notes/guides/setup.txt")
        .await
        .expect("subscribe");
    // Nothing outside the sets, nor what a set could never serve.
    for uri in [
        "file:///etc/passwd",
        "docs://notes/../x",
        "docs://notes/.env",
    ] {
        assert!(subscribe(uri).await.is_err(), "{uri}");
    }

    std::fs::write(docs.join("intro.md"), "# Intro\nChanged.").expect("write");
    watcher.wait_for("updated docs://notes/intro.md").await;

    // Unsubscribed: a change to intro.md is not sent. setup.txt is written after it, so
    // had intro.md's update been sent, it would have come first.
    client
        .unsubscribe(UnsubscribeRequestParams::new("docs://notes/intro.md"))
        .await
        .expect("unsubscribe");
    watcher.seen.lock().expect("seen").clear();
    std::fs::write(docs.join("intro.md"), "# Intro\nAgain.").expect("write");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    std::fs::write(docs.join("guides/setup.txt"), "Changed.").expect("write");
    let seen = watcher
        .wait_for("updated docs://notes/guides/setup.txt")
        .await;
    assert!(!seen.iter().any(|s| s.contains("intro.md")), "{seen:?}");

    // A new file changes the list.
    std::fs::write(docs.join("new.md"), "new").expect("write");
    watcher.wait_for("resources changed").await;

    // A reload that changes a prompt changes the prompt list.
    watcher.seen.lock().expect("seen").clear();
    fixture.write(
        "notes.toml",
        &NOTES.replace("Which part first?", "Where to start?"),
    );
    watcher.wait_for("prompts changed").await;
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_holds_a_bounded_number_of_subscriptions() {
    let fixture = fixture();
    let client = ().serve(stdio_serve(&fixture)).await.expect("MCP session");
    let max = toolhost::mcp::resources::MAX_SUBSCRIPTIONS;
    for i in 0..max {
        client
            .subscribe(SubscribeRequestParams::new(format!("docs://notes/f{i}")))
            .await
            .expect("subscribe");
    }
    let error = client
        .subscribe(SubscribeRequestParams::new("docs://notes/one-more"))
        .await
        .expect_err("past the bound");
    assert!(
        error.to_string().contains("subscribed to 64 resources"),
        "{error}"
    );
    // Again to one it holds is fine, and one freed makes room.
    client
        .subscribe(SubscribeRequestParams::new("docs://notes/f0"))
        .await
        .expect("again");
    client
        .unsubscribe(UnsubscribeRequestParams::new("docs://notes/f0"))
        .await
        .expect("unsubscribe");
    client
        .subscribe(SubscribeRequestParams::new("docs://notes/one-more"))
        .await
        .expect("room again");
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompt_names_and_uri_prefixes_collide_across_ensembles_as_tool_names_do() {
    let fixture = fixture();
    fixture.write(
        "other.toml",
        "schema-version = 1\n[ensemble]\nname = \"other\"\n\n[[prompts]]\nname = \"n_review\"\n\
         description = \"Taken\"\nmessages = [{ text = \"x\" }]\n",
    );
    fixture.write(
        "zoo.toml",
        "schema-version = 1\n[ensemble]\nname = \"zoo\"\n\n[[resources]]\nname = \"deep\"\n\
         directory = \"../docs\"\nuri-prefix = \"docs://notes/guides/\"\n",
    );
    let resolved = fixture.resolve().await;
    let errors: Vec<String> = resolved.diagnostics().map(|d| d.to_string()).collect();
    assert_eq!(errors.len(), 2, "{errors:?}");
    // `notes` loads first (file-name order) and keeps both; `other` and `zoo` are refused.
    assert!(
        errors[0].contains("prompt name `n_review` is already used by ensemble `notes`"),
        "{errors:?}"
    );
    assert!(
        errors[1].contains(
            "the URI prefix `docs://notes/guides/` (of resource set `deep`) overlaps the URI \
             prefix `docs://notes/` of ensemble `notes`"
        ),
        "{errors:?}"
    );
    assert!(resolved.catalog.prompt("n_review").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_allow_and_deny_lists_hold_for_prompts_and_resources() {
    use toolhost::invoke::CallPolicy;
    let fixture = fixture();
    let host = fixture.host().await;
    let denied = host.session(
        "s",
        CallPolicy {
            allow: None,
            deny: vec!["n_docs".into(), "n_rev*".into()],
        },
    );
    let error = host
        .get_prompt(&denied, "n_review", &arguments(json!({"path": "a"})))
        .await
        .expect_err("denied");
    assert_eq!(error.to_string(), "no prompt `n_review`");
    let error = host
        .read_resource(&denied, "docs://notes/intro.md")
        .await
        .expect_err("denied");
    assert_eq!(error.to_string(), "no resource `docs://notes/intro.md`");
    // A prompt it may get cannot embed a resource it may not read.
    let error = host
        .get_prompt(
            &denied,
            "n_discuss",
            &arguments(json!({"note": "intro.md"})),
        )
        .await
        .expect_err("denied");
    assert!(error.to_string().contains("no resource"), "{error}");
    let allowed = host.session("t", CallPolicy::default());
    assert!(
        host.read_resource(&allowed, "docs://notes/intro.md")
            .await
            .is_ok()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_2026_07_28_prompts_and_resources_are_served_and_listened_to() {
    use rmcp::model::{ErrorCode, ServerNotification, SubscriptionFilter};
    let fixture = fixture();
    let client = crate::mcp_revisions::modern_stdio(&fixture).await;
    let info = client.peer_info().expect("discovered");
    assert_eq!(info.protocol_version, ProtocolVersion::V_2026_07_28);
    let capabilities = &info.capabilities;
    assert_eq!(
        capabilities.resources.as_ref().and_then(|r| r.subscribe),
        Some(true)
    );

    let prompts = client.list_all_prompts().await.expect("prompts/list");
    assert_eq!(prompts.len(), 3);
    let got = get(&client, "n_review", json!({"path": "a.rs"}))
        .await
        .expect("get");
    assert!(format!("{:?}", got.messages[0]).contains("Review a.rs."));
    let text = read(&client, "docs://notes/intro.md").await.expect("read");
    assert!(matches!(
        text,
        ResourceContents::TextResourceContents { .. }
    ));
    let error = client
        .read_resource(ReadResourceRequestParams::new("docs://notes/nothing"))
        .await
        .expect_err("not found");
    match error {
        rmcp::ServiceError::McpError(error) => assert_eq!(error.code, ErrorCode::INVALID_PARAMS),
        other => panic!("{other:?}"),
    }

    let filter = SubscriptionFilter::builder()
        .resources_list_changed()
        .resource_subscriptions(["docs://notes/intro.md"])
        .build();
    let mut subscription = client.peer().listen(filter).await.expect("listen");
    std::fs::write(fixture.root().join("docs/intro.md"), "changed").expect("write");
    let notification = tokio::time::timeout(DEADLINE, subscription.next())
        .await
        .expect("a notification before the deadline")
        .expect("a well-formed stream")
        .expect("not ended");
    match notification {
        ServerNotification::ResourceUpdatedNotification(updated) => {
            assert_eq!(updated.params.uri, "docs://notes/intro.md")
        }
        other => panic!("{other:?}"),
    }
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_ensembles_offer_prompts_and_the_sample_documents() {
    let fixture = Fixture::new();
    crate::support::copy_shipped(fixture.root());
    let client = ().serve(stdio_serve(&fixture)).await.expect("MCP session");
    let prompts = client.list_all_prompts().await.expect("prompts/list");
    let names: Vec<&str> = prompts.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["summarize_sample", "tidy_text"]);
    let resources = client.list_all_resources().await.expect("resources/list");
    let uris: Vec<&str> = resources.iter().map(|r| r.uri.as_str()).collect();
    assert_eq!(
        uris,
        ["samples://notes/shopping.txt", "samples://welcome.md"]
    );

    let welcome =
        std::fs::read_to_string(fixture.root().join("plugins/files/sample-data/welcome.md"))
            .expect("welcome.md");
    let got = get(&client, "summarize_sample", json!({"path": "welcome.md"}))
        .await
        .expect("prompts/get");
    let messages = serde_json::to_value(&got.messages).expect("json");
    assert_eq!(messages[0]["content"]["resource"]["text"], json!(welcome));
    assert_eq!(
        messages[1]["content"]["text"],
        "Summarize the document above in three bullets."
    );
    let got = get(
        &client,
        "tidy_text",
        json!({"text": "teh cat", "audience": "children"}),
    )
    .await
    .expect("prompts/get");
    let text = format!("{:?}", got.messages[0].content);
    assert!(
        text.contains("for children") && text.contains("teh cat"),
        "{text}"
    );
    client.cancel().await.expect("close");
}
