//! Prompts and resources a `toolhost:plugin@0.3.0` component offers (the `librarian` test
//! component), served by `toolhost serve` to rmcp's client over stdio: listed with the
//! ensemble's prefix beside its tools, got and read in a fresh instance each, and every way a
//! hostile or broken component misbehaves answered with a clear error while the host goes on
//! serving: a prompt that never ends, one that answers past `max-output-bytes`, a read that
//! traps, one that passes its text off as another URI's, one that returns nothing.

use crate::mcp::stdio_serve;
use crate::support::Fixture;
use rmcp::model::{GetPromptRequestParams, ReadResourceRequestParams, ResourceContents};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

/// `library.toml`: the librarian with prefix `lib` and short limits, so that the prompt
/// that never ends and the ones that answer too much are cut quickly.
const LIBRARY: &str = r#"schema-version = 1

[ensemble]
name = "library"
prefix = "lib"
component = "../librarian.wasm"

[defaults]
timeout-ms = 500
max-output-bytes = 65536
"#;

fn fixture() -> Fixture {
    let fixture = Fixture::new();
    std::fs::copy(
        toolhost_testkit::LIBRARIAN,
        fixture.root().join("librarian.wasm"),
    )
    .expect("copy");
    fixture.write("library.toml", LIBRARY);
    fixture
}

async fn get(
    client: &RunningService<RoleClient, ()>,
    name: &str,
    args: Value,
) -> Result<rmcp::model::GetPromptResult, String> {
    let args = args.as_object().expect("an object").clone();
    client
        .get_prompt(GetPromptRequestParams::new(name).with_arguments(args))
        .await
        .map_err(|e| e.to_string())
}

async fn read(
    client: &RunningService<RoleClient, ()>,
    uri: &str,
) -> Result<Vec<ResourceContents>, String> {
    client
        .read_resource(ReadResourceRequestParams::new(uri))
        .await
        .map(|r| r.contents)
        .map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_components_prompts_are_listed_with_the_prefix_and_got_in_a_fresh_instance() {
    let fixture = fixture();
    let client = ().serve(stdio_serve(&fixture)).await.expect("MCP session");

    // Its tools are served as ever, beside its prompts.
    let tools = client.list_all_tools().await.expect("tools/list");
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0].name, "lib_shelve");

    let prompts = client.list_all_prompts().await.expect("prompts/list");
    let names: Vec<&str> = prompts.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "lib_brief",
            "lib_cover",
            "lib_forever",
            "lib_picky",
            "lib_tome",
            "lib_vanished"
        ]
    );
    let brief = &prompts[0];
    assert_eq!(brief.title.as_deref(), Some("Write a brief"));
    let args = brief.arguments.as_ref().expect("arguments");
    assert_eq!(
        (args[0].name.as_str(), args[0].required),
        ("topic", Some(true))
    );
    assert_eq!(
        (args[1].name.as_str(), args[1].required),
        ("tone", Some(false))
    );

    let got = get(
        &client,
        "lib_brief",
        json!({"topic": "owls", "tone": "dry"}),
    )
    .await
    .expect("prompts/get");
    assert_eq!(
        crate::mcp_offers::said(&got),
        [
            "User: Write a brief on owls, in a dry tone.",
            "Assistant: How long should it be?"
        ]
    );
    let cover = get(&client, "lib_cover", json!({})).await.expect("get");
    let cover = serde_json::to_value(&cover.messages).expect("json");
    assert_eq!(cover[0]["content"]["type"], "image");
    assert_eq!(cover[0]["content"]["mimeType"], "image/png");

    // The host checks the arguments before the component runs; the component's own
    // refusals, its limits and its not-found are each said plainly.
    for (name, args, says) in [
        (
            "lib_brief",
            json!({}),
            "prompt `lib_brief` needs argument `topic`",
        ),
        (
            "lib_brief",
            json!({"topic": "owls", "mood": "x"}),
            "has no argument `mood` (its arguments: topic, tone)",
        ),
        (
            "lib_picky",
            json!({"word": "zyx"}),
            "-32602: prompt `lib_picky`: `zyx` is not a word I know",
        ),
        (
            "lib_forever",
            json!({}),
            "prompt `lib_forever`: the component did not finish within 500 ms",
        ),
        // 8 MiB: wasmtime stops copying it out at the call's share, as for a tool's result.
        ("lib_tome", json!({}), "too much data is being copied"),
        ("lib_vanished", json!({}), "no prompt `lib_vanished`"),
        ("brief", json!({"topic": "owls"}), "no prompt `brief`"),
    ] {
        let error = get(&client, name, args).await.expect_err("refused");
        assert!(error.contains(says), "{name}: {error}");
    }
    // The host still answers.
    assert!(
        get(&client, "lib_brief", json!({"topic": "bats"}))
            .await
            .is_ok()
    );

    // Each get is audited with its kind, the refused ones too.
    let gets = fixture.audited("prompt");
    assert_eq!(gets.len(), 10, "{gets:?}");
    assert_eq!(gets[0]["tool"], "lib_brief");
    assert_eq!(gets[0]["ensemble"], "library");
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_components_resources_are_listed_read_and_bounded() {
    let fixture = fixture();
    let client = ().serve(stdio_serve(&fixture)).await.expect("MCP session");

    let listed = client.list_all_resources().await.expect("resources/list");
    let uris: Vec<(&str, &str, Option<&str>)> = listed
        .iter()
        .map(|r| (r.uri.as_str(), r.name.as_str(), r.mime_type.as_deref()))
        .collect();
    assert_eq!(
        uris,
        [
            ("books://cover.png", "cover", Some("image/png")),
            ("books://empty", "empty", None),
            ("books://huge", "huge", None),
            ("books://liar", "liar", None),
            ("books://trap", "trap", None),
            ("books://welcome", "welcome", Some("text/markdown")),
        ]
    );
    // What the component says of each resource is listed with it (but no size: it said none).
    assert_eq!(listed[5].description.as_deref(), Some("the welcome"));
    assert_eq!(listed[5].size, None);
    let templates = client
        .list_all_resource_templates()
        .await
        .expect("templates");
    assert_eq!(templates.len(), 1);
    assert_eq!(templates[0].uri_template, "books://shelf/{topic}");
    assert_eq!(templates[0].title.as_deref(), Some("A shelf"));

    let welcome = read(&client, "books://welcome").await.expect("read");
    match &welcome[..] {
        [
            ResourceContents::TextResourceContents {
                uri,
                mime_type,
                text,
                ..
            },
        ] => {
            assert_eq!(uri, "books://welcome");
            assert_eq!(mime_type.as_deref(), Some("text/markdown"));
            assert_eq!(text, "# Welcome\nRead on.");
        }
        other => panic!("{other:?}"),
    }
    let cover = read(&client, "books://cover.png").await.expect("read");
    match &cover[..] {
        [ResourceContents::BlobResourceContents { blob, .. }] => {
            assert_eq!(blob, "iVBORw0KGgoAAQID");
        }
        other => panic!("{other:?}"),
    }
    // A template's URI is read by the component; one no template matches runs nothing.
    let shelf = read(&client, "books://shelf/owls").await.expect("read");
    assert!(format!("{shelf:?}").contains("Books on owls."));

    for (uri, says) in [
        ("books://nowhere", "no resource `books://nowhere`"),
        ("books://shelf/a/b", "no resource `books://shelf/a/b`"),
        (
            "books://trap",
            "resource `books://trap` could not be read: crashed",
        ),
        // Its text under another URI is left out: nothing is left.
        ("books://liar", "no resource `books://liar`"),
        ("books://empty", "returned no contents"),
        // 200 KB: within what wasmtime copies out, past `max-output-bytes`.
        (
            "books://huge",
            "returned 200022 bytes, more than its limit of 65536 bytes",
        ),
    ] {
        let error = read(&client, uri).await.expect_err("refused");
        assert!(error.contains(says), "{uri}: {error}");
    }
    assert!(
        read(&client, "books://welcome").await.is_ok(),
        "still serving"
    );

    assert_eq!(fixture.audited("resource").len(), 10);
    client.cancel().await.expect("close");
}

#[test]
fn describe_shows_a_components_prompts_and_resources() {
    let fixture = fixture();
    let out =
        crate::cli::toolhost_with_stdin(&fixture, &["describe", "librarian.wasm", "--json"], None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report["world"], "toolhost:plugin@0.3.0");
    assert_eq!(report["prompts"][0]["name"], "brief");
    assert_eq!(report["prompts"][0]["arguments"][0]["required"], true);
    assert_eq!(report["resources"][0]["uri"], "books://welcome");
    assert_eq!(
        report["resource_templates"][0]["uri_template"],
        "books://shelf/{topic}"
    );
    assert_eq!(report["unused_exports"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_components_prompts_and_reads_run_within_the_ensembles_concurrency() {
    let fixture = fixture();
    fixture.write(
        "library.toml",
        &LIBRARY.replace(
            "max-output-bytes = 65536",
            "max-output-bytes = 65536\nmax-concurrency = 1\nmax-queue = 0",
        ),
    );
    let client = ().serve(stdio_serve(&fixture)).await.expect("MCP session");
    // One never ends (until its timeout), holding the only place; the other is refused at
    // once rather than queued.
    let (first, second) = tokio::join!(
        get(&client, "lib_forever", json!({})),
        get(&client, "lib_forever", json!({})),
    );
    let mut errors = [
        first.expect_err("refused or timed out"),
        second.expect_err("refused or timed out"),
    ];
    errors.sort();
    assert!(
        errors
            .iter()
            .any(|e| e.contains("did not finish within 500 ms")),
        "{errors:?}"
    );
    assert!(
        errors.iter().any(|e| e.contains(
            "1 prompts and resources of ensemble library are being given and 0 more wait"
        )),
        "{errors:?}"
    );
    // The place is free again.
    assert!(
        get(&client, "lib_brief", json!({"topic": "owls"}))
            .await
            .is_ok()
    );
    client.cancel().await.expect("close");
}

/// The diagnostics of `fixture`'s ensembles, rendered as `check` prints them.
async fn refusals(fixture: &Fixture) -> Vec<String> {
    let resolved = fixture.resolve().await;
    resolved.diagnostics().map(|d| d.to_string()).collect()
}

/// A files set `name` over an empty `shelf/` directory at `prefix`, in ensemble `name`.
fn files_set(fixture: &Fixture, name: &str, prefix: &str) {
    fixture.mkdir("shelf");
    fixture.write(
        &format!("{name}.toml"),
        &format!(
            "schema-version = 1\n[ensemble]\nname = \"{name}\"\n\n[[resources]]\nname = \
             \"{name}\"\ndirectory = \"../shelf\"\nuri-prefix = \"{prefix}\"\n"
        ),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_uri_has_one_owner_whatever_offers_it() {
    // Two components that list the same URIs (the fourth hostile suite's impostor): the
    // later ensemble is refused, at the place that names its component, and the first's
    // place is noted.
    let fixture = self::fixture();
    fixture.write(
        "copy.toml",
        &LIBRARY
            .replace("name = \"library\"", "name = \"copy\"")
            .replace("prefix = \"lib\"", "prefix = \"cp\""),
    );
    let errors = refusals(&fixture).await;
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("library.toml:6:")
            && errors[0].contains("(passed on by its component) overlaps the resource `books://")
            && errors[0].contains("of ensemble `copy`; ensemble `library` is refused")
            && errors[0].contains("copy.toml:6:")
            && errors[0].contains("first defined here"),
        "{errors:?}"
    );
    let client = ().serve(stdio_serve(&fixture)).await.expect("MCP session");
    let listed = client.list_all_resources().await.expect("resources/list");
    let mut uris: Vec<&str> = listed.iter().map(|r| r.uri.as_str()).collect();
    let all = uris.len();
    uris.dedup();
    assert_eq!(uris.len(), all, "each URI once");
    let contents = read(&client, "books://welcome").await.expect("read");
    assert_eq!(contents.len(), 1);
    client.cancel().await.expect("close");

    // A files set under whose prefix a component's template falls: the later one is
    // refused, whichever it is.
    let fixture = self::fixture();
    files_set(&fixture, "shelf", "books://shelf/");
    let errors = refusals(&fixture).await;
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains(
            "the URI prefix `books://shelf/` (of resource set `shelf`) overlaps the template \
             `books://shelf/{topic}` of ensemble `library`; ensemble `shelf` is refused"
        ),
        "{errors:?}"
    );
    let fixture = self::fixture();
    files_set(&fixture, "books", "books://");
    let errors = refusals(&fixture).await;
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains(
            "(passed on by its component) overlaps the URI prefix `books://` of \
             ensemble `books`; ensemble `library` is refused"
        ),
        "{errors:?}"
    );
    // Beside a prefix no URI of it can start, both load.
    let fixture = self::fixture();
    files_set(&fixture, "shelves", "shelves://");
    assert_eq!(refusals(&fixture).await, Vec::<String>::new());
}
