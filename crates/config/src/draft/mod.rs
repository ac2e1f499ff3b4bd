//! Drafts: an ensemble file and its invoker files read, parsed and checked as far as they can
//! be without an engine or a server. Every check that needs no component runs here (entry
//! shapes, limits and defaults, grants and capabilities, `[arguments]` schemas, names with
//! their prefix, `[ensemble.mcp]` settings), and each error is kept, so that an invoker whose
//! component is missing still has all its other errors reported.
//!
//! What is left for binding (`toolhost_core::resolve`) is what the component (or server)
//! decides: which tools exist, their own schemas and descriptions. [`check_dir`] is what
//! `toolhost check` can say of a directory without an engine (the golden tests of
//! `tests/ui/config` run against it alone).

mod component;
mod dir;
mod entries;
mod grants;
mod mcp;
mod offers;
mod refused;
mod settings;

pub use component::ComponentRef;
pub use dir::{check_dir, ensemble_files};
pub use mcp::{McpCredential, McpOauth, McpSpec, McpTarget};
pub use offers::{
    ArgumentDraft, DEFAULT_MAX_FILE_BYTES, DEFAULT_MAX_FILES, MessageDraft, MessageKind,
    PromptDraft, ResourcesDraft, Role, overlaps,
};
pub use settings::{
    DEFAULT_MAX_CONCURRENCY, DEFAULT_MAX_OUTPUT_BYTES, DEFAULT_MAX_QUEUE,
    DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_MCP_MAX_TOOLS, DEFAULT_MCP_STARTUP_TIMEOUT_MS,
    DEFAULT_MEMORY_MIB, DEFAULT_TIMEOUT_MS, Settings,
};

use crate::sandbox::SandboxSpec;
use crate::schema::{Schema, SchemaCache, SchemaError};
use crate::v1::{Defaults, EnsembleFile, InvokerSection, Limits};
use crate::{Diagnostic, FileKind, Parsed, SourceFile, Span, ToolName, in_file_order};
use entries::{InvokerTables, entry_tables};
use grants::Grants;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use toml::Spanned;

/// The check of an `oci://` reference's text: the registry layer's parser, which this layer
/// cannot name (it would pull in the registry client); `Ok` for any text where none is at
/// hand.
pub type CheckReference = fn(&str) -> Result<(), String>;

/// An ensemble file and its invokers, checked as far as they can be without binding.
pub struct EnsembleDraft {
    pub source: Arc<SourceFile>,
    pub name: String,
    pub enabled: bool,
    pub description: Option<String>,
    /// The MCP server the ensemble imports, when it names one instead of a component.
    pub mcp: Option<McpDraft>,
    pub invokers: Vec<InvokerDraft>,
    /// Its `[[prompts]]`, checked.
    pub prompts: Vec<PromptDraft>,
    /// Its `[[resources]]`, checked.
    pub resources: Vec<ResourcesDraft>,
    /// Errors of the ensemble as a whole: its entries, grants and `[ensemble.mcp]`.
    pub errors: Vec<Diagnostic>,
    context: Context,
}

/// What every invoker of an ensemble inherits.
struct Context {
    prefix: Option<ToolName>,
    defaults: Defaults,
    grants: Grants,
    /// The ensemble's `component` (with its `blake3` pin), for invokers without their own.
    component: Option<ComponentRef>,
    is_mcp: bool,
    /// The file lists `[[invokers]]` (an MCP ensemble without any imports every tool).
    lists_invokers: bool,
    /// `require-signature` of `[ensemble]`, for the invokers' own components.
    require_signature: bool,
    /// The ensemble's `component` was refused: an invoker without its own is not told it has
    /// none.
    component_refused: bool,
    check: CheckReference,
}

/// An `[ensemble.mcp]` server: its settings, and where they are written.
pub struct McpDraft {
    /// `None` when the settings have an error (reported in the ensemble's errors).
    pub spec: Option<McpSpec>,
    pub at: Span,
}

/// One invoker, checked as far as it can be without its component.
pub struct InvokerDraft {
    /// The file it is written in (the ensemble file when inline).
    pub source: Arc<SourceFile>,
    pub section: InvokerSection,
    /// The name the model sees, with the ensemble's prefix.
    pub name: String,
    pub settings: Settings,
    /// `None` when a capability was refused.
    pub sandbox: Option<SandboxSpec>,
    /// The compiled `[arguments]`, when the descriptor has a usable one.
    pub arguments: Option<Arc<Schema>>,
    /// Its component (its own, else the ensemble's); `None` for an MCP ensemble's invokers.
    pub component: Option<ComponentRef>,
    pub errors: Vec<Diagnostic>,
}

impl InvokerDraft {
    /// Where its name is written.
    pub fn definition(&self) -> Span {
        Span::new(&self.source, self.section.name.span())
    }

    /// The tool's name inside the component or on the server, and where it is written.
    pub fn backend_tool(&self) -> (&str, std::ops::Range<usize>) {
        match &self.section.tool {
            Some(tool) => (tool.get_ref().as_str(), tool.span()),
            None => (
                self.section.name.get_ref().as_str(),
                self.section.name.span(),
            ),
        }
    }
}

/// How a component names a registry reference instead of a file.
pub const REGISTRY_SCHEME: &str = "oci://";

/// Reads the ensemble file at `file` and everything it names, and checks what can be
/// checked without binding (an `oci://` reference by `check`). A file that cannot be read is
/// its only error; one with values serde refuses has each as an error, and the checks after
/// parsing run on the rest, but for what depends on a refused value (which would only say
/// that error again). `Err` when nothing of the file could be read.
pub fn read(
    file: &Path,
    schemas: &SchemaCache,
    check: CheckReference,
) -> Result<EnsembleDraft, Vec<Diagnostic>> {
    let source = Arc::new(SourceFile::read(file, FileKind::Ensemble).map_err(|d| vec![d])?);
    let Parsed {
        value,
        mut errors,
        refused,
    } = source.parse_all::<EnsembleFile>(FileKind::Ensemble);
    let Some(parsed) = value else {
        return Err(in_file_order(errors, &source.path));
    };
    let EnsembleFile {
        ensemble: head,
        defaults,
        grants,
        invokers: entries,
        prompts,
        resources,
        ..
    } = parsed;
    let name = head.name.get_ref().to_string();
    let mut tables = Vec::new();
    let lists_invokers = !entries.is_empty() || refused.touches(&["invokers"]);
    for entry in entries {
        if let Some(table) = entry_tables(&source, entry, &refused, &mut errors) {
            tables.push(table);
        }
    }
    let grants = Grants::resolve(&source, &name, grants, &refused, &mut errors);
    let mcp = head.mcp.map(|section| {
        if refused.touches(&["ensemble", "mcp"]) {
            // What it lacks may be what was refused: its errors are those.
            let at = Span::new(&source, section.span());
            return McpDraft { spec: None, at };
        }
        let has_component = head.component.as_ref().map(Spanned::span);
        let pin = head.blake3.as_ref().map(Spanned::span);
        mcp::draft(
            &source,
            section,
            has_component,
            pin,
            grants.is_empty(),
            &mut errors,
        )
    });
    let prefix = head.prefix.as_ref().map(Spanned::get_ref);
    let offers_other = !(prompts.is_empty() && resources.is_empty());
    // A prompt or resource set with a refused value is left out: its checks would speak of
    // what it lacks.
    let whole = |at: &std::ops::Range<usize>| refused.keys_under(at).is_empty();
    let prompts = prompts.into_iter().filter(|p| whole(&p.span())).collect();
    let resources = resources.into_iter().filter(|r| whole(&r.span())).collect();
    let prompts = offers::prompts(&source, prefix, prompts, &mut errors);
    let resources = offers::resources(&source, prefix, resources, &mut errors);
    let offered: [&[&str]; 4] = [
        &["ensemble", "component"],
        &["ensemble", "mcp"],
        &["prompts"],
        &["resources"],
    ];
    let offers_refused = offered.iter().any(|path| refused.touches(path));
    if !lists_invokers
        && mcp.is_none()
        && head.component.is_none()
        && !offers_other
        && !offers_refused
    {
        errors.push(Diagnostic::new(
            source.at(head.name.span()),
            format!(
                "ensemble `{name}` offers nothing: name a `component` (to offer every tool it \
                 has) or an MCP server, or list [[invokers]], [[prompts]] or [[resources]]"
            ),
        ));
    }
    let context = Context {
        prefix: head.prefix.map(Spanned::into_inner),
        defaults,
        grants,
        component: head.component.and_then(|path| {
            ComponentRef::new(
                &source,
                &path,
                head.blake3.as_ref(),
                head.require_signature,
                check,
            )
            .map_err(|e| errors.push(e))
            .ok()
        }),
        is_mcp: mcp.is_some(),
        lists_invokers,
        require_signature: head.require_signature,
        component_refused: refused.touches(&["ensemble", "component"]),
        check,
    };
    let invokers = tables
        .into_iter()
        .map(|tables| context.invoker(tables, schemas))
        .collect();
    Ok(EnsembleDraft {
        source,
        name,
        enabled: head.enabled,
        description: head.description,
        mcp,
        invokers,
        prompts,
        resources,
        errors,
        context,
    })
}

impl EnsembleDraft {
    /// The ensemble's `prefix`, if it has one.
    pub fn prefix(&self) -> Option<&ToolName> {
        self.context.prefix.as_ref()
    }

    /// True for an ensemble without `[[invokers]]` that names an MCP server or a component:
    /// it offers every tool the server or component has.
    pub fn imports_every_tool(&self) -> bool {
        !self.context.lists_invokers && (self.mcp.is_some() || self.context.component.is_some())
    }

    /// The ensemble's own component, when it names one.
    pub fn component(&self) -> Option<&ComponentRef> {
        self.context.component.as_ref()
    }

    /// The limits (and `max-concurrency`, `max-queue`) of the runs of the component's
    /// prompts and resources (0.3.0): the ensemble's `[defaults]`, else the built-ins, as an
    /// invoker without `[limits]` has.
    pub fn offer_settings(&self) -> Settings {
        Settings::merge(&Limits::default(), None, &self.context.defaults)
    }

    /// Warnings for what the ensemble writes and gives nothing: the grants no invoker
    /// drafted so far asks for (call it once every invoker is drafted,
    /// [`EnsembleDraft::draft_offers`]'s too), and `[defaults] capabilities` where no tool is
    /// offered without an invoker (written invokers name their own).
    pub fn warnings(&self) -> Vec<Diagnostic> {
        let mut warnings = self.context.grants.unused();
        if let Some(capabilities) = &self.context.defaults.capabilities
            && !self.imports_every_tool()
        {
            let listed = match self.context.lists_invokers {
                true => "lists [[invokers]]",
                false => "offers no tool without an invoker",
            };
            warnings.push(Diagnostic::new(
                self.source.at(capabilities.span()),
                format!(
                    "ensemble `{}` {listed}, so its [defaults] capabilities give nothing: they \
                     are those of the tools offered without invokers (every tool of its \
                     component); an invoker is given only what its own [capabilities] name",
                    self.name
                ),
            ));
        }
        warnings.sort_by_key(|w| (w.location.line, w.location.column));
        warnings
    }

    /// Drafts one invoker per tool the server or component offers (by the names it offers
    /// them under).
    pub fn draft_offers<'a>(
        &mut self,
        offered: impl IntoIterator<Item = &'a str>,
        schemas: &SchemaCache,
    ) {
        let (at, origin) = match (&self.mcp, &self.context.component) {
            (Some(mcp), _) => (
                mcp.at.clone(),
                format!(
                    "MCP server `{}`",
                    mcp.spec.as_ref().map(McpSpec::describe).unwrap_or_default()
                ),
            ),
            (None, Some(component)) => (
                component.at.clone(),
                format!("component {}", component.path.display()),
            ),
            (None, None) => return,
        };
        for offered in offered {
            match ToolName::try_from(offered.to_string()) {
                Ok(name) => {
                    let tables = InvokerTables {
                        source: Arc::clone(&self.source),
                        section: InvokerSection {
                            name: Spanned::new(at.range.clone(), name),
                            tool: None,
                            enabled: true,
                            description: None,
                            destructive: false,
                            dedup: None,
                            component: None,
                            blake3: None,
                        },
                        limits: Limits::default(),
                        capabilities: (self.context.defaults.capabilities.as_ref())
                            .map(|c| c.get_ref().clone())
                            .unwrap_or_default(),
                        arguments: None,
                        offered: true,
                        component_refused: false,
                    };
                    self.invokers.push(self.context.invoker(tables, schemas));
                }
                Err(reason) => self.errors.push(Diagnostic::new(
                    at.location(),
                    format!(
                        "{origin} offers tool `{offered}`, a name toolhost cannot use ({reason}); \
                         list the tools to offer under [[invokers]] with `name` and `tool`"
                    ),
                )),
            }
        }
    }

    /// An error for every invoker whose name an earlier invoker of the ensemble took.
    pub fn duplicates(&self) -> Vec<Diagnostic> {
        let mut first: HashMap<&str, &InvokerDraft> = HashMap::new();
        let mut errors = Vec::new();
        for invoker in &self.invokers {
            match first.get(invoker.name.as_str()) {
                Some(earlier) => errors.push(
                    Diagnostic::new(
                        invoker.definition().location(),
                        format!(
                            "ensemble `{}` defines tool `{}` twice",
                            self.name, invoker.name
                        ),
                    )
                    .with_note(Some(earlier.definition().location()), "first defined here"),
                ),
                None => {
                    first.insert(&invoker.name, invoker);
                }
            }
        }
        errors
    }
}

impl Context {
    /// Checks one invoker's tables; every error goes into the draft.
    fn invoker(&self, tables: InvokerTables, schemas: &SchemaCache) -> InvokerDraft {
        let InvokerTables {
            source,
            section,
            limits,
            capabilities,
            arguments,
            offered,
            component_refused,
        } = tables;
        let mut errors = Vec::new();
        let name = section.name.get_ref().as_str();
        let component = if self.is_mcp {
            if let Some(component) = &section.component {
                errors.push(Diagnostic::new(
                    source.at(component.span()),
                    "an invoker of an MCP ensemble calls the server's tool; it has no component",
                ));
            }
            None
        } else {
            self.component_of(&source, &section, component_refused, &mut errors)
        };
        let arguments = arguments.and_then(|arguments| {
            let at = || source.at(arguments.span());
            let value = serde_json::to_value(arguments.get_ref())
                .map_err(|e| {
                    errors.push(Diagnostic::new(
                        at(),
                        format!("[arguments] cannot be read as JSON: {e}"),
                    ))
                })
                .ok()?;
            let tool = section.tool.as_ref().map_or(name, |t| t.get_ref().as_str());
            match schemas.of_value(value) {
                Ok(schema) => Some(schema),
                Err(SchemaError::NotJson(reason) | SchemaError::Unusable(reason)) => {
                    errors.push(Diagnostic::new(
                        at(),
                        format!(
                            "[arguments] of tool `{tool}` is not a usable JSON Schema: {reason}"
                        ),
                    ));
                    None
                }
            }
        });
        let sandbox = if self.is_mcp {
            if !(capabilities.files.is_empty()
                && capabilities.env.is_empty()
                && capabilities.network.is_empty()
                && capabilities.log.is_none()
                && capabilities.progress.is_none()
                && capabilities.sampling.is_none()
                && capabilities.elicitation.is_none()
                && capabilities.config.is_empty())
            {
                errors.push(Diagnostic::new(
                    source.at(section.name.span()),
                    "capabilities do not apply to an MCP server's tools: the server is its own \
                     process, outside the sandbox; remove [capabilities]",
                ));
            }
            Some(SandboxSpec::default())
        } else {
            let who = if offered {
                "[defaults] capabilities (of the tools offered without invokers)".to_string()
            } else {
                format!("invoker `{name}`")
            };
            self.grants
                .sandbox(&source, &who, &capabilities, &mut errors)
        };
        let full_name = match &self.prefix {
            Some(prefix) => format!("{prefix}_{name}"),
            None => name.to_string(),
        };
        if full_name.len() > 64 {
            errors.push(Diagnostic::new(
                source.at(section.name.span()),
                format!("with the ensemble's prefix the tool name `{full_name}` is longer than 64 characters"),
            ));
        }
        InvokerDraft {
            settings: Settings::merge(&limits, section.dedup, &self.defaults),
            source,
            section,
            name: full_name,
            sandbox,
            arguments,
            component,
            errors,
        }
    }

    /// The invoker's component: its own (with its own pin), else the ensemble's.
    fn component_of(
        &self,
        source: &Arc<SourceFile>,
        section: &InvokerSection,
        own_refused: bool,
        errors: &mut Vec<Diagnostic>,
    ) -> Option<ComponentRef> {
        match (&section.component, &self.component) {
            (Some(path), _) => ComponentRef::new(
                source,
                path,
                section.blake3.as_ref(),
                self.require_signature,
                self.check,
            )
            .map_err(|e| errors.push(e))
            .ok(),
            (None, Some(component)) => Some(component.clone()),
            // The component it meant was refused: that error says it.
            (None, None) if own_refused || self.component_refused => None,
            (None, None) => {
                errors.push(Diagnostic::new(
                    source.at(section.name.span()),
                    format!(
                        "invoker `{}` has no component: set `component` in [ensemble] or in [invoker]",
                        section.name.get_ref()
                    ),
                ));
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DedupMode;
    use settings::DEFAULT_MEMORY_MIB;
    use std::path::PathBuf;
    use std::time::Duration;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn every_check_that_needs_no_component_runs_without_an_engine() {
        let dir = tempfile::tempdir().unwrap();
        let file = write(
            dir.path(),
            "web.toml",
            "schema-version = 1\n[ensemble]\nname = \"web\"\ncomponent = \"missing.wasm\"\n\
             prefix = \"p\"\n[defaults]\ntimeout-ms = 250\n[grants]\nenv = [\"TZ\"]\n\n\
             [[invokers]]\ninvoker = { name = \"a\" }\ncapabilities = { env = [\"HOME\"] }\n\
             arguments = { type = \"objekt\" }\n\n\
             [[invokers]]\ninvoker = { name = \"b\", dedup = \"off\" }\nlimits = { timeout-ms = 10 }\n\n\
             [[invokers]]\ninvoker = { name = \"a\" }\n",
        );
        let draft = read(&file, &SchemaCache::default(), |_| Ok(())).expect("the file parses");
        assert!(draft.errors.is_empty(), "{:?}", draft.errors);
        let [a, b, again] = &draft.invokers[..] else {
            panic!("three invokers")
        };
        let messages: Vec<&str> = a.errors.iter().map(|d| d.message.as_str()).collect();
        assert_eq!(messages.len(), 2, "{messages:?}");
        assert!(
            messages[0].contains("not a usable JSON Schema"),
            "{messages:?}"
        );
        assert!(
            messages[1].contains("environment variable HOME"),
            "{messages:?}"
        );
        assert_eq!(a.name, "p_a");
        let component = a.component.as_ref().expect("the ensemble's component");
        assert!(component.path.ends_with("missing.wasm"));
        assert!(b.errors.is_empty());
        assert_eq!(b.settings.limits.timeout, Duration::from_millis(10));
        assert_eq!(b.settings.dedup, DedupMode::Off);
        assert_eq!(again.settings.limits.timeout, Duration::from_millis(250));
        assert_eq!(again.settings.dedup, DedupMode::Exact);
        assert_eq!(
            again.settings.limits.memory_bytes,
            (DEFAULT_MEMORY_MIB << 20) as usize
        );
        let duplicates = draft.duplicates();
        assert_eq!(duplicates.len(), 1);
        assert!(duplicates[0].message.contains("defines tool `p_a` twice"));
    }

    #[test]
    fn an_mcp_ensemble_refuses_what_does_not_apply_before_starting_anything() {
        let dir = tempfile::tempdir().unwrap();
        let file = write(
            dir.path(),
            "m.toml",
            "schema-version = 1\n[ensemble]\nname = \"m\"\nblake3 = \"\
             0000000000000000000000000000000000000000000000000000000000000000\"\n\
             [ensemble.mcp]\nurl = \"ftp://x\"\n[grants]\nenv = [\"TZ\"]\n\n\
             [[invokers]]\ninvoker = { name = \"t\", component = \"c.wasm\" }\n\
             capabilities = { env = [\"TZ\"] }\n",
        );
        let draft = read(&file, &SchemaCache::default(), |_| Ok(())).expect("the file parses");
        let messages: Vec<&str> = draft.errors.iter().map(|d| d.message.as_str()).collect();
        assert_eq!(messages.len(), 3, "{messages:?}");
        assert!(messages[0].contains("`blake3` pin applies to a component"));
        assert!(messages[1].contains("[grants] do not apply"));
        assert!(messages[2].contains("is not an http:// or https:// URL"));
        let spec = draft.mcp.as_ref().expect("an MCP draft");
        assert!(spec.spec.is_none(), "a server with errors is not started");
        assert_eq!(draft.invokers[0].errors.len(), 2);
    }

    #[test]
    fn defaults_capabilities_beside_invokers_are_warned_of_at_their_line() {
        let dir = tempfile::tempdir().unwrap();
        let (head, defaults) = (
            "schema-version = 1\n[ensemble]\nname = \"w\"\ncomponent = \"c.wasm\"\n",
            "[defaults]\ncapabilities = { env = [\"TZ\"] }\n[grants]\nenv = [\"TZ\"]\n",
        );
        let invokers = "[[invokers]]\nname = \"a\"\ncapabilities = { env = [\"TZ\"] }\n";
        let file = write(dir.path(), "w.toml", &format!("{head}{defaults}{invokers}"));
        let draft = read(&file, &SchemaCache::default(), |_| Ok(())).expect("the file parses");
        let [warning] = &draft.warnings()[..] else {
            panic!("one warning: {:?}", draft.warnings())
        };
        assert_eq!(warning.position(), format!("{}:6:16", file.display()));
        assert!(
            warning
                .message
                .contains("lists [[invokers]], so its [defaults] capabilities give nothing")
        );
        // Without invokers they are the capabilities of every tool the component offers.
        let file = write(dir.path(), "w.toml", &format!("{head}{defaults}"));
        let draft = read(&file, &SchemaCache::default(), |_| Ok(())).expect("the file parses");
        let warnings = draft.warnings();
        assert!(
            !warnings
                .iter()
                .any(|w| w.message.contains("capabilities give nothing")),
            "{warnings:?}"
        );
    }

    #[test]
    fn paths_are_relative_to_the_file_that_names_them() {
        let source = SourceFile::new(PathBuf::from("a/b/web.toml"), String::new());
        assert_eq!(source.relative("../c.wasm"), PathBuf::from("a/c.wasm"));
        assert_eq!(
            source.relative("./x/../y.toml"),
            PathBuf::from("a/b/y.toml")
        );
        assert_eq!(source.relative("/abs/z"), PathBuf::from("/abs/z"));
    }
}
