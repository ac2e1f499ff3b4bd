//! What an ensemble offers besides tools: its written prompts and resource sets, and what
//! the MCP server it imports passes through (its prompts, named with the ensemble's prefix,
//! and its resources).

use super::bind::Passed;
use crate::prompts::Prompt;
use crate::resources::ResourceSet;
use crate::resources::imported::ImportedResources;
use std::sync::Arc;
use toolhost_config::draft::EnsembleDraft;

/// An ensemble's prompts, resource sets and imported resources.
pub(super) type Offered = (
    Vec<Arc<Prompt>>,
    Vec<Arc<ResourceSet>>,
    Option<Arc<ImportedResources>>,
);

/// The ensemble's prompts, resource sets and imported resources.
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
    let imported = passed.and_then(|passed| {
        passed.resources.then(|| {
            Arc::new(ImportedResources::new(
                ensemble,
                draft.name.clone(),
                &passed.server,
                passed_at(draft),
            ))
        })
    });
    if let Some(passed) = passed {
        let more = imported_prompts(draft, ensemble, passed, &prompts);
        prompts.extend(more);
    }
    (prompts, resources, imported)
}

/// Where an ensemble names the server it imports (for messages about what it passes on).
fn passed_at(draft: &EnsembleDraft) -> toolhost_config::Span {
    match &draft.mcp {
        Some(mcp) => mcp.at.clone(),
        None => toolhost_config::Span::new(&draft.source, 0..0),
    }
}

/// The prompts an imported server passes on, named with the ensemble's prefix; one whose
/// name is taken by a prompt written in the ensemble, or unusable as a name, is left out
/// (and logged).
fn imported_prompts(
    draft: &EnsembleDraft,
    ensemble: &Arc<str>,
    passed: &Passed,
    written: &[Arc<Prompt>],
) -> Vec<Arc<Prompt>> {
    let mut taken: std::collections::HashSet<String> =
        written.iter().map(|p| p.name().to_string()).collect();
    let mut prompts = Vec::new();
    for listed in &passed.prompts {
        let name = match draft.prefix() {
            Some(prefix) => format!("{prefix}_{}", listed.name),
            None => listed.name.clone(),
        };
        let usable = !name.is_empty() && name.len() <= 128 && !name.chars().any(char::is_control);
        if !usable || !taken.insert(name.clone()) {
            tracing::warn!(
                "ensemble `{}`: the server's prompt `{}` is left out (its name is {})",
                draft.name,
                toolhost_audit::cut_text(&listed.name),
                if usable {
                    "taken by a prompt written in the ensemble"
                } else {
                    "not usable"
                }
            );
            continue;
        }
        prompts.push(Arc::new(Prompt::imported(
            ensemble,
            name,
            &passed.server,
            listed.clone(),
            passed_at(draft),
        )));
    }
    prompts
}
