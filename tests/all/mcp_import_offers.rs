//! An imported MCP server's prompts and resources, passed through: another `toolhost serve`
//! (whose ensembles offer a prompt and files) imported by the host an MCP client talks to.
//! Its prompts take the ensemble's prefix and are got on the server; its resources are
//! listed, read and subscribed to there, and a change on the server's disk reaches the
//! client; a URI the server never named is asked of no one.

// resources/subscribe is the handshake revisions' way, which toolhost serves.
#![allow(deprecated)]

use crate::mcp::{DEADLINE, stdio_serve};
use crate::mcp_import::{import_ensemble, inner_fixture};
use crate::support::Fixture;
use rmcp::model::{
    ClientConfig, GetPromptRequestParams, ProtocolVersion, ReadResourceRequestParams,
    ResourceContents, ResourceUpdatedNotificationParam, SubscribeRequestParams,
};
use rmcp::service::NotificationContext;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

#[derive(Clone, Default)]
struct Updates {
    seen: Arc<Mutex<Vec<String>>>,
    arrived: Arc<Notify>,
}

impl ClientHandler for Updates {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::default().with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.seen.lock().expect("seen").push(params.uri);
        self.arrived.notify_one();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_imported_servers_prompts_and_resources_are_passed_through() {
    let inner = inner_fixture();
    crate::web_offers::add_offers(&inner);
    let outer = Fixture::new();
    outer.write("inner.toml", &import_ensemble(&inner, ""));
    // `check` counts the server's prompt and the resources it passes on.
    let mut check = std::process::Command::new(env!("CARGO_BIN_EXE_toolhost"));
    crate::mcp::configure(&mut check, &outer);
    let checked = check.arg("check").output().expect("check");
    let said = String::from_utf8_lossy(&checked.stdout);
    assert!(said.contains("1 prompt(s), 1 resource set(s)"), "{said}");
    let updates = Updates::default();
    let client = updates
        .clone()
        .serve(stdio_serve(&outer))
        .await
        .expect("MCP session");

    let prompts = client.list_all_prompts().await.expect("prompts/list");
    let names: Vec<&str> = prompts.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["in_brief"], "prefixed as the import's tools are");
    let arguments = prompts[0].arguments.as_ref().expect("arguments");
    assert_eq!(arguments[0].name, "topic");
    assert_eq!(arguments[0].required, Some(true));
    let args = serde_json::json!({"topic": "sums"});
    let got = client
        .get_prompt(
            GetPromptRequestParams::new("in_brief")
                .with_arguments(args.as_object().expect("object").clone()),
        )
        .await
        .expect("prompts/get");
    assert_eq!(
        got.messages[0].content.as_text().map(|t| t.text.as_str()),
        Some("Write a brief on sums.")
    );
    // Checked here first: the server is not asked for a prompt without its argument.
    let error = client
        .get_prompt(GetPromptRequestParams::new("in_brief"))
        .await
        .expect_err("refused");
    assert!(
        error.to_string().contains("needs argument `topic`"),
        "{error}"
    );

    let resources = client.list_all_resources().await.expect("resources/list");
    let uris: Vec<&str> = resources.iter().map(|r| r.uri.as_str()).collect();
    assert_eq!(uris, ["docs://brief.md", "docs://logo.png"]);
    let templates = client
        .list_all_resource_templates()
        .await
        .expect("templates");
    assert!(
        templates.iter().any(|t| t.uri_template == "docs://{+path}"),
        "{templates:?}"
    );
    let read = client
        .read_resource(ReadResourceRequestParams::new("docs://brief.md"))
        .await
        .expect("resources/read");
    match &read.contents[0] {
        ResourceContents::TextResourceContents { text, .. } => {
            assert_eq!(text, "Sums are associative.")
        }
        other => panic!("{other:?}"),
    }
    for uri in ["made-up://x", "docs://../toolhost.toml"] {
        let error = client
            .read_resource(ReadResourceRequestParams::new(uri))
            .await
            .expect_err("refused");
        assert!(error.to_string().contains("resource"), "{uri}: {error}");
    }

    // A subscription reaches the server; a change on its disk reaches the client.
    client
        .subscribe(SubscribeRequestParams::new("docs://brief.md"))
        .await
        .expect("subscribe");
    let wait = async {
        let mut round = 0u32;
        loop {
            let arrived = updates.arrived.notified();
            if updates
                .seen
                .lock()
                .expect("seen")
                .iter()
                .any(|u| u == "docs://brief.md")
            {
                return;
            }
            // The server's stream may open after the first write: write until one is seen.
            round += 1;
            std::fs::write(
                inner.root().join("docs/brief.md"),
                format!("Sums are associative ({round})."),
            )
            .expect("write");
            let _ = tokio::time::timeout(std::time::Duration::from_millis(500), arrived).await;
        }
    };
    tokio::time::timeout(DEADLINE, wait)
        .await
        .expect("the server's update reached the client");
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_prompt_whose_name_is_taken_is_left_out_not_its_ensemble() {
    let inner = inner_fixture();
    crate::web_offers::add_offers(&inner);
    let outer = Fixture::new();
    // `a.toml` loads first and takes the name the server's prompt would get.
    outer.write(
        "a.toml",
        "schema-version = 1\n[ensemble]\nname = \"a\"\n\n[[prompts]]\nname = \"in_brief\"\n\
         description = \"Taken first\"\nmessages = [{ text = \"mine\" }]\n",
    );
    outer.write("inner.toml", &import_ensemble(&inner, ""));
    let client = ().serve(stdio_serve(&outer)).await.expect("MCP session");
    let tools = client.list_all_tools().await.expect("tools/list");
    assert!(
        tools.iter().any(|t| t.name == "in_echo"),
        "the import still serves"
    );
    let prompts = client.list_all_prompts().await.expect("prompts/list");
    let brief: Vec<_> = prompts.iter().filter(|p| p.name == "in_brief").collect();
    assert_eq!(brief.len(), 1);
    assert_eq!(brief[0].description.as_deref(), Some("Taken first"));
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_imported_servers_resources_have_one_owner_here_too() {
    let inner = inner_fixture();
    crate::web_offers::add_offers(&inner);
    // The outer host's own files at the URIs the server lists (its template `docs://{+path}`
    // and `docs://brief.md`): the later ensemble is refused, whichever it is.
    for (files, refused) in [("z-files", "inner"), ("a-files", "inner")] {
        let outer = Fixture::new();
        outer.write("inner.toml", &import_ensemble(&inner, ""));
        let shelf = outer.mkdir("shelf");
        std::fs::write(shelf.join("brief.md"), "An impostor's brief.").expect("file");
        outer.write(
            &format!("{files}.toml"),
            &format!(
                "schema-version = 1\n[ensemble]\nname = \"{files}\"\n\n[[resources]]\nname = \
                 \"mine\"\ndirectory = \"../shelf\"\nuri-prefix = \"docs://\"\n"
            ),
        );
        let resolved = outer.resolve().await;
        let errors: Vec<String> = resolved.diagnostics().map(|d| d.to_string()).collect();
        assert_eq!(errors.len(), 1, "{errors:?}");
        let loser = if files.starts_with('z') {
            files
        } else {
            refused
        };
        assert!(
            errors[0].contains(&format!("ensemble `{loser}` is refused"))
                && errors[0].contains("overlaps"),
            "{errors:?}"
        );
        if files.starts_with('z') {
            assert!(
                errors[0].contains("(of resource set `mine`) overlaps the"),
                "{errors:?}"
            );
        } else {
            assert!(
                errors[0].contains(
                    "(passed on by its imported server) overlaps the URI prefix \
                     `docs://` of ensemble `a-files`"
                ),
                "{errors:?}"
            );
        }
    }
}
