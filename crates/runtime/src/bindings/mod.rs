//! Host bindings of the plugin contract, one module per WIT version (`wit/`). All three are
//! linked: a component built for 0.1.0 or 0.2.0 keeps running unchanged beside one built for
//! 0.3.0. What a call returns is made the same [`super::ToolResult`] for every version in
//! `runtime` (0.1.0's text is one text item).
//!
//! 0.3.0 repeats 0.2.0's types and `host` interface (`role` moved to `types`; a package
//! stands alone, so that a plugin author reads one file), and wasmtime makes distinct Rust
//! types of them.
//! What the host does with them is written once, as macros instantiated for each version:
//! [`content_conversions`] here, and the `host` implementation in `crate::state`.

pub(crate) mod since_v0_1_0;
pub(crate) mod since_v0_2_0;
pub(crate) mod since_v0_3_0;
pub(crate) mod wasi_config_draft;

/// Writes, in a bindings module whose `types` interface is 0.2.0's (or a later one's),
/// `content` (one item as the host's) and `result` (a result as the host's: its items as
/// they are, and its structured result parsed). A tool that declared an output schema must
/// return a JSON object as `structured`; one that did not must return none. Either mistake
/// is the tool's failure, said plainly.
macro_rules! content_conversions {
    () => {
        /// One content item as the host's.
        pub(crate) fn content(item: types::Content) -> content::Content {
            let media = |m: types::Media| content::Media {
                mime_type: m.mime_type,
                data: m.data,
            };
            match item {
                types::Content::Text(text) => content::Content::Text(text),
                types::Content::Image(m) => content::Content::Image(media(m)),
                types::Content::Audio(m) => content::Content::Audio(media(m)),
                types::Content::Resource(r) => content::Content::Resource(embedded(r)),
            }
        }

        /// An embedded resource as the host's.
        pub(crate) fn embedded(r: types::EmbeddedResource) -> content::EmbeddedResource {
            content::EmbeddedResource {
                uri: r.uri,
                mime_type: r.mime_type,
                contents: match r.contents {
                    types::ResourceContents::Text(text) => content::ResourceContents::Text(text),
                    types::ResourceContents::Blob(blob) => content::ResourceContents::Blob(blob),
                },
            }
        }

        /// A result as the host's, or why it breaks the contract.
        pub(crate) fn result(
            result: types::ToolResult,
            declared: bool,
        ) -> Result<content::ToolResult, String> {
            let structured = match (result.structured, declared) {
                (Some(text), true) => match serde_json::from_str::<serde_json::Value>(&text) {
                    Ok(value) if value.is_object() => Some(value),
                    Ok(_) => return Err("its structured result is not a JSON object".into()),
                    Err(e) => return Err(format!("its structured result is not JSON: {e}")),
                },
                (None, true) => {
                    return Err(
                        "it declares an output schema but returned no structured result".into(),
                    );
                }
                (Some(_), false) => {
                    return Err(
                        "it returned a structured result but declares no output schema".into(),
                    );
                }
                (None, false) => None,
            };
            Ok(content::ToolResult {
                content: result.content.into_iter().map(content).collect(),
                structured,
            })
        }
    };
}
pub(crate) use content_conversions;
