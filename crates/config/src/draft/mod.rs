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

mod entries;
mod grants;
mod mcp;
mod offers;
mod settings;

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
use crate::{Blake3Hex, Diagnostic, FileKind, Location, SourceFile, Span, ToolName};
use entries::{InvokerTables, entry_tables};
use grants::Grants;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
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
    check: CheckReference,
}

/// An `[ensemble.mcp]` server: its settings, and where they are written.
pub struct McpDraft {
    /// `None` when the settings have an error (reported in the ensemble's errors).
    pub spec: Option<McpSpec>,
    pub at: Span,
}

/// The component an invoker runs on, as a descriptor names it.
#[derive(Debug, Clone)]
pub struct ComponentRef {
    /// The file; for a registry reference, the reference as written (the key it is bound by).
    pub path: PathBuf,
    /// Where the path is written.
    pub at: Span,
    pub pin: Option<(Blake3Hex, Span)>,
    /// The reference as written when the component is an `oci://` reference (checked when
    /// drafted) rather than a file.
    pub oci: Option<String>,
    /// Its ensemble requires it to be signed by a trusted key.
    pub require_signature: bool,
}

impl ComponentRef {
    /// The component `path` names in `source` (a file, or an `oci://` reference), with the
    /// `pin` beside it.
    fn new(
        source: &Arc<SourceFile>,
        path: &Spanned<String>,
        pin: Option<&Spanned<Blake3Hex>>,
        require_signature: bool,
        check: CheckReference,
    ) -> Result<Self, Diagnostic> {
        let text = path.get_ref();
        let oci = if text.starts_with(REGISTRY_SCHEME) {
            check(text).map_err(|e| Diagnostic::new(source.at(path.span()), e))?;
            Some(text.clone())
        } else {
            None
        };
        Ok(ComponentRef {
            path: match &oci {
                Some(_) => PathBuf::from(text),
                None => source.relative(text),
            },
            at: Span::new(source, path.span()),
            pin: pin.map(|pin| (pin.get_ref().clone(), Span::new(source, pin.span()))),
            oci,
            require_signature,
        })
    }
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
/// its only error; one that does not parse has every mistake in its shape.
pub fn read(
    file: &Path,
    schemas: &SchemaCache,
    check: CheckReference,
) -> Result<EnsembleDraft, Vec<Diagnostic>> {
    let source = Arc::new(SourceFile::read(file, FileKind::Ensemble).map_err(|d| vec![d])?);
    let parsed = source.parse_all::<EnsembleFile>(FileKind::Ensemble);
    let parsed = match parsed.value {
        Some(file) if parsed.errors.is_empty() => file,
        _ => return Err(parsed.errors),
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
    let mut errors = Vec::new();
    let mut tables = Vec::new();
    let lists_invokers = !entries.is_empty();
    for entry in entries {
        if let Some(table) = entry_tables(&source, entry, &mut errors) {
            tables.push(table);
        }
    }
    let grants = Grants::resolve(&source, &name, grants, &mut errors);
    let mcp = head.mcp.map(|section| {
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
    let prompts = offers::prompts(&source, prefix, prompts, &mut errors);
    let resources = offers::resources(&source, prefix, resources, &mut errors);
    if !lists_invokers && mcp.is_none() && head.component.is_none() && !offers_other {
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

    /// Warnings for the grants no invoker drafted so far asks for (call it once every
    /// invoker is drafted, [`EnsembleDraft::draft_offers`]'s too).
    pub fn unused_grants(&self) -> Vec<Diagnostic> {
        self.context.grants.unused()
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
                        capabilities: (self.context.defaults.capabilities.clone())
                            .unwrap_or_default(),
                        arguments: None,
                        offered: true,
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
            self.component_of(&source, &section, &mut errors)
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

/// The ensemble files of `dir`: every `*.toml` in it (not recursively: invoker files live in
/// subdirectories and are reached through `source`), hidden ones left out, in file-name
/// order; or why the directory cannot be read.
pub fn ensemble_files(dir: &Path) -> Result<Vec<PathBuf>, Diagnostic> {
    let unreadable = |e: std::io::Error| {
        Diagnostic::new(
            Location::file(dir),
            format!("cannot read the ensembles directory: {e}"),
        )
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(unreadable)? {
        let path = entry.map_err(unreadable)?.path();
        let hidden = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with('.'));
        if !hidden && path.extension().is_some_and(|e| e == "toml") && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Every error the ensemble files of `dir` have that shows without an engine, in the order
/// `toolhost check` prints them: each file's own, then each invoker's, then names defined
/// twice. (Resolving adds what only the components can say.)
pub fn check_dir(dir: &Path, check: CheckReference) -> Result<Vec<Diagnostic>, Diagnostic> {
    let files = ensemble_files(dir)?;
    let schemas = SchemaCache::default();
    let mut errors = Vec::new();
    for file in files {
        match read(&file, &schemas, check) {
            Ok(mut draft) => {
                errors.append(&mut draft.errors);
                for invoker in &mut draft.invokers {
                    errors.append(&mut invoker.errors);
                }
                errors.extend(draft.duplicates());
            }
            Err(mut these) => errors.append(&mut these),
        }
    }
    Ok(errors)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DedupMode;
    use settings::DEFAULT_MEMORY_MIB;
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
