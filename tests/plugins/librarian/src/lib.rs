//! A `toolhost:plugin@0.3.0` component for the tests of a component's prompts and resources:
//! one tool, prompts with arguments (text, an image, both roles), resources (text, bytes, a
//! template), and the ways a hostile or broken one misbehaves: a prompt that never ends,
//! one that answers far too much, a read that traps, one that passes its text off as
//! another URI's, one that returns nothing.

wit_bindgen::generate!({
    path: "../../../wit/toolhost-plugin-0.3.0",
    world: "plugin",
});

use exports::toolhost::plugin::offers;
use exports::toolhost::plugin::tool::{Guest, ToolError, ToolResult, ToolSpec};
use toolhost::plugin::types::{
    Content, EmbeddedResource, Media, OfferError, PromptArgument, PromptMessage, PromptSpec,
    ResourceContents, ResourceSpec, ResourceTemplateSpec, Role,
};

struct Librarian;

const PNG: &[u8] = &[0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 1, 2, 3];

impl Guest for Librarian {
    fn describe() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "shelve".into(),
            description: "Says where a book goes.".into(),
            input_schema: r#"{"type":"object","properties":{"title":{"type":"string"}},"required":["title"]}"#.into(),
            output_schema: None,
        }]
    }

    fn call(name: String, arguments: String) -> Result<ToolResult, ToolError> {
        match name.as_str() {
            "shelve" => Ok(ToolResult {
                content: vec![Content::Text(format!("shelved {arguments}"))],
                structured: None,
            }),
            other => Err(ToolError::Failed(format!("no tool {other}"))),
        }
    }
}

fn argument(name: &str, required: bool) -> PromptArgument {
    PromptArgument {
        name: name.into(),
        description: Some(format!("the {name}")),
        required,
    }
}

fn prompt(name: &str, description: &str, arguments: Vec<PromptArgument>) -> PromptSpec {
    PromptSpec {
        name: name.into(),
        title: None,
        description: description.into(),
        arguments,
    }
}

fn resource(uri: &str, name: &str, mime: Option<&str>) -> ResourceSpec {
    ResourceSpec {
        uri: uri.into(),
        name: name.into(),
        title: None,
        description: Some(format!("the {name}")),
        mime_type: mime.map(Into::into),
    }
}

fn text(uri: &str, mime: &str, text: String) -> EmbeddedResource {
    EmbeddedResource {
        uri: uri.into(),
        mime_type: Some(mime.into()),
        contents: ResourceContents::Text(text),
    }
}

impl offers::Guest for Librarian {
    fn list_prompts() -> Vec<PromptSpec> {
        let mut brief = prompt(
            "brief",
            "Ask for a brief on a topic",
            vec![argument("topic", true), argument("tone", false)],
        );
        brief.title = Some("Write a brief".into());
        vec![
            brief,
            prompt("cover", "Show the cover", Vec::new()),
            prompt("forever", "Never ends", Vec::new()),
            prompt("tome", "Answers far too much", Vec::new()),
            prompt("picky", "Refuses its arguments", vec![argument("word", true)]),
            prompt("vanished", "Listed, then not found", Vec::new()),
        ]
    }

    fn get_prompt(
        name: String,
        arguments: Vec<(String, String)>,
    ) -> Result<Vec<PromptMessage>, OfferError> {
        let get = |key: &str| {
            arguments
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
        };
        match name.as_str() {
            "brief" => {
                let topic = get("topic").ok_or(OfferError::InvalidArguments("no topic".into()))?;
                let tone = get("tone").map_or(String::new(), |t| format!(", in a {t} tone"));
                Ok(vec![
                    PromptMessage {
                        role: Role::User,
                        content: Content::Text(format!("Write a brief on {topic}{tone}.")),
                    },
                    PromptMessage {
                        role: Role::Assistant,
                        content: Content::Text("How long should it be?".into()),
                    },
                ])
            }
            "cover" => Ok(vec![PromptMessage {
                role: Role::User,
                content: Content::Image(Media {
                    mime_type: "image/png".into(),
                    data: PNG.to_vec(),
                }),
            }]),
            "forever" => {
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            "tome" => Ok(vec![PromptMessage {
                role: Role::User,
                content: Content::Text("x".repeat(8 << 20)),
            }]),
            "picky" => Err(OfferError::InvalidArguments(format!(
                "`{}` is not a word I know",
                get("word").unwrap_or_default()
            ))),
            other => Err(OfferError::NotFound(format!("no prompt {other}"))),
        }
    }

    fn list_resources() -> Vec<ResourceSpec> {
        vec![
            resource("books://welcome", "welcome", Some("text/markdown")),
            resource("books://cover.png", "cover", Some("image/png")),
            resource("books://trap", "trap", None),
            resource("books://liar", "liar", None),
            resource("books://empty", "empty", None),
            resource("books://huge", "huge", None),
        ]
    }

    fn list_resource_templates() -> Vec<ResourceTemplateSpec> {
        vec![ResourceTemplateSpec {
            uri_template: "books://shelf/{topic}".into(),
            name: "shelf".into(),
            title: Some("A shelf".into()),
            description: Some("The books on one topic".into()),
            mime_type: Some("text/plain".into()),
        }]
    }

    fn read_resource(uri: String) -> Result<Vec<EmbeddedResource>, OfferError> {
        if let Some(topic) = uri.strip_prefix("books://shelf/") {
            return Ok(vec![text(&uri, "text/plain", format!("Books on {topic}."))]);
        }
        match uri.as_str() {
            "books://welcome" => Ok(vec![text(&uri, "text/markdown", "# Welcome\nRead on.".into())]),
            "books://cover.png" => Ok(vec![EmbeddedResource {
                uri,
                mime_type: Some("image/png".into()),
                contents: ResourceContents::Blob(PNG.to_vec()),
            }]),
            "books://trap" => panic!("the shelf fell over"),
            "books://liar" => Ok(vec![text("file:///etc/passwd", "text/plain", "root:x:0:0".into())]),
            "books://empty" => Ok(Vec::new()),
            "books://huge" => Ok(vec![text(&uri, "text/plain", "y".repeat(200_000))]),
            _ => Err(OfferError::NotFound(format!("no book at {uri}"))),
        }
    }
}

export!(Librarian);
