//! The `toolhost:plugin@0.3.0` world: 0.2.0's tools ([`super::plugin`]), and the prompts and
//! resources of its `offers` interface: listed once at load, in the instance `describe()`
//! ran in, and each `get-prompt` or `read-resource` run on a fresh instance, as a call.

use super::{Adapter, Answer, Call, Described, lifted_result_fuel};
use crate::bindings::since_v0_3_0::{self as v3, types};
use crate::offers::{
    MAX_OFFERED_BYTES, OfferRequest, Offered, Offers, PromptArgument, PromptSpec, ResourceSpec,
    TemplateSpec,
};
use crate::state::CallState;
use crate::tools::ToolDescription;
use toolhost_contract::{BoxFuture, CallLimits, MESSAGE_BYTES, Role, RunError, ToolFailure};
use wasmtime::Store;
use wasmtime::component::Instance;

super::plugin::plugin_world!(V3, v3, offers);

impl V3 {
    /// The prompts, resources and templates `plugin` lists, each list's copy out of the guest
    /// bounded by [`MAX_OFFERED_BYTES`] of hostcall fuel (and checked whole at load).
    async fn offers_of(
        &self,
        store: &mut Store<CallState>,
        plugin: &v3::Plugin,
    ) -> wasmtime::Result<Offers> {
        let lists = plugin.toolhost_plugin_offers();
        store.set_hostcall_fuel(MAX_OFFERED_BYTES);
        let prompts = lists.call_list_prompts(&mut *store).await?;
        store.set_hostcall_fuel(MAX_OFFERED_BYTES);
        let resources = lists.call_list_resources(&mut *store).await?;
        store.set_hostcall_fuel(MAX_OFFERED_BYTES);
        let templates = lists.call_list_resource_templates(&mut *store).await?;
        Ok(Offers {
            prompts: prompts
                .into_iter()
                .map(|p| PromptSpec {
                    name: p.name,
                    title: p.title,
                    description: p.description,
                    arguments: (p.arguments.into_iter())
                        .map(|a| PromptArgument {
                            name: a.name,
                            description: a.description,
                            required: a.required,
                        })
                        .collect(),
                })
                .collect(),
            resources: resources
                .into_iter()
                .map(|r| ResourceSpec {
                    uri: r.uri,
                    name: r.name,
                    title: r.title,
                    description: r.description,
                    mime_type: r.mime_type,
                })
                .collect(),
            templates: templates
                .into_iter()
                .map(|t| TemplateSpec {
                    uri_template: t.uri_template,
                    name: t.name,
                    title: t.title,
                    description: t.description,
                    mime_type: t.mime_type,
                })
                .collect(),
        })
    }

    /// Runs `get-prompt` or `read-resource` on `instance`. The component's own errors are
    /// the answer (`not-found`) or the caller's error; a read that returns nothing is
    /// refused, since a resource is at least one item.
    async fn offer_on(
        &self,
        store: &mut Store<CallState>,
        instance: Instance,
        request: OfferRequest<'_>,
    ) -> wasmtime::Result<Result<Offered, RunError>> {
        let plugin = self.exports.load(&mut *store, &instance)?;
        let offers = plugin.toolhost_plugin_offers();
        let answer = match request {
            OfferRequest::Prompt { name, arguments } => offers
                .call_get_prompt(&mut *store, name, arguments)
                .await?
                .map(|messages| {
                    Offered::Prompt(
                        messages
                            .into_iter()
                            .map(|m| {
                                let role = match m.role {
                                    types::Role::User => Role::User,
                                    types::Role::Assistant => Role::Assistant,
                                };
                                (role, v3::content(m.content))
                            })
                            .collect(),
                    )
                }),
            OfferRequest::Resource { uri } => offers
                .call_read_resource(&mut *store, uri)
                .await?
                .map(|items| Offered::Resource(items.into_iter().map(v3::embedded).collect())),
        };
        // The component's own words, cut as a call's messages are.
        let said = |mut reason: String| {
            crate::talk::cut(&mut reason, MESSAGE_BYTES);
            reason
        };
        Ok(match answer {
            Ok(Offered::Resource(items)) if items.is_empty() => Err(RunError::Tool(
                ToolFailure::Failed(format!("reading `{}` returned no contents", shown(request))),
            )),
            Ok(offered) => Ok(offered),
            Err(types::OfferError::NotFound(reason)) => Ok(Offered::NotFound(said(reason))),
            Err(types::OfferError::InvalidArguments(reason)) => {
                Err(RunError::Tool(ToolFailure::InvalidArguments(said(reason))))
            }
            Err(types::OfferError::Failed(reason)) => {
                Err(RunError::Tool(ToolFailure::Failed(said(reason))))
            }
        })
    }
}

/// The URI or prompt a request names, for messages.
fn shown(request: OfferRequest<'_>) -> &str {
    match request {
        OfferRequest::Prompt { name, .. } => name,
        OfferRequest::Resource { uri } => uri,
    }
}
