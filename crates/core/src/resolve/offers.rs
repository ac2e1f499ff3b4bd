//! What an ensemble offers besides tools: its written prompts and resource sets, and what
//! the MCP server it imports or its `toolhost:plugin@0.3.0` component passes on (prompts,
//! named with the ensemble's prefix, and resources).

use super::bind::Passed;
use crate::backend::component::ComponentOffers;
use crate::prompts::Prompt;
use crate::resources::ResourceSet;
use crate::resources::passed::PassedResources;
use std::sync::Arc;
use toolhost_config::draft::EnsembleDraft;

/// An ensemble's prompts, resource sets and passed-on resources.
pub(super) type Offered = (
    Vec<Arc<Prompt>>,
    Vec<Arc<ResourceSet>>,
    Option<Arc<PassedResources>>,
);

/// The ensemble's prompts, resource sets and passed-on resources.
pub(super) fn offers(
    draft: &mut EnsembleDraft,
    ensemble: &Arc<str>,
    passed: Option<&Passed>,
) -> Offered {
    let mut prompts: Vec<Arc<Prompt>> = std::mem::take(&mut draft.prompts)
        .into_iter()
        .map(|prompt| Arc::new(Prompt::new(ensemble, prompt)))
        .collect();
    let resources = std::mem::take(&mut draft.resources)
        .into_iter()
        .map(|set| Arc::new(ResourceSet::new(ensemble, set)))
        .collect();
    let mut resources_passed = None;
    match passed {
        Some(Passed::Server {
            server,
            prompts: listed,
            resources: offers_resources,
        }) => {
            if let Some(known) = offers_resources {
                resources_passed = Some(Arc::new(PassedResources::new(
                    ensemble,
                    draft.name.clone(),
                    server,
                    passed_at(draft),
                    known.clone(),
                )));
            }
            let more = named(draft, &prompts, listed.iter().map(|p| p.name.as_str()));
            let more = (listed.iter().zip(more)).filter_map(|(listed, name)| {
                let prompt =
                    Prompt::imported(ensemble, name?, server, listed.clone(), passed_at(draft));
                Some(Arc::new(prompt))
            });
            prompts.extend(more.collect::<Vec<_>>());
        }
        Some(Passed::Component { runtime, component }) => {
            let offers = Arc::new(ComponentOffers::new(
                runtime,
                component,
                &draft.offer_settings(),
                &draft.name,
            ));
            let listed = &offers.listed().prompts;
            let more = named(draft, &prompts, listed.iter().map(|p| p.name.as_str()));
            let more = (listed.iter().zip(more)).filter_map(|(listed, name)| {
                let prompt =
                    Prompt::of_component(ensemble, name?, &offers, listed, component_at(draft));
                Some(Arc::new(prompt))
            });
            prompts.extend(more.collect::<Vec<_>>());
            let listed = offers.listed();
            if !listed.resources.is_empty() || !listed.templates.is_empty() {
                resources_passed = Some(Arc::new(PassedResources::component(
                    ensemble,
                    draft.name.clone(),
                    &offers,
                    component_at(draft),
                )));
            }
        }
        None => {}
    }
    (prompts, resources, resources_passed)
}

/// Where an ensemble names its component (for messages about what it passes on).
fn component_at(draft: &EnsembleDraft) -> toolhost_config::Span {
    match draft.component() {
        Some(component) => component.at.clone(),
        None => toolhost_config::Span::new(&draft.source, 0..0),
    }
}

/// Where an ensemble names the server it imports (for messages about what it passes on).
fn passed_at(draft: &EnsembleDraft) -> toolhost_config::Span {
    match &draft.mcp {
        Some(mcp) => mcp.at.clone(),
        None => toolhost_config::Span::new(&draft.source, 0..0),
    }
}

/// The names the prompts `listed` (by a server or a component) go by here: with the
/// ensemble's prefix, or `None` for one whose name is taken by a prompt written in the
/// ensemble (or by one listed before it), or unusable as a name (each is logged).
fn named<'a>(
    draft: &EnsembleDraft,
    written: &[Arc<Prompt>],
    listed: impl Iterator<Item = &'a str>,
) -> Vec<Option<String>> {
    let mut taken: std::collections::HashSet<String> =
        written.iter().map(|p| p.name().to_string()).collect();
    listed
        .map(|listed| {
            let name = match draft.prefix() {
                Some(prefix) => format!("{prefix}_{listed}"),
                None => listed.to_string(),
            };
            let usable =
                !name.is_empty() && name.len() <= 128 && !name.chars().any(char::is_control);
            if usable && taken.insert(name.clone()) {
                return Some(name);
            }
            tracing::warn!(
                "ensemble `{}`: the prompt `{}` it passes on is left out (its name is {})",
                draft.name,
                toolhost_audit::cut_text(listed),
                if usable {
                    "taken by another prompt of the ensemble"
                } else {
                    "not usable"
                }
            );
            None
        })
        .collect()
}
