//! What a successful call returns: a list of content items (text, image, audio, an embedded
//! resource) and, for a tool that declares an output schema, the result as a JSON object.
//!
//! A `toolhost:plugin@0.1.0` component, a typed export and most MCP tools return text: one
//! text item. `toolhost:plugin@0.2.0` components and imported MCP servers may return any mix.
//! Callers that can only pass text on (a model's tool result, `toolhost call`) read
//! [`ToolResult::text`], where every item that is not text is named by its type and size.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::borrow::Cow;
use std::fmt::Write as _;

/// Bytes of some media type: an image or an audio clip.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Media {
    pub mime_type: String,
    pub data: Vec<u8>,
}

/// What an embedded resource holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ResourceContents {
    Text(String),
    Blob(Vec<u8>),
}

/// A resource carried inside a result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EmbeddedResource {
    pub uri: String,
    pub mime_type: Option<String>,
    pub contents: ResourceContents,
}

impl EmbeddedResource {
    /// The bytes it holds: its contents and its names.
    pub fn bytes(&self) -> usize {
        self.uri.len()
            + self.mime_type.as_ref().map_or(0, String::len)
            + match &self.contents {
                ResourceContents::Text(text) => text.len(),
                ResourceContents::Blob(blob) => blob.len(),
            }
    }
}

/// One item of a result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Content {
    Text(String),
    Image(Media),
    Audio(Media),
    Resource(EmbeddedResource),
}

impl Content {
    /// The bytes this item holds (text, media or resource contents, and its names).
    pub fn bytes(&self) -> usize {
        match self {
            Content::Text(text) => text.len(),
            Content::Image(media) | Content::Audio(media) => {
                media.mime_type.len() + media.data.len()
            }
            Content::Resource(resource) => resource.bytes(),
        }
    }
}

/// What a successful call returned (serialized only to share it between the replicas of a
/// fleet: dedup).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    pub content: Vec<Content>,
    /// The result as the object the tool's output schema describes, when it declares one.
    pub structured: Option<Value>,
}

impl ToolResult {
    /// A result of one text item.
    pub fn text_only(text: impl Into<String>) -> Self {
        ToolResult {
            content: vec![Content::Text(text.into())],
            structured: None,
        }
    }

    /// The bytes the result holds: every item, and the structured result's JSON. This is what
    /// `max-output-bytes` bounds and what dedup memory counts.
    pub fn bytes(&self) -> usize {
        let items: usize = self.content.iter().map(Content::bytes).sum();
        items + self.structured.as_ref().map_or(0, crate::json_len)
    }

    /// The result as text, for a reader of text alone (a model, a terminal): the text items
    /// and the text of embedded resources, one after another; any other item as
    /// `[image image/png, 1234 bytes]`. A result with no item but a structured one is that
    /// object's JSON.
    pub fn text(&self) -> Cow<'_, str> {
        if let [Content::Text(text)] = self.content.as_slice() {
            return Cow::Borrowed(text);
        }
        if self.content.is_empty() {
            return Cow::Owned(
                self.structured
                    .as_ref()
                    .map_or_else(String::new, Value::to_string),
            );
        }
        let mut out = String::new();
        for (i, item) in self.content.iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            match item {
                Content::Text(text) => out.push_str(text),
                Content::Image(media) => {
                    let _ = write!(
                        out,
                        "[image {}, {} bytes]",
                        media.mime_type,
                        media.data.len()
                    );
                }
                Content::Audio(media) => {
                    let _ = write!(
                        out,
                        "[audio {}, {} bytes]",
                        media.mime_type,
                        media.data.len()
                    );
                }
                Content::Resource(EmbeddedResource {
                    contents: ResourceContents::Text(text),
                    ..
                }) => out.push_str(text),
                Content::Resource(EmbeddedResource {
                    uri,
                    mime_type,
                    contents: ResourceContents::Blob(blob),
                }) => {
                    let mime = mime_type.as_deref().unwrap_or("application/octet-stream");
                    let _ = write!(out, "[resource {uri}, {mime}, {} bytes]", blob.len());
                }
            }
        }
        Cow::Owned(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_names_what_is_not_text_and_bytes_count_everything() {
        let result = ToolResult {
            content: vec![
                Content::Text("chart of sales".into()),
                Content::Image(Media {
                    mime_type: "image/png".into(),
                    data: vec![0; 10],
                }),
                Content::Resource(EmbeddedResource {
                    uri: "file:///a.txt".into(),
                    mime_type: None,
                    contents: ResourceContents::Text("inside".into()),
                }),
            ],
            structured: Some(serde_json::json!({"n": 1})),
        };
        assert_eq!(
            result.text(),
            "chart of sales\n[image image/png, 10 bytes]\ninside"
        );
        assert_eq!(result.bytes(), 14 + 9 + 10 + 13 + 6 + 7);
        let only_structured = ToolResult {
            content: vec![],
            structured: Some(serde_json::json!({"n": 1})),
        };
        assert_eq!(only_structured.text(), r#"{"n":1}"#);
        assert_eq!(ToolResult::text_only("hi").text(), "hi");
    }
}
