//! Looking inside a component without serving it, for `toolhost describe`: the world it is
//! built for, what it imports (and which of that the host does not provide), what it exports,
//! and the tools (and, from 0.3.0, prompts and resources) it offers, or why it offers none.

use super::outcome::not_a_component;
use super::{LoadError, Offers, Runtime, SourceHash, ToolDescription, typed};
use std::path::Path;
use std::sync::Arc;
use wasmtime::component::types::ComponentItem;

/// What a component is and offers.
#[derive(Debug)]
pub struct Inspection {
    pub hash: SourceHash,
    /// `toolhost:plugin@0.1.0`, `typed`, or why it is neither (another version of our world).
    pub world: Result<World, String>,
    pub imports: Vec<Import>,
    pub exports: Vec<String>,
    /// Its tools, or why the host cannot offer them (an import it lacks, say).
    pub tools: Result<Vec<ToolDescription>, LoadError>,
    /// Its prompts and resources (0.3.0); none when it has no tools either.
    pub offers: Offers,
}

/// The kinds of component.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum World {
    /// `toolhost:plugin@0.1.0`: `describe()` and `call()`.
    Plugin,
    /// `toolhost:plugin@0.2.0`: results of content items, and a call that talks back.
    Plugin2,
    /// `toolhost:plugin@0.3.0`: 0.2.0, and prompts and resources beside the tools.
    Plugin3,
    /// Any other world: each exported function is a tool.
    Typed,
}

/// One import of a component, and whether the host links it.
#[derive(Debug)]
pub struct Import {
    pub name: String,
    pub provided: bool,
}

/// The WASI 0.2 interfaces the host links (each denied unless granted).
const WASI: &[&str] = &[
    "cli/environment",
    "cli/exit",
    "cli/stdin",
    "cli/stdout",
    "cli/stderr",
    "cli/terminal-input",
    "cli/terminal-output",
    "cli/terminal-stdin",
    "cli/terminal-stdout",
    "cli/terminal-stderr",
    "clocks/monotonic-clock",
    "clocks/wall-clock",
    "filesystem/types",
    "filesystem/preopens",
    "io/error",
    "io/poll",
    "io/streams",
    "random/random",
    "random/insecure",
    "random/insecure-seed",
    "sockets/network",
    "sockets/instance-network",
    "sockets/udp",
    "sockets/udp-create-socket",
    "sockets/tcp",
    "sockets/tcp-create-socket",
    "sockets/ip-name-lookup",
    "http/types",
    "http/outgoing-handler",
];

/// Whether the host links an import of this name.
pub(super) fn provided(name: &str) -> bool {
    let (interface, version) = name.split_once('@').unwrap_or((name, ""));
    if interface == "wasi:config/store" {
        return version == "0.2.0-draft" || version == "0.2.0-rc.1";
    }
    match interface.strip_prefix("wasi:") {
        Some(wasi) => version.starts_with("0.2.") && WASI.contains(&wasi),
        None => interface == "toolhost:plugin/host" && typed::PLUGIN_VERSIONS.contains(&version),
    }
}

/// True for an instance that holds types alone (`toolhost:plugin/types`, which toolchains
/// such as componentize-js import for the types the world uses): there is nothing in it for
/// the host to provide, and it links as it is.
fn only_types(item: &ComponentItem, engine: &wasmtime::Engine) -> bool {
    match item {
        ComponentItem::ComponentInstance(instance) => instance
            .exports(engine)
            .all(|(_, item)| matches!(item.ty, ComponentItem::Type(_))),
        _ => false,
    }
}

impl Runtime {
    /// Compiles (or takes from the cache) the component in `bytes` and says what it is. Fails
    /// only when it cannot be compiled; a component that compiles but does not link or
    /// describe is inspected, with that failure in [`Inspection::tools`].
    pub async fn inspect(&self, path: &Path, bytes: Vec<u8>) -> Result<Inspection, LoadError> {
        if let Some(reason) = not_a_component(&bytes) {
            return Err(LoadError::Compile {
                path: path.to_path_buf(),
                reason: reason.into(),
            });
        }
        let bytes: Arc<[u8]> = bytes.into();
        let hash = SourceHash::of(&bytes);
        let (component, compiler) = match self.compiled(path, Arc::clone(&bytes), hash).await {
            Ok((component, compiler, _, _)) => (component, compiler),
            // What it imports and exports is still said, with why it cannot run (the
            // instance pool's share, say), when its sections can be read.
            Err(error) => {
                let Some((imports, exports)) = top_level_names(&bytes) else {
                    return Err(error);
                };
                return Ok(Inspection {
                    hash,
                    world: Err("not known: it cannot be loaded (the error below says why)".into()),
                    imports: (imports.into_iter())
                        .map(|name| Import {
                            provided: provided(&name),
                            name,
                        })
                        .collect(),
                    exports,
                    tools: Err(error),
                    offers: Offers::default(),
                });
            }
        };
        let ty = component.component_type();
        let engine = &compiler.engine;
        let imports = ty
            .imports(engine)
            .map(|(name, item)| Import {
                name: name.to_string(),
                provided: provided(name) || only_types(&item.ty, engine),
            })
            .collect();
        let exports = ty
            .exports(engine)
            .map(|(name, _)| name.to_string())
            .collect();
        let world = typed::kind(&component, engine).map(|kind| match kind {
            typed::Kind::Plugin => World::Plugin,
            typed::Kind::Plugin2 => World::Plugin2,
            typed::Kind::Plugin3 => World::Plugin3,
            typed::Kind::Typed => World::Typed,
        });
        let (tools, offers) = match self.linked(&compiler, path, &component, &bytes).await {
            Ok((_, described)) => (Ok(described.tools), described.offers),
            Err(error) => (Err(error), Offers::default()),
        };
        Ok(Inspection {
            hash,
            world,
            imports,
            exports,
            tools,
            offers,
        })
    }
}

/// The names a component imports and exports at its top level, read from its sections
/// (`None` when they cannot be read).
fn top_level_names(bytes: &[u8]) -> Option<(Vec<String>, Vec<String>)> {
    use wasmparser::{Parser, Payload};
    let (mut imports, mut exports) = (Vec::new(), Vec::new());
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(bytes) {
        match payload.ok()? {
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentImportSection(section) if depth == 0 => {
                for import in section {
                    imports.push(import.ok()?.name.name.to_string());
                }
            }
            Payload::ComponentExportSection(section) if depth == 0 => {
                for export in section {
                    exports.push(export.ok()?.name.name.to_string());
                }
            }
            _ => {}
        }
    }
    Some((imports, exports))
}

#[cfg(test)]
mod tests {
    use super::provided;

    #[test]
    fn wasi_0_2_and_our_host_interface_are_provided() {
        assert!(provided("wasi:io/streams@0.2.6"));
        assert!(provided("toolhost:plugin/host@0.1.0"));
        assert!(!provided("wasi:io/streams@0.3.0"));
        assert!(!provided("wasi:keyvalue/store@0.2.0"));
        assert!(provided("toolhost:plugin/host@0.2.0"));
        assert!(provided("toolhost:plugin/host@0.3.0"));
        assert!(!provided("toolhost:plugin/host@0.4.0"));
        assert!(!provided("example:thing/api"));
        assert!(provided("wasi:config/store@0.2.0-draft"));
        assert!(provided("wasi:config/store@0.2.0-rc.1"));
        assert!(!provided("wasi:config/store@0.3.0"));
    }
}
