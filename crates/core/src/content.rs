//! content: a tool's items between toolhost and MCP, both ways: what an imported server returns
//! becomes the host's [`ToolResult`] items (images and audio as bytes, decoded from base64),
//! and what a tool returns becomes MCP `ContentBlock`s for the clients of `toolhost serve`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use rmcp::model::{self as mcp, ContentBlock};
use toolhost_contract::{Content, EmbeddedResource, Media, ResourceContents, ToolResult};

/// A tool's items as MCP content.
pub fn to_mcp(result: &ToolResult) -> Vec<ContentBlock> {
    result.content.iter().map(block).collect()
}

fn block(item: &Content) -> ContentBlock {
    match item {
        Content::Text(text) => ContentBlock::text(text.clone()),
        Content::Image(media) => {
            ContentBlock::image(STANDARD.encode(&media.data), &media.mime_type)
        }
        Content::Audio(media) => {
            ContentBlock::audio(STANDARD.encode(&media.data), &media.mime_type)
        }
        Content::Resource(resource) => {
            let (uri, mime_type) = (resource.uri.clone(), resource.mime_type.clone());
            ContentBlock::resource(match &resource.contents {
                ResourceContents::Text(text) => mcp::ResourceContents::TextResourceContents {
                    uri,
                    mime_type,
                    text: text.clone(),
                    meta: None,
                },
                ResourceContents::Blob(blob) => mcp::ResourceContents::BlobResourceContents {
                    uri,
                    mime_type,
                    blob: STANDARD.encode(blob),
                    meta: None,
                },
            })
        }
    }
}

/// An imported server's result as the host's: each item kept as what it is; media whose
/// base64 does not decode, and links to resources (which toolhost does not fetch), as their
/// JSON text. A result with a structured value and no item is that value's JSON text.
pub fn from_mcp(result: mcp::CallToolResult) -> ToolResult {
    let mut content: Vec<Content> = result.content.into_iter().map(item).collect();
    if content.is_empty()
        && let Some(structured) = &result.structured_content
    {
        content.push(Content::Text(structured.to_string()));
    }
    ToolResult {
        content,
        structured: None,
    }
}

/// One MCP content block as a result item (as JSON text when it is none of the kinds).
pub fn item(block: ContentBlock) -> Content {
    let as_json =
        |block: &ContentBlock| Content::Text(serde_json::to_string(block).unwrap_or_default());
    match block {
        ContentBlock::Text(text) => Content::Text(text.text),
        ContentBlock::Image(ref image) => match STANDARD.decode(&image.data) {
            Ok(data) => Content::Image(Media {
                mime_type: image.mime_type.clone(),
                data,
            }),
            Err(_) => as_json(&block),
        },
        ContentBlock::Audio(ref audio) => match STANDARD.decode(&audio.data) {
            Ok(data) => Content::Audio(Media {
                mime_type: audio.mime_type.clone(),
                data,
            }),
            Err(_) => as_json(&block),
        },
        ContentBlock::Resource(ref embedded) => match &embedded.resource {
            mcp::ResourceContents::TextResourceContents {
                uri,
                mime_type,
                text,
                ..
            } => Content::Resource(EmbeddedResource {
                uri: uri.clone(),
                mime_type: mime_type.clone(),
                contents: ResourceContents::Text(text.clone()),
            }),
            mcp::ResourceContents::BlobResourceContents {
                uri,
                mime_type,
                blob,
                ..
            } => match STANDARD.decode(blob) {
                Ok(bytes) => Content::Resource(EmbeddedResource {
                    uri: uri.clone(),
                    mime_type: mime_type.clone(),
                    contents: ResourceContents::Blob(bytes),
                }),
                Err(_) => as_json(&block),
            },
            _ => as_json(&block),
        },
        other => as_json(&other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_structured_result_without_items_is_its_json_text() {
        let mut structured = mcp::CallToolResult::structured(serde_json::json!({"n": 1}));
        structured.content.clear();
        assert_eq!(from_mcp(structured).text(), r#"{"n":1}"#);
    }

    #[test]
    fn items_cross_both_ways_unchanged() {
        let result = ToolResult {
            content: vec![
                Content::Text("t".into()),
                Content::Image(Media {
                    mime_type: "image/png".into(),
                    data: vec![1, 2, 3],
                }),
                Content::Audio(Media {
                    mime_type: "audio/wav".into(),
                    data: vec![4, 5],
                }),
                Content::Resource(EmbeddedResource {
                    uri: "test://a".into(),
                    mime_type: Some("text/plain".into()),
                    contents: ResourceContents::Text("inside".into()),
                }),
                Content::Resource(EmbeddedResource {
                    uri: "test://b".into(),
                    mime_type: None,
                    contents: ResourceContents::Blob(vec![0, 255]),
                }),
            ],
            structured: None,
        };
        let blocks = to_mcp(&result);
        let back = from_mcp(mcp::CallToolResult::success(blocks));
        assert_eq!(back, result);
    }
}
