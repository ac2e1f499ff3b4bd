//! The ensembles' prompts and resources in the chat API: listed for the page within
//! `[chat]`'s lists, brought into a run by a chat request's `prompt` and `resources`, and
//! every way to get them wrong refused with a 400 that names it, before any model is asked.

use crate::scripted::openai;
use crate::support::Fixture;
use crate::web::{Host, base, chat, get, host, post_json, serve};
use serde_json::{Value, json};

/// Adds `offers.toml`: a prompt `brief` (argument `topic`, required) and the resources of
/// `docs/` at `docs://` (brief.md, and logo.png, which is not text).
pub(crate) fn add_offers(fixture: &Fixture) {
    let docs = fixture.mkdir("docs");
    std::fs::write(docs.join("brief.md"), "Sums are associative.").expect("brief.md");
    std::fs::write(docs.join("logo.png"), [0x89, b'P', b'N', b'G']).expect("logo.png");
    fixture.write(
        "offers.toml",
        "schema-version = 1\n[ensemble]\nname = \"offers\"\n\n[[resources]]\nname = \"docs\"\n\
         directory = \"../docs\"\nuri-prefix = \"docs://\"\n\n[[prompts]]\nname = \"brief\"\n\
         description = \"Briefs the model\"\narguments = [{ name = \"topic\", required = true }]\n\
         messages = [{ text = \"Write a brief on {{ topic }}.\" }]\n",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_starts_from_a_prompt_and_resources_and_bad_ones_are_refused_by_name() {
    let Host {
        model,
        fixture,
        server: _server,
        api,
    } = host(vec![openai::text("Done.")], "");
    add_offers(&fixture);
    // The host picks the new file up.
    let prompts = format!("{}/prompts", api.trim_end_matches("/conversations"));
    let deadline = std::time::Instant::now() + crate::web::DEADLINE;
    let listed = loop {
        let (status, listed) = get(&prompts).await;
        assert_eq!(status, 200);
        if listed["prompts"].as_array().is_some_and(|p| !p.is_empty()) {
            break listed;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the prompt never came"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(listed["prompts"][0]["name"], "brief");
    assert_eq!(listed["prompts"][0]["arguments"][0]["required"], true);
    let (_, resources) = get(&prompts.replace("prompts", "resources")).await;
    let uris: Vec<&str> = resources["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .map(|r| r["uri"].as_str().expect("uri"))
        .collect();
    assert_eq!(uris, ["docs://brief.md", "docs://logo.png"]);

    let too_many: Vec<String> = (0..17).map(|i| format!("docs://{i}")).collect();
    for (body, says) in [
        (
            json!({"message": "", "prompt": {"name": "brief"}}),
            "/prompt: prompt `brief` needs argument `topic`",
        ),
        (
            json!({"message": "x", "prompt": {"name": "nope"}}),
            "/prompt: no prompt `nope`",
        ),
        (
            json!({"message": "x", "prompt": {"name": "brief", "arguments": {"topic": 3}}}),
            "must be a string",
        ),
        (
            json!({"message": "x", "resources": ["docs://../toolhost.toml"]}),
            "/resources/0: no resource `docs://../toolhost.toml`",
        ),
        (
            json!({"message": "x", "resources": too_many}),
            "/resources: 17 resources; at most 16",
        ),
        (json!({"message": ""}), "/message: the message is empty"),
    ] {
        let (status, answer) = post_json(&api, body.clone()).await;
        assert_eq!(status, 400, "{body}: {answer}");
        let message = answer.to_string();
        assert!(message.contains(says), "{body}: {message}");
    }
    assert!(model.requests().is_empty(), "no model was asked");

    let events = chat(
        &api,
        json!({
            "message": "",
            "prompt": {"name": "brief", "arguments": {"topic": "sums"}},
            "resources": ["docs://brief.md", "docs://logo.png"],
        }),
    )
    .await
    .rest()
    .await;
    let id = events[0]["id"]
        .as_str()
        .expect("a conversation")
        .to_string();
    assert_eq!(events.last().expect("done")["type"], "done");
    let sent = &model.requests()[0].body["messages"];
    let user: Vec<&Value> = sent
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "user")
        .collect();
    assert_eq!(user.len(), 1);
    assert_eq!(
        user[0]["content"],
        "Write a brief on sums.\n\nResource docs://brief.md (text/markdown):\nSums are associative."
    );
    let (_, stored) = get(&format!("{api}/{id}")).await;
    assert_eq!(stored["title"], "/brief");
    let first = &stored["log"][0];
    assert_eq!(first["type"], "user");
    assert_eq!(first["prompt"], "brief");
    assert_eq!(
        first["resources"],
        json!(["docs://brief.md", "docs://logo.png"])
    );
    assert!(
        first["notes"][0]
            .as_str()
            .expect("a note")
            .contains("docs://logo.png (image/png, 4 bytes)")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chats_deny_list_hides_prompts_and_resources() {
    let model = crate::scripted::Scripted::start(vec![]);
    let fixture = crate::web::fixture(&model.base_url, "deny = [\"brief\", \"docs\"]");
    add_offers(&fixture);
    let server = serve(&fixture, &[]);
    let (_, prompts) = get(&format!("{}/api/prompts", base(&server))).await;
    assert_eq!(prompts["prompts"], json!([]));
    let (_, resources) = get(&format!("{}/api/resources", base(&server))).await;
    assert_eq!(resources["resources"], json!([]));
    let api = format!("{}/api/conversations", base(&server));
    let (status, answer) = post_json(
        &api,
        json!({"message": "x", "resources": ["docs://brief.md"]}),
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    let (status, answer) = post_json(
        &api,
        json!({"message": "x", "prompt": {"name": "brief", "arguments": {"topic": "a"}}}),
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer.to_string().contains("no prompt `brief`"), "{answer}");
}
