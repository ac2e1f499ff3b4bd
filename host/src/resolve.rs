//! resolve: raw descriptors -> a [`Catalog`]. Paths are made absolute, defaults applied,
//! capabilities checked against grants, components loaded (or an `[ensemble.mcp]` server
//! started and its tools listed), schemas compiled and tool names checked for collisions.
//!
//! Errors never stop the walk: every file is read and every problem becomes a [`Diagnostic`]
//! (so `toolhost check` reports them all). An ensemble with any error is refused whole and its
//! tools are left out; the others load.

use crate::catalog::{Backend, CallGate, Catalog, EnsembleInfo, Tool, VersionHash};
use crate::config::ToolName;
use crate::config::v1::{
    Capabilities, EnsembleFile, InvokerFile, InvokerSection, Limits, McpSection,
};
use crate::config::{Access, DedupMode, Diagnostic, FileKind, Location, SourceFile};
use crate::mcp::client::{McpImport, McpSpec, McpTarget};
use crate::runtime::{CallLimits, ComponentHash, LoadedComponent, Runtime, ToolDescription};
use crate::sandbox::{NetPattern, Preopen, SandboxSpec};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use toml::Spanned;

/// Built-in limits, used when neither the invoker nor its ensemble's `[defaults]` set one.
pub const DEFAULT_TIMEOUT_MS: u64 = 5_000;
pub const DEFAULT_MEMORY_MIB: u64 = 64;
pub const DEFAULT_MAX_OUTPUT_BYTES: u64 = 1 << 20;
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 8 << 20;
pub const DEFAULT_MCP_STARTUP_TIMEOUT_MS: u64 = 10_000;
pub const DEFAULT_MAX_CONCURRENCY: u64 = 8;
pub const DEFAULT_MAX_QUEUE: u64 = 64;

/// The result of resolving an ensembles directory: what loaded, and every error found.
#[derive(Debug, Default)]
pub struct Resolved {
    pub catalog: Catalog,
    /// Ensemble files that were refused, each with its errors (which may point into its
    /// invoker files). The directory itself appears here when it cannot be read.
    pub refused: Vec<Refused>,
}

/// An ensemble file that did not load, and why.
#[derive(Debug, Clone)]
pub struct Refused {
    pub file: PathBuf,
    pub diagnostics: Vec<Diagnostic>,
    /// True when the ensemble's previous version goes on serving in its place.
    pub kept_previous: bool,
}

impl Resolved {
    /// Every error, in file order.
    pub fn diagnostics(&self) -> impl Iterator<Item = &Diagnostic> {
        self.refused.iter().flat_map(|r| r.diagnostics.iter())
    }
}

/// Reads every `*.toml` in `dir` (not recursively; invoker files live in subdirectories and are
/// reached through `source`) and builds the catalog.
pub async fn resolve_dir(runtime: &Runtime, dir: &Path) -> Resolved {
    resolve_dir_keeping(runtime, dir, None).await
}

/// As [`resolve_dir`], but an ensemble file that fails now keeps the version it had in
/// `previous` (if it had one): the last good version goes on serving, and the failure is
/// still reported, with [`Refused::kept_previous`] set. A deleted file's tools are gone.
pub async fn resolve_dir_keeping(
    runtime: &Runtime,
    dir: &Path,
    previous: Option<&Catalog>,
) -> Resolved {
    let mut resolved = Resolved::default();
    let mut files = match ensemble_files(dir) {
        Ok(files) => files,
        Err(e) => {
            let message = format!("cannot read the ensembles directory: {e}");
            let diagnostics = vec![Diagnostic::new(Location::file(dir), message)];
            resolved.refused.push(Refused {
                file: dir.to_path_buf(),
                diagnostics,
                kept_previous: false,
            });
            // Nothing can be read: everything that served goes on serving.
            if let Some(previous) = previous {
                resolved.catalog =
                    Catalog::new(previous.all_tools().to_vec(), previous.ensembles().to_vec());
                resolved.refused[0].kept_previous = true;
            }
            return resolved;
        }
    };
    files.sort();
    let mut components = ComponentLoader {
        runtime,
        files: HashMap::new(),
        loaded: HashMap::new(),
    };
    let mut names = NameRegistry::default();
    let mut tools = Vec::new();
    let mut ensembles = Vec::new();
    for file in files {
        let attempt = match resolve_ensemble(&mut components, &file).await {
            Ok((info, ensemble_tools)) => {
                let ensemble_tools: Vec<Arc<Tool>> =
                    ensemble_tools.into_iter().map(Arc::new).collect();
                names
                    .claim(&info, &ensemble_tools)
                    .map(|()| (info, ensemble_tools))
                    .map_err(|d| vec![d])
            }
            Err(diagnostics) => Err(diagnostics),
        };
        match attempt {
            Ok((info, ensemble_tools)) => {
                tools.extend(ensemble_tools);
                ensembles.push(info);
            }
            Err(diagnostics) => {
                let fallback = previous.and_then(|p| p.ensemble_of_file(&file));
                let kept = match fallback {
                    Some((info, old_tools)) if names.claim(&info, &old_tools).is_ok() => {
                        tools.extend(old_tools);
                        ensembles.push(info);
                        true
                    }
                    _ => false,
                };
                resolved.refused.push(Refused {
                    file,
                    diagnostics,
                    kept_previous: kept,
                });
            }
        }
    }
    resolved.catalog = Catalog::new(tools, ensembles);
    resolved
}

fn ensemble_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let hidden = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with('.'));
        if !hidden && path.extension().is_some_and(|e| e == "toml") && path.is_file() {
            files.push(path);
        }
    }
    Ok(files)
}

/// A component file's hash and bytes.
type ComponentFile = (ComponentHash, Arc<[u8]>);

/// Reads each component file once per resolve and loads each distinct component once,
/// keeping failures so that every invoker naming a bad file gets the same error.
struct ComponentLoader<'r> {
    runtime: &'r Runtime,
    files: HashMap<PathBuf, Result<ComponentFile, String>>,
    loaded: HashMap<ComponentHash, Result<Arc<LoadedComponent>, String>>,
}

impl ComponentLoader<'_> {
    /// Reads, pins and loads the component at `path`.
    async fn load(
        &mut self,
        path: &Path,
        pin: Option<&str>,
    ) -> Result<Arc<LoadedComponent>, String> {
        let (hash, bytes) = self
            .files
            .entry(path.to_path_buf())
            .or_insert_with(|| {
                std::fs::read(path)
                    .map(|bytes| (ComponentHash::of(&bytes), Arc::from(bytes)))
                    .map_err(|e| format!("cannot read component {}: {e}", path.display()))
            })
            .clone()?;
        if let Some(pin) = pin
            && hash.to_string() != pin
        {
            return Err(format!(
                "component {} has blake3 {hash}, but the pin requires {pin}; refusing to load it",
                path.display()
            ));
        }
        if let Some(done) = self.loaded.get(&hash) {
            return done.clone();
        }
        let result = self
            .runtime
            .load(path, bytes.to_vec())
            .await
            .map_err(|e| e.to_string());
        self.loaded.insert(hash, result.clone());
        result
    }
}

/// Which enabled tool names are taken, and by which invoker.
#[derive(Default)]
struct NameRegistry {
    owners: HashMap<String, (String, Location)>,
}

impl NameRegistry {
    /// Claims every enabled tool name of an ensemble, or none of them.
    fn claim(&mut self, info: &EnsembleInfo, tools: &[Arc<Tool>]) -> Result<(), Diagnostic> {
        if !info.enabled {
            return Ok(());
        }
        for tool in tools.iter().filter(|t| t.enabled) {
            if let Some((ensemble, first)) = self.owners.get(&tool.name) {
                return Err(Diagnostic::new(
                    tool.definition.clone(),
                    format!(
                        "tool name `{}` is already used by ensemble `{ensemble}`; ensemble `{}` is refused \
                         (rename the invoker, or set `prefix` in [ensemble])",
                        tool.name, info.name
                    ),
                )
                .with_note(Some(first.clone()), "first defined here"));
            }
        }
        for tool in tools.iter().filter(|t| t.enabled) {
            self.owners.insert(
                tool.name.clone(),
                (info.name.clone(), tool.definition.clone()),
            );
        }
        Ok(())
    }
}

/// An `[[invokers]]` entry after its file (if any) was read.
enum LoadedEntry<'a> {
    File(Box<(SourceFile, InvokerFile)>),
    Inline(&'a InvokerSection, &'a crate::config::v1::InvokerEntry),
}

/// One invoker's descriptor, wherever it came from (its own file, or inline).
struct InvokerDraft<'a> {
    source: &'a SourceFile,
    section: &'a InvokerSection,
    limits: &'a Limits,
    capabilities: &'a Capabilities,
    arguments: Option<&'a Spanned<toml::Value>>,
}

async fn resolve_ensemble(
    components: &mut ComponentLoader<'_>,
    file: &Path,
) -> Result<(EnsembleInfo, Vec<Tool>), Vec<Diagnostic>> {
    let source = SourceFile::read(file, FileKind::Ensemble).map_err(|d| vec![d])?;
    let ensemble: EnsembleFile = source.parse(FileKind::Ensemble).map_err(|d| vec![d])?;
    let mut diagnostics = Vec::new();

    // Invoker files first: each one read and parsed, errors collected.
    let mut loaded: Vec<LoadedEntry<'_>> = Vec::new();
    for entry in &ensemble.invokers {
        let span = entry.span();
        let entry = entry.get_ref();
        match (&entry.source, &entry.invoker) {
            (Some(path), None) => {
                if entry.limits.is_some()
                    || entry.capabilities.is_some()
                    || entry.arguments.is_some()
                {
                    diagnostics.push(Diagnostic::new(
                        source.at(span),
                        "an invoker entry with `source` takes its limits, capabilities and arguments from that file; \
                         remove the other keys here",
                    ));
                    continue;
                }
                let invoker_path = relative_to(&source.path, path.get_ref());
                let Ok(invoker_source) = SourceFile::read(&invoker_path, FileKind::Invoker) else {
                    diagnostics.push(Diagnostic::new(
                        source.at(path.span()),
                        format!(
                            "invoker file {} does not exist or cannot be read",
                            invoker_path.display()
                        ),
                    ));
                    continue;
                };
                match invoker_source.parse::<InvokerFile>(FileKind::Invoker) {
                    Ok(parsed) => {
                        loaded.push(LoadedEntry::File(Box::new((invoker_source, parsed))))
                    }
                    Err(d) => diagnostics.push(d),
                }
            }
            (None, Some(section)) => loaded.push(LoadedEntry::Inline(section, entry)),
            (Some(_), Some(_)) => diagnostics.push(Diagnostic::new(
                source.at(span),
                "an invoker entry has either `source` or an inline `invoker` table, not both",
            )),
            (None, None) => diagnostics.push(Diagnostic::new(
                source.at(span),
                "an invoker entry needs `source = \"<file>.toml\"` or an inline `invoker` table",
            )),
        }
    }
    // An MCP ensemble: the server's tools, and every one of them when no invoker is listed.
    let mcp = match &ensemble.ensemble.mcp {
        Some(section) => match mcp_tools(&source, &ensemble, section).await {
            Ok(tools) => Some(tools),
            Err(mut errors) => {
                diagnostics.append(&mut errors);
                return Err(diagnostics);
            }
        },
        None => None,
    };
    let imported: Vec<InvokerSection> = match &mcp {
        Some(mcp) if ensemble.invokers.is_empty() => mcp.all_invokers(&source, &mut diagnostics),
        _ => Vec::new(),
    };
    let mut drafts: Vec<InvokerDraft<'_>> = imported
        .iter()
        .map(|section| InvokerDraft {
            source: &source,
            section,
            limits: &NO_LIMITS,
            capabilities: &NO_CAPABILITIES,
            arguments: None,
        })
        .collect();
    drafts.extend(loaded.iter().map(|entry| match entry {
        LoadedEntry::File(file) => InvokerDraft {
            source: &file.0,
            section: &file.1.invoker,
            limits: &file.1.limits,
            capabilities: &file.1.capabilities,
            arguments: file.1.arguments.as_ref(),
        },
        LoadedEntry::Inline(section, entry) => InvokerDraft {
            source: &source,
            section,
            limits: entry.limits.as_ref().unwrap_or(&NO_LIMITS),
            capabilities: entry.capabilities.as_ref().unwrap_or(&NO_CAPABILITIES),
            arguments: entry.arguments.as_ref(),
        },
    }));

    let grants = Grants::resolve(&source, &ensemble, &mut diagnostics);
    let mut tools: Vec<Tool> = Vec::new();
    let mut seen: BTreeMap<String, Location> = BTreeMap::new();
    for draft in &drafts {
        match resolve_invoker(components, &source, &ensemble, &grants, draft, mcp.as_ref()).await {
            Ok(tool) => {
                let location = draft.source.at(draft.section.name.span());
                if let Some(first) = seen.get(&tool.name) {
                    diagnostics.push(
                        Diagnostic::new(
                            location,
                            format!(
                                "ensemble `{}` defines tool `{}` twice",
                                ensemble.ensemble.name.get_ref(),
                                tool.name
                            ),
                        )
                        .with_note(Some(first.clone()), "first defined here"),
                    );
                    continue;
                }
                seen.insert(tool.name.clone(), location.clone());
                tools.push(tool);
            }
            Err(mut errors) => diagnostics.append(&mut errors),
        }
    }
    if !diagnostics.is_empty() {
        return Err(diagnostics);
    }
    let info = EnsembleInfo {
        name: ensemble.ensemble.name.get_ref().to_string(),
        file: file.to_path_buf(),
        enabled: ensemble.ensemble.enabled,
        description: ensemble.ensemble.description.clone(),
        tools: tools.iter().map(|t| t.name.clone()).collect(),
    };
    Ok((info, tools))
}

static NO_LIMITS: Limits = Limits {
    timeout_ms: None,
    memory_mib: None,
    max_output_bytes: None,
    max_response_bytes: None,
    max_concurrency: None,
    max_queue: None,
};
static NO_CAPABILITIES: Capabilities = Capabilities {
    network: Vec::new(),
    files: Vec::new(),
    env: Vec::new(),
};

/// A path from a descriptor, relative to the file that names it, with `.` and `..` folded
/// lexically (the file may not exist, and messages should show a clean path).
fn relative_to(file: &Path, path: &str) -> PathBuf {
    let joined = file.parent().unwrap_or(Path::new(".")).join(path);
    let mut clean = PathBuf::new();
    for part in joined.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir
                if matches!(clean.components().next_back(), Some(Component::Normal(_))) =>
            {
                clean.pop();
            }
            other => clean.push(other),
        }
    }
    if clean.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        clean
    }
}

/// The ensemble's `[grants]`, with host directories resolved.
struct Grants<'a> {
    network: Vec<(NetPattern, &'a Spanned<String>)>,
    files: Vec<(PathBuf, &'a Spanned<crate::config::v1::FileGrant>)>,
    env: &'a [Spanned<crate::config::EnvVarName>],
}

impl<'a> Grants<'a> {
    fn resolve(
        source: &SourceFile,
        ensemble: &'a EnsembleFile,
        diagnostics: &mut Vec<Diagnostic>,
    ) -> Self {
        let mut network = Vec::new();
        for grant in &ensemble.grants.network {
            match NetPattern::parse(grant.get_ref()) {
                Ok(pattern) => network.push((pattern, grant)),
                Err(message) => diagnostics.push(Diagnostic::new(source.at(grant.span()), message)),
            }
        }
        let mut files = Vec::new();
        for grant in &ensemble.grants.files {
            let host = grant.get_ref().host.get_ref();
            let path = relative_to(&source.path, host);
            match std::fs::canonicalize(&path) {
                Ok(dir) if dir.is_dir() => files.push((dir, grant)),
                Ok(_) => diagnostics.push(Diagnostic::new(
                    source.at(grant.get_ref().host.span()),
                    format!("granted host path {} is not a directory", path.display()),
                )),
                Err(e) => diagnostics.push(Diagnostic::new(
                    source.at(grant.get_ref().host.span()),
                    format!(
                        "granted host directory {} cannot be used: {e}",
                        path.display()
                    ),
                )),
            }
        }
        Grants {
            network,
            files,
            env: &ensemble.grants.env,
        }
    }
}

async fn resolve_invoker(
    components: &mut ComponentLoader<'_>,
    ensemble_source: &SourceFile,
    ensemble: &EnsembleFile,
    grants: &Grants<'_>,
    draft: &InvokerDraft<'_>,
    mcp: Option<&McpTools>,
) -> Result<Tool, Vec<Diagnostic>> {
    let mut diagnostics = Vec::new();
    let section = draft.section;
    let name = section.name.get_ref().as_str();
    let ensemble_name = ensemble.ensemble.name.get_ref().as_str();
    let tool_source = match mcp {
        Some(mcp) => mcp.source(draft)?,
        None => component_source(components, ensemble_source, ensemble, draft).await?,
    };
    let ToolSource {
        backend,
        hash,
        tools: offered_tools,
        origin,
        location: component_location,
    } = tool_source;

    // The tool inside the component (or on the server).
    let (tool_name, tool_span) = match &section.tool {
        Some(tool) => (tool.get_ref().as_str(), tool.span()),
        None => (name, section.name.span()),
    };
    let Some((spec, hinted_destructive)) = offered_tools.iter().find(|(t, _)| t.name == tool_name)
    else {
        let offered: Vec<&str> = offered_tools.iter().map(|(t, _)| t.name.as_str()).collect();
        return Err(vec![Diagnostic::new(
            draft.source.at(tool_span),
            format!(
                "{origin} has no tool `{tool_name}`; it offers: {}{}",
                offered.join(", "),
                if section.tool.is_none() {
                    " (set `tool` to map this invoker to one of them)"
                } else {
                    ""
                }
            ),
        )]);
    };

    // The schema: the descriptor's [arguments], else the component's own.
    let schema = match draft.arguments {
        Some(arguments) => match serde_json::to_value(arguments.get_ref()) {
            Ok(value) => Some((value, draft.source.at(arguments.span()), "[arguments]")),
            Err(e) => {
                diagnostics.push(Diagnostic::new(
                    draft.source.at(arguments.span()),
                    format!("[arguments] cannot be read as JSON: {e}"),
                ));
                None
            }
        },
        None => {
            match serde_json::from_str::<Value>(&spec.input_schema) {
                Ok(value) => Some((value, component_location.clone(), "the component's schema")),
                Err(e) => {
                    diagnostics.push(Diagnostic::new(
                    component_location.clone(),
                    format!("describe() gives tool `{tool_name}` an input schema that is not JSON: {e}"),
                ));
                    None
                }
            }
        }
    };
    let compiled = schema.and_then(|(value, location, what)| match compile_schema(&value) {
        Ok(validator) => Some((value, validator)),
        Err(reason) => {
            diagnostics.push(Diagnostic::new(
                location,
                format!("{what} of tool `{tool_name}` is not a usable JSON Schema: {reason}"),
            ));
            None
        }
    });

    let sandbox = resolve_capabilities(
        ensemble_source,
        ensemble_name,
        grants,
        draft,
        &mut diagnostics,
    );
    let full_name = match &ensemble.ensemble.prefix {
        Some(prefix) => format!("{}_{name}", prefix.get_ref()),
        None => name.to_string(),
    };
    if full_name.len() > 64 {
        diagnostics.push(Diagnostic::new(
            draft.source.at(section.name.span()),
            format!("with the ensemble's prefix the tool name `{full_name}` is longer than 64 characters"),
        ));
    }
    let (Some((input_schema, validator)), Some(sandbox), true) =
        (compiled, sandbox, diagnostics.is_empty())
    else {
        return Err(diagnostics);
    };

    let defaults = &ensemble.defaults;
    let limits = CallLimits {
        timeout: Duration::from_millis(
            draft
                .limits
                .timeout_ms
                .or(defaults.timeout_ms)
                .map_or(DEFAULT_TIMEOUT_MS, |v| v.get()),
        ),
        memory_bytes: (draft
            .limits
            .memory_mib
            .or(defaults.memory_mib)
            .map_or(DEFAULT_MEMORY_MIB, |v| v.get())
            << 20) as usize,
        max_output_bytes: draft
            .limits
            .max_output_bytes
            .or(defaults.max_output_bytes)
            .map_or(DEFAULT_MAX_OUTPUT_BYTES, |v| v.get()) as usize,
        max_response_bytes: draft
            .limits
            .max_response_bytes
            .or(defaults.max_response_bytes)
            .map_or(DEFAULT_MAX_RESPONSE_BYTES, |v| v.get()),
    };
    let dedup = section.dedup.or(defaults.dedup).unwrap_or(DedupMode::Exact);
    let description = section
        .description
        .clone()
        .unwrap_or_else(|| spec.description.clone());
    let version = version_hash(
        &hash,
        tool_name,
        &description,
        &input_schema,
        &limits,
        &sandbox,
        dedup,
    );
    let max_running = draft
        .limits
        .max_concurrency
        .or(defaults.max_concurrency)
        .map_or(DEFAULT_MAX_CONCURRENCY, |v| v.get());
    let max_waiting = draft
        .limits
        .max_queue
        .or(defaults.max_queue)
        .map_or(DEFAULT_MAX_QUEUE, |v| v.get());
    Ok(Tool {
        definition: draft.source.at(section.name.span()),
        gate: Arc::new(CallGate::new(max_running as usize, max_waiting as usize)),
        name: full_name,
        ensemble: ensemble_name.to_string(),
        ensemble_file: ensemble_source.path.clone(),
        invoker_file: draft.source.path.clone(),
        enabled: ensemble.ensemble.enabled && section.enabled,
        component_tool: tool_name.to_string(),
        backend,
        description,
        input_schema,
        validator: Arc::new(validator),
        limits,
        dedup,
        destructive: section.destructive || *hinted_destructive,
        sandbox,
        version,
    })
}

/// Where an invoker's tool comes from, and what that source offers.
struct ToolSource {
    backend: Backend,
    hash: ComponentHash,
    /// The tools offered, each with whether its source marks it destructive.
    tools: Vec<(ToolDescription, bool)>,
    /// `component <path>` or `MCP server `<command>``, for messages.
    origin: String,
    /// Where the source is named, for messages about its schemas.
    location: Location,
}

/// The invoker's component (its own, else the ensemble's), loaded or taken from the cache.
async fn component_source(
    components: &mut ComponentLoader<'_>,
    ensemble_source: &SourceFile,
    ensemble: &EnsembleFile,
    draft: &InvokerDraft<'_>,
) -> Result<ToolSource, Vec<Diagnostic>> {
    let section = draft.section;
    let name = section.name.get_ref().as_str();
    let (component_path, component_location, pin) = match (
        &section.component,
        &ensemble.ensemble.component,
    ) {
        (Some(path), _) => (
            relative_to(&draft.source.path, path.get_ref()),
            draft.source.at(path.span()),
            section.blake3.as_ref(),
        ),
        (None, Some(path)) => (
            relative_to(&ensemble_source.path, path.get_ref()),
            ensemble_source.at(path.span()),
            ensemble.ensemble.blake3.as_ref(),
        ),
        (None, None) => {
            return Err(vec![Diagnostic::new(
                draft.source.at(section.name.span()),
                format!(
                    "invoker `{name}` has no component: set `component` in [ensemble] or in [invoker]"
                ),
            )]);
        }
    };
    let component = match components
        .load(&component_path, pin.map(|p| p.get_ref().as_str()))
        .await
    {
        Ok(component) => component,
        Err(message) => {
            let mut diagnostic = Diagnostic::new(component_location, message);
            if let Some(pin) = pin.filter(|_| diagnostic.message.contains("the pin requires")) {
                let pin_source = if section.component.is_some() {
                    draft.source
                } else {
                    ensemble_source
                };
                diagnostic = diagnostic.with_note(Some(pin_source.at(pin.span())), "pinned here");
            }
            return Err(vec![diagnostic]);
        }
    };

    Ok(ToolSource {
        hash: component.hash,
        tools: component.tools.iter().map(|t| (t.clone(), false)).collect(),
        origin: format!("component {}", component_path.display()),
        location: component_location,
        backend: Backend::Component {
            component,
            path: component_path,
        },
    })
}

/// An MCP ensemble's server and the tools it listed.
struct McpTools {
    server: Arc<McpImport>,
    tools: Vec<(ToolDescription, bool)>,
    location: Location,
    /// Where `[ensemble.mcp]` is, for the invokers made from the server's list.
    span: std::ops::Range<usize>,
}

impl McpTools {
    /// One invoker per tool of the server, named as the server names it.
    fn all_invokers(
        &self,
        source: &SourceFile,
        diagnostics: &mut Vec<Diagnostic>,
    ) -> Vec<InvokerSection> {
        let span = self.span.clone();
        let mut sections = Vec::new();
        for (tool, _) in &self.tools {
            match ToolName::try_from(tool.name.clone()) {
                Ok(name) => sections.push(InvokerSection {
                    name: Spanned::new(span.clone(), name),
                    tool: None,
                    enabled: true,
                    description: None,
                    destructive: false,
                    dedup: None,
                    component: None,
                    blake3: None,
                }),
                Err(reason) => diagnostics.push(Diagnostic::new(
                    source.at(span.clone()),
                    format!(
                        "MCP server `{}` offers tool `{}`, a name toolhost cannot use ({reason}); \
                         list the tools to import under [[invokers]] with `name` and `tool`",
                        self.server.spec().describe(),
                        tool.name
                    ),
                )),
            }
        }
        sections
    }

    fn source(&self, draft: &InvokerDraft<'_>) -> Result<ToolSource, Vec<Diagnostic>> {
        let mut diagnostics = Vec::new();
        let section = draft.section;
        if let Some(component) = &section.component {
            diagnostics.push(Diagnostic::new(
                draft.source.at(component.span()),
                "an invoker of an MCP ensemble calls the server's tool; it has no component",
            ));
        }
        let capabilities = draft.capabilities;
        if !capabilities.files.is_empty()
            || !capabilities.env.is_empty()
            || !capabilities.network.is_empty()
        {
            diagnostics.push(Diagnostic::new(
                draft.source.at(section.name.span()),
                "capabilities do not apply to an MCP server's tools: the server is its own \
                 process, outside the sandbox; remove [capabilities]",
            ));
        }
        if !diagnostics.is_empty() {
            return Err(diagnostics);
        }
        Ok(ToolSource {
            backend: Backend::Mcp(Arc::clone(&self.server)),
            hash: self.server.hash(),
            tools: self.tools.clone(),
            origin: format!("MCP server `{}`", self.server.spec().describe()),
            location: self.location.clone(),
        })
    }
}

/// Starts (or reuses) the server `[ensemble.mcp]` names and lists its tools.
async fn mcp_tools(
    source: &SourceFile,
    ensemble: &EnsembleFile,
    section: &Spanned<McpSection>,
) -> Result<McpTools, Vec<Diagnostic>> {
    let location = source.at(section.span());
    let mut diagnostics = Vec::new();
    let head = &ensemble.ensemble;
    if let Some(component) = &head.component {
        diagnostics.push(Diagnostic::new(
            source.at(component.span()),
            "an ensemble names either a `component` or an MCP server ([ensemble.mcp]), not both",
        ));
    }
    if let Some(pin) = &head.blake3 {
        diagnostics.push(Diagnostic::new(
            source.at(pin.span()),
            "a `blake3` pin applies to a component; an MCP server has none",
        ));
    }
    let grants = &ensemble.grants;
    if !grants.files.is_empty() || !grants.env.is_empty() || !grants.network.is_empty() {
        diagnostics.push(Diagnostic::new(
            location.clone(),
            "[grants] do not apply to an MCP server: it is its own process, outside the sandbox; \
             remove them",
        ));
    }
    let mcp = section.get_ref();
    let target = match (&mcp.command, &mcp.url) {
        (Some(command), None) => {
            let program = command.get_ref();
            // A path is relative to this file; a bare name is looked up on PATH.
            let program = if program.contains('/') {
                relative_to(&source.path, program).display().to_string()
            } else {
                program.clone()
            };
            let mut env: Vec<(String, String)> = Vec::new();
            if let Ok(path) = std::env::var("PATH") {
                env.push(("PATH".into(), path));
            }
            for variable in &mcp.inherit_env {
                if let Ok(value) = std::env::var(variable.get_ref().as_str()) {
                    env.push((variable.get_ref().to_string(), value));
                }
            }
            env.extend(mcp.env.iter().map(|(k, v)| (k.clone(), v.clone())));
            McpTarget::Command {
                program,
                args: mcp.args.clone(),
                env,
                cwd: source
                    .path
                    .parent()
                    .map(Path::to_path_buf)
                    .unwrap_or_else(|| PathBuf::from(".")),
            }
        }
        (None, Some(url)) => {
            let text = url.get_ref();
            if !(text.starts_with("http://") || text.starts_with("https://")) {
                diagnostics.push(Diagnostic::new(
                    source.at(url.span()),
                    format!("{text:?} is not an http:// or https:// URL"),
                ));
            }
            McpTarget::Url(text.clone())
        }
        _ => {
            diagnostics.push(Diagnostic::new(
                location.clone(),
                "[ensemble.mcp] needs either `command` (with `args`, `env`) or `url`, not both",
            ));
            return Err(diagnostics);
        }
    };
    if !diagnostics.is_empty() {
        return Err(diagnostics);
    }
    let spec = McpSpec {
        target,
        startup_timeout: Duration::from_millis(
            mcp.startup_timeout_ms
                .map_or(DEFAULT_MCP_STARTUP_TIMEOUT_MS, |t| t.get()),
        ),
    };
    let server = crate::mcp::client::import(spec);
    match server.tools().await {
        Ok(tools) => Ok(McpTools {
            server,
            tools,
            location,
            span: section.span(),
        }),
        Err(e) => Err(vec![Diagnostic::new(location, e.to_string())]),
    }
}

/// Compiles a JSON Schema; it must itself be valid and describe an object, because tool
/// arguments are always a JSON object.
fn compile_schema(schema: &Value) -> Result<jsonschema::Validator, String> {
    jsonschema::meta::validate(schema).map_err(|e| {
        let at = e.instance_path().to_string();
        if at.is_empty() {
            e.to_string()
        } else {
            format!("at {at}: {e}")
        }
    })?;
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        return Err("it must have \"type\": \"object\" (tool arguments are a JSON object)".into());
    }
    jsonschema::validator_for(schema).map_err(|e| e.to_string())
}

/// Checks the invoker's `[capabilities]` against the ensemble's `[grants]` and builds the
/// sandbox. Every refusal names the invoker's file and the ensemble's.
fn resolve_capabilities(
    ensemble_source: &SourceFile,
    ensemble_name: &str,
    grants: &Grants<'_>,
    draft: &InvokerDraft<'_>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<SandboxSpec> {
    let before = diagnostics.len();
    let name = draft.section.name.get_ref().as_str();
    let ensemble = draft.source.path != ensemble_source.path;
    let grants_note = |what: &str| {
        let location = if ensemble {
            Some(Location::file(&ensemble_source.path))
        } else {
            None
        };
        (
            location,
            format!("ensemble `{ensemble_name}` grants {what}"),
        )
    };
    // The note of a refused capability: where the ensemble grants the others, or that it
    // grants none of that kind.
    let refusal_note =
        |first: Option<std::ops::Range<usize>>, granted: &[&str], none: &str| match first {
            Some(span) => (
                Some(ensemble_source.at(span)),
                format!(
                    "ensemble `{ensemble_name}` grants only {}",
                    granted.join(", ")
                ),
            ),
            None => grants_note(none),
        };
    let mut spec = SandboxSpec::default();
    let mut network = Vec::new();
    for wanted in &draft.capabilities.network {
        let pattern = match NetPattern::parse(wanted.get_ref()) {
            Ok(pattern) => pattern,
            Err(message) => {
                diagnostics.push(Diagnostic::new(draft.source.at(wanted.span()), message));
                continue;
            }
        };
        if !grants.network.iter().any(|(g, _)| g.covers(&pattern)) {
            let granted: Vec<&str> = grants
                .network
                .iter()
                .map(|(_, g)| g.get_ref().as_str())
                .collect();
            let first = grants.network.first().map(|(_, g)| g.span());
            let (location, note) = refusal_note(first, &granted, "no network access");
            diagnostics.push(
                Diagnostic::new(
                    draft.source.at(wanted.span()),
                    format!("invoker `{name}` asks for network access to {pattern}, which ensemble `{ensemble_name}` does not grant"),
                )
                .with_note(location, note),
            );
            continue;
        }
        network.push(pattern);
    }
    spec.network = network.into();
    for capability in &draft.capabilities.files {
        let wanted = capability.get_ref();
        let guest = wanted.guest.as_str();
        let grant = grants.files.iter().find(|(_, g)| {
            let granted = g.get_ref().guest.as_str();
            guest == granted
                || guest
                    .strip_prefix(granted)
                    .is_some_and(|rest| rest.starts_with('/'))
        });
        let Some((host_dir, grant)) = grant else {
            let granted: Vec<&str> = grants
                .files
                .iter()
                .map(|(_, g)| g.get_ref().guest.as_str())
                .collect();
            let first = grants.files.first().map(|(_, g)| g.span());
            let (location, note) = refusal_note(first, &granted, "no directories");
            diagnostics.push(
                Diagnostic::new(
                    draft.source.at(capability.span()),
                    format!("invoker `{name}` asks for files at {guest}, which ensemble `{ensemble_name}` does not grant"),
                )
                .with_note(location, note),
            );
            continue;
        };
        if wanted.access > grant.get_ref().access {
            diagnostics.push(
                Diagnostic::new(
                    draft.source.at(capability.span()),
                    format!(
                        "invoker `{name}` asks for {} access to {guest}, but ensemble `{ensemble_name}` grants only {}",
                        wanted.access,
                        grant.get_ref().access
                    ),
                )
                .with_note(Some(ensemble_source.at(grant.span())), "granted here"),
            );
            continue;
        }
        let rest = guest[grant.get_ref().guest.as_str().len()..].trim_start_matches('/');
        let host = if rest.is_empty() {
            host_dir.clone()
        } else {
            host_dir.join(rest)
        };
        if !host.is_dir() {
            diagnostics.push(Diagnostic::new(
                draft.source.at(capability.span()),
                format!(
                    "{guest} maps to {}, which is not a directory",
                    host.display()
                ),
            ));
            continue;
        }
        spec.preopens.push(Preopen {
            host,
            guest: guest.to_string(),
            writable: wanted.access == Access::ReadWrite,
        });
    }
    for variable in &draft.capabilities.env {
        let wanted = variable.get_ref().as_str();
        if !grants.env.iter().any(|g| g.get_ref().as_str() == wanted) {
            let granted: Vec<&str> = grants.env.iter().map(|g| g.get_ref().as_str()).collect();
            let first = grants.env.first().map(|g| g.span());
            let (location, note) = refusal_note(first, &granted, "no environment variables");
            diagnostics.push(
                Diagnostic::new(
                    draft.source.at(variable.span()),
                    format!("invoker `{name}` asks for environment variable {wanted}, which ensemble `{ensemble_name}` does not grant"),
                )
                .with_note(location, note),
            );
            continue;
        }
        // A granted variable the host does not have is simply absent in the guest.
        if let Ok(value) = std::env::var(wanted) {
            spec.env.push((wanted.to_string(), value));
        }
    }
    (diagnostics.len() == before).then_some(spec)
}

fn version_hash(
    component: &ComponentHash,
    tool: &str,
    description: &str,
    schema: &Value,
    limits: &CallLimits,
    sandbox: &SandboxSpec,
    dedup: DedupMode,
) -> VersionHash {
    let mut hasher = blake3::Hasher::new();
    hasher.update(&component.0);
    let descriptor = serde_json::json!({
        "tool": tool,
        "description": description,
        "schema": schema,
        "timeout_ms": limits.timeout.as_millis() as u64,
        "memory": limits.memory_bytes,
        "output": limits.max_output_bytes,
        "response": limits.max_response_bytes,
        "sandbox": sandbox,
        "dedup": dedup,
    });
    hasher.update(descriptor.to_string().as_bytes());
    VersionHash(*hasher.finalize().as_bytes())
}
