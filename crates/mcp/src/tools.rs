//! `tools/list` for large catalogs: the MCP form of every enabled tool is built once per
//! catalog version and shared by every session, and answered in pages that clients follow
//! with `nextCursor`.
//!
//! A page holds at most [`PAGE_TOOLS`] tools and, past its first tool, at most
//! [`PAGE_BYTES`] of serialized tools, so neither many small tools nor a few huge schemas
//! make one answer unbounded. The cursor is the name of the last tool sent (tools are sorted
//! by name): a client that pages across a reload neither skips nor repeats a tool that is in
//! both versions.

use rmcp::model::{Tool as McpTool, ToolAnnotations};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use toolhost_core::catalog::{Catalog, Tool};
use toolhost_core::invoke::Session;

/// Tools per page, at most.
pub const PAGE_TOOLS: usize = 2000;
/// Serialized bytes per page, at most (a page always has at least one tool).
pub const PAGE_BYTES: usize = 1 << 20;

/// One catalog version's tools in MCP form, sorted by name, with their serialized sizes
/// (and the tools themselves, which the access rules are asked about).
struct Listing {
    catalog: Weak<Catalog>,
    tools: Arc<[(McpTool, usize, Arc<Tool>)]>,
}

/// The listing of the newest catalog version asked for, shared by the sessions of a host.
#[derive(Default)]
pub struct ToolList {
    current: Mutex<Option<Listing>>,
}

impl ToolList {
    /// The page of `catalog`'s tools after the tool named `cursor` (from the first without
    /// one) that `session` may call (its policy, its caller's rules), and the cursor of the
    /// next page if there is more.
    pub fn page(
        &self,
        catalog: &Arc<Catalog>,
        session: &Session,
        cursor: Option<&str>,
    ) -> (Vec<McpTool>, Option<String>) {
        let tools = self.listing(catalog);
        let start = cursor.map_or(0, |after| {
            tools.partition_point(|(tool, _, _)| tool.name.as_ref() <= after)
        });
        let mut page = Vec::new();
        let mut bytes = 0;
        let mut permitted = tools[start..]
            .iter()
            .filter(|(_, _, tool)| session.permits(tool))
            .peekable();
        while let Some((tool, size, _)) = permitted.peek() {
            if page.len() == PAGE_TOOLS || (!page.is_empty() && bytes + size > PAGE_BYTES) {
                break;
            }
            bytes += size;
            page.push(tool.clone());
            permitted.next();
        }
        let next = match (permitted.peek(), page.last()) {
            (Some(_), Some(last)) => Some(last.name.to_string()),
            _ => None,
        };
        (page, next)
    }

    fn listing(&self, catalog: &Arc<Catalog>) -> Arc<[(McpTool, usize, Arc<Tool>)]> {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(listing) = current.as_ref()
            && std::ptr::eq(listing.catalog.as_ptr(), Arc::as_ptr(catalog))
        {
            return Arc::clone(&listing.tools);
        }
        let tools: Arc<[(McpTool, usize, Arc<Tool>)]> = catalog
            .tools()
            .map(|tool| (mcp_tool(tool), listed_size(tool), Arc::clone(tool)))
            .collect();
        *current = Some(Listing {
            catalog: Arc::downgrade(catalog),
            tools: Arc::clone(&tools),
        });
        tools
    }
}

/// The MCP form of a tool: name, description, input schema (shared, not copied), and what
/// it may do (`destructiveHint` always; `readOnlyHint` where its backend says so).
fn mcp_tool(tool: &Tool) -> McpTool {
    let mut annotations = ToolAnnotations::new().destructive(tool.policy().destructive);
    if tool.policy().read_only {
        annotations = annotations.read_only(true);
    }
    let mut listed = McpTool::new(
        tool.name().to_string(),
        tool.description().to_string(),
        Arc::clone(&tool.accepts().schema.object),
    )
    .annotate(annotations);
    listed.output_schema = tool
        .accepts()
        .output
        .as_ref()
        .map(|o| Arc::clone(&o.schema));
    listed
}

/// About how many bytes a tool takes in a `tools/list` answer: its texts, its schema's JSON
/// and the keys around them (escapes aside), without serializing it.
fn listed_size(tool: &Tool) -> usize {
    const KEYS_AND_ANNOTATIONS: usize = 120;
    // An output schema is about as large as its input schema's share of a component's.
    let output = tool
        .accepts()
        .output
        .as_ref()
        .map_or(0, |_| tool.accepts().schema.json_len);
    tool.name().len()
        + tool.description().len()
        + tool.accepts().schema.json_len
        + output
        + KEYS_AND_ANNOTATIONS
}
