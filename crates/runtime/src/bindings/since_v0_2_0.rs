//! Bindings for `toolhost:plugin@0.2.0` (`wit/toolhost-plugin-0.2.0`): results of content
//! items, and the `host` functions a call uses to talk back to its caller.

wasmtime::component::bindgen!({
    path: "../../wit/toolhost-plugin-0.2.0",
    world: "plugin",
    imports: { default: async },
    exports: { default: async },
});

pub(crate) use self::exports::toolhost::plugin::tool::{ToolError, ToolResult};
pub(crate) use self::toolhost::plugin::host;
pub(crate) use self::toolhost::plugin::types::{self, Content, ResourceContents};

use toolhost_contract::content;

/// A 0.2.0 result as the host's: its items as they are, and its structured result parsed.
/// A tool that declared an output schema must return a JSON object as `structured`; one
/// that did not must return none. Either mistake is the tool's failure, said plainly.
pub(crate) fn result(result: ToolResult, declared: bool) -> Result<content::ToolResult, String> {
    let structured = match (result.structured, declared) {
        (Some(text), true) => match serde_json::from_str::<serde_json::Value>(&text) {
            Ok(value) if value.is_object() => Some(value),
            Ok(_) => return Err("its structured result is not a JSON object".into()),
            Err(e) => return Err(format!("its structured result is not JSON: {e}")),
        },
        (None, true) => {
            return Err("it declares an output schema but returned no structured result".into());
        }
        (Some(_), false) => {
            return Err("it returned a structured result but declares no output schema".into());
        }
        (None, false) => None,
    };
    let media = |m: types::Media| content::Media {
        mime_type: m.mime_type,
        data: m.data,
    };
    let content = result
        .content
        .into_iter()
        .map(|item| match item {
            Content::Text(text) => content::Content::Text(text),
            Content::Image(m) => content::Content::Image(media(m)),
            Content::Audio(m) => content::Content::Audio(media(m)),
            Content::Resource(r) => content::Content::Resource(content::EmbeddedResource {
                uri: r.uri,
                mime_type: r.mime_type,
                contents: match r.contents {
                    ResourceContents::Text(text) => content::ResourceContents::Text(text),
                    ResourceContents::Blob(blob) => content::ResourceContents::Blob(blob),
                },
            }),
        })
        .collect();
    Ok(content::ToolResult {
        content,
        structured,
    })
}
