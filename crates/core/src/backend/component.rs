//! The component backend: a WebAssembly component, of the `toolhost:plugin` world or typed
//! (any other world: each exported function a tool), run in a fresh sandboxed instance per
//! call by the [`Runtime`]. A `toolhost:plugin@0.3.0` component may also offer prompts and
//! resources ([`ComponentOffers`]), each run the same way.

use super::{
    Backend, BackendCall, BoxFuture, RunError, SourceHash, ToolHints, ToolOffer, ToolOutput,
    ToolResult,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use toolhost_contract::{CallLimits, CallerLink, Unlinked};
use toolhost_runtime::sandbox::SandboxSpec;
use toolhost_runtime::{
    Caller, LoadedComponent, OfferRequest, Offered, Offers, Preparation, Runtime, Stock,
};

/// One component file, as a descriptor names it.
pub struct ComponentBackend {
    runtime: Arc<Runtime>,
    component: Arc<LoadedComponent>,
    /// The file this descriptor names (the compiled component is shared by hash, so it may
    /// have been first loaded from another file).
    path: PathBuf,
}

impl ComponentBackend {
    /// The backend of `component` (loaded by `runtime`) as the file at `path`, with the tools
    /// its `describe()` offers.
    pub fn new(
        runtime: &Arc<Runtime>,
        component: Arc<LoadedComponent>,
        path: &Path,
    ) -> (Self, Vec<ToolOffer>) {
        let offers = component
            .tools
            .iter()
            .map(|tool| ToolOffer {
                name: tool.name.clone(),
                alias: tool.default_name.clone(),
                output: tool.output.as_ref().and_then(|output| {
                    let schema = serde_json::from_str(&output.schema).ok()?;
                    Some(ToolOutput {
                        schema: Arc::new(schema),
                        shape: output.shape,
                    })
                }),
                description: tool.description.as_str().into(),
                input_schema: tool.input_schema.clone(),
                hints: ToolHints::default(),
            })
            .collect();
        let backend = ComponentBackend {
            runtime: Arc::clone(runtime),
            component,
            path: path.to_path_buf(),
        };
        (backend, offers)
    }
}

impl std::fmt::Debug for ComponentBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ComponentBackend")
            .field("component", &self.component)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Backend for ComponentBackend {
    fn call<'a>(&'a self, call: BackendCall<'a>) -> BoxFuture<'a, Result<ToolResult, RunError>> {
        Box::pin(async move {
            self.runtime
                .call(
                    &self.component,
                    Caller {
                        invoker: call.invoker,
                        session: call.session,
                        link: call.link,
                    },
                    call.tool,
                    call.arguments,
                    call.limits,
                    call.sandbox,
                    call.stock,
                )
                .await
        })
    }

    fn source_hash(&self) -> SourceHash {
        SourceHash(self.component.hash.0)
    }

    fn watched_file(&self) -> Option<&Path> {
        Some(&self.path)
    }

    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    fn stock(&self, limits: CallLimits, sandbox: &SandboxSpec, want: Preparation) -> Option<Stock> {
        Some(self.runtime.stock(&self.component, limits, sandbox, want))
    }
}

/// A 0.3.0 component's prompts and resources, as it listed them at load, and how each
/// `get-prompt` and `read-resource` runs: in a fresh instance, under the ensemble's
/// `[defaults]` limits (`max-concurrency` of them at once, `max-queue` more waiting), with no
/// capabilities (no files, network or environment; its log lines only) and nobody to talk
/// back to. What it returns counts against `max-output-bytes`, as a call's result.
pub struct ComponentOffers {
    runtime: Arc<Runtime>,
    component: Arc<LoadedComponent>,
    limits: CallLimits,
    sandbox: SandboxSpec,
    gate: super::gate::CallGate,
    /// `ensemble <name>`: what its log lines and captured output are tagged with.
    label: String,
}

impl ComponentOffers {
    /// The offers of `component` (loaded by `runtime`) in ensemble `ensemble`, run within
    /// `settings`.
    pub(crate) fn new(
        runtime: &Arc<Runtime>,
        component: &Arc<LoadedComponent>,
        settings: &toolhost_config::draft::Settings,
        ensemble: &str,
    ) -> Self {
        let sandbox = SandboxSpec {
            talk: toolhost_contract::TalkGrants {
                log: true,
                progress: false,
                sampling: false,
                elicitation: false,
            },
            ..SandboxSpec::default()
        };
        ComponentOffers {
            runtime: Arc::clone(runtime),
            component: Arc::clone(component),
            limits: settings.limits,
            sandbox,
            gate: super::gate::CallGate::new(settings.max_running, settings.max_waiting),
            label: format!("ensemble {ensemble}"),
        }
    }

    /// What the component listed.
    pub fn listed(&self) -> &Offers {
        &self.component.offers
    }

    /// The component's hash, and the limits its offers run within: what makes a version.
    pub fn source_hash(&self) -> SourceHash {
        SourceHash(self.component.hash.0)
    }

    pub fn limits(&self) -> CallLimits {
        self.limits
    }

    /// Runs `request` for `session` (who alone sees its log lines), once the gate lets it.
    pub async fn run(&self, session: &str, request: OfferRequest<'_>) -> Result<Offered, RunError> {
        let _turn = self
            .gate
            .enter()
            .await
            .map_err(|_| RunError::HostCapacity {
                detail: format!(
                    "{} prompts and resources of {} are being given and {} more wait \
                 (max-concurrency and max-queue of its [defaults])",
                    self.gate.max_running, self.label, self.gate.max_waiting
                ),
            })?;
        let nobody: Arc<dyn CallerLink> = Arc::new(Unlinked);
        let caller = Caller {
            invoker: &self.label,
            session,
            link: &nobody,
        };
        (self.runtime)
            .offer(&self.component, caller, request, self.limits, &self.sandbox)
            .await
    }
}

impl std::fmt::Debug for ComponentOffers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ComponentOffers")
            .field("component", &self.component)
            .field("label", &self.label)
            .finish_non_exhaustive()
    }
}
