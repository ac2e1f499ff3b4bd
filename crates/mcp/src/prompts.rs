//! `prompts/list` and `prompts/get`: the catalog's prompts in MCP form, in pages (the cursor
//! is the last prompt's name; prompts are sorted by name), filtered by what the session may
//! see; a `get` goes through [`Host::get_prompt`], so its arguments are checked, its
//! templates rendered within their bounds, and the read audited.

use base64::Engine;
use rmcp::ErrorData;
use rmcp::model::{
    GetPromptResult, Prompt as McpPrompt, PromptArgument, PromptMessage, ResourceContents,
    Role as McpRole,
};
use serde_json::{Map, Value};
use toolhost_core::catalog::Catalog;
use toolhost_core::content;
use toolhost_core::invoke::{Host, Session};
use toolhost_core::prompts::{Prompt, PromptError};
use toolhost_core::resources::{Body, Contents, ResourceError};

/// Prompts per `prompts/list` page, at most.
pub const PAGE_PROMPTS: usize = 500;

/// The page of prompts after `cursor` that `session` may see, and the next page's cursor.
pub fn page(
    catalog: &Catalog,
    session: &Session,
    cursor: Option<&str>,
) -> (Vec<McpPrompt>, Option<String>) {
    let mut visible = catalog
        .prompts()
        .filter(|p| cursor.is_none_or(|after| p.name() > after))
        .filter(|p| session.permits_offer(p.ensemble(), p.name()))
        .peekable();
    let mut page = Vec::new();
    while page.len() < PAGE_PROMPTS
        && let Some(prompt) = visible.next()
    {
        page.push(listed(prompt));
    }
    let next = match (visible.peek(), page.last()) {
        (Some(_), Some(last)) => Some(last.name.clone()),
        _ => None,
    };
    (page, next)
}

/// The MCP form of a prompt: name, title, description and arguments.
fn listed(prompt: &Prompt) -> McpPrompt {
    let arguments = prompt
        .arguments()
        .iter()
        .map(|a| {
            let argument = PromptArgument::new(a.name.clone()).with_required(a.required);
            match &a.description {
                Some(description) => argument.with_description(description.clone()),
                None => argument,
            }
        })
        .collect();
    let listed = McpPrompt::new(
        prompt.name().to_string(),
        Some(prompt.description().to_string()),
        Some(arguments),
    );
    match prompt.title() {
        Some(title) => listed.with_title(title),
        None => listed,
    }
}

/// `prompts/get`: the prompt's messages, or an error that names what was wrong (an unknown
/// prompt and a refused argument are the client's mistakes: invalid params).
pub async fn get(
    host: &Host,
    session: &Session,
    name: &str,
    arguments: &Map<String, Value>,
) -> Result<GetPromptResult, ErrorData> {
    let (prompt, messages) = host
        .get_prompt(session, name, arguments)
        .await
        .map_err(|error| match error {
            // The prompt's own doing (a template out of fuel, a file that cannot be read, a
            // server that failed).
            PromptError::Template { .. }
            | PromptError::Passed { .. }
            | PromptError::Resource {
                error: ResourceError::TooLarge { .. } | ResourceError::Unreadable { .. },
                ..
            } => ErrorData::internal_error(error.to_string(), None),
            _ => ErrorData::invalid_params(error.to_string(), None),
        })?;
    let messages = messages
        .into_iter()
        .filter_map(|message| {
            let role = match message.role {
                toolhost_config::draft::Role::User => McpRole::User,
                toolhost_config::draft::Role::Assistant => McpRole::Assistant,
            };
            let item = toolhost_contract::ToolResult {
                content: vec![message.content],
                structured: None,
            };
            let content = content::to_mcp(&item).into_iter().next()?;
            Some(PromptMessage::new(role, content))
        })
        .collect();
    Ok(GetPromptResult::new(messages).with_description(prompt.description()))
}

/// A resource's contents in MCP form: text, or base64 of its bytes.
pub fn resource(contents: Contents) -> ResourceContents {
    match contents.body {
        Body::Text(text) => ResourceContents::text(text, contents.uri),
        Body::Blob(bytes) => ResourceContents::blob(
            base64::engine::general_purpose::STANDARD.encode(bytes),
            contents.uri,
        ),
    }
    .with_mime_type(contents.mime)
}

/// `completion/complete`: values of a prompt's argument (its `values`), or paths of a resource
/// set's template.
pub(crate) async fn complete(
    host: &Host,
    session: &Session,
    request: &rmcp::model::CompleteRequestParams,
) -> Result<rmcp::model::CompleteResult, ErrorData> {
    use rmcp::model::{CompleteResult, CompletionInfo, Reference};
    let typed = &request.argument.value;
    let values = match &request.r#ref {
        Reference::Prompt(prompt) => (host.prompt(session, &prompt.name))
            .map(|p| p.complete(&request.argument.name, typed, CompletionInfo::MAX_VALUES))
            .unwrap_or_default(),
        Reference::Resource(template) => {
            let catalog = host.catalog().snapshot();
            crate::resources::complete(&catalog, session, &template.uri, typed).await
        }
        _ => Vec::new(),
    };
    let info = CompletionInfo::new(values).map_err(|e| ErrorData::internal_error(e, None))?;
    Ok(CompleteResult::new(info))
}
