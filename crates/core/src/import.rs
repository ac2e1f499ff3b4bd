//! import: the seam where the client of imported MCP servers (`[ensemble.mcp]`) plugs in.
//! The client is a crate of its own (`toolhost-import`, a layer above this one: transport,
//! OAuth, sign-in, offers), wired in by the binary ([`crate::resolve::Resolver::with_importer`]).
//! Core names one imported server by what the catalog, prompts and resources ask of it
//! ([`ImportedServer`], which is also the [`Backend`] its tools run on), and the servers of one
//! host by what a resolve and the reloader ask ([`Importer`]). A resolver without an importer
//! refuses every `[ensemble.mcp]`, saying so.

use crate::backend::{Backend, ToolOffer};
use rmcp::model::{GetPromptResult, Prompt, ReadResourceResult, Resource, ResourceTemplate};
use serde_json::{Map, Value};
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::broadcast;

pub use toolhost_config::draft::{McpSpec, McpTarget};

/// Why a server could not be used.
#[derive(Debug, Clone, thiserror::Error)]
#[error("MCP server `{server}` {reason}")]
pub struct McpError {
    pub server: String,
    pub reason: String,
}

/// How the refusal of an import that needs a person to sign in begins (what `status`,
/// `/readyz` and `check` count and say).
pub const NEEDS_SIGN_IN: &str = "needs sign-in (";

/// Where a server started in the background stands.
#[derive(Debug)]
pub enum Background {
    /// Its session is open: its tools can be listed now.
    Running,
    /// Its start is under way.
    Starting,
    /// Its start failed (or it needs a person to sign in), and the next try waits: why.
    Failed(McpError),
}

/// One imported MCP server: the backend its tools run on, and what it offers besides.
#[async_trait::async_trait]
pub trait ImportedServer: Backend {
    /// What `[ensemble.mcp]` says of it.
    fn spec(&self) -> &McpSpec;

    /// Its tools, as the catalog takes them (the server started if it is not running).
    async fn tools(&self) -> Result<Vec<ToolOffer>, McpError>;

    /// Its prompts (none when it offers none).
    async fn prompts(&self) -> Result<Vec<Prompt>, McpError>;

    /// Its answer to `prompts/get`.
    async fn get_prompt(
        &self,
        name: &str,
        arguments: &Map<String, Value>,
    ) -> Result<GetPromptResult, String>;

    /// Whether it offers resources.
    async fn has_resources(&self) -> bool;

    /// Its resources, and whether there were more than were taken.
    async fn resources(&self) -> Result<(Vec<Resource>, bool), McpError>;

    /// Its resource templates.
    async fn resource_templates(&self) -> Result<Vec<ResourceTemplate>, McpError>;

    /// Its answer to `resources/read`.
    async fn read_resource(&self, uri: &str) -> Result<ReadResourceResult, String>;

    /// Asks it to report updates of `uri`; `false` when it could not.
    async fn subscribe(&self, uri: &str) -> bool;

    /// The updates it reports: a resource's URI, or `None` when its list changed.
    fn resource_updates(&self) -> broadcast::Receiver<Option<String>>;
}

/// The imported servers of one host, shared by every catalog version that names the same
/// server (a reload with unchanged settings keeps the running server).
pub trait Importer: Send + Sync + std::fmt::Debug {
    /// The server for `spec`: the one in use, or a new one (not started yet).
    fn import(&self, spec: McpSpec) -> Arc<dyn ImportedServer>;

    /// Where the server of `spec` stands, started in the background unless it runs, is
    /// starting, or waits (a failed start's backoff, a sign-in): kept until
    /// [`Importer::keep_only`] lets it go.
    fn background(&self, spec: &McpSpec) -> Background;

    /// The servers whose tools (or prompts) changed, by server.
    fn changes(&self) -> broadcast::Receiver<String>;

    /// The servers whose start in the background ended (up, or failed), by server.
    fn started(&self) -> broadcast::Receiver<String>;

    /// Lets go of the servers started in the background that no ensemble names any more
    /// (`named`: the keys of the specs a resolve imported).
    fn keep_only(&self, named: &HashSet<[u8; 32]>);

    /// The file of a person's sign-in to the server of `spec`, if one signs in to it: what a
    /// reloader watches, so that a new sign-in (or a logout) is taken at once.
    fn sign_in_file(&self, spec: &McpSpec) -> Option<PathBuf>;
}
