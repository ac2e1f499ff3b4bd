//! Names across ensembles: the first ensemble (in file-name order) to claim an enabled tool
//! or prompt name, or a resource URI prefix, keeps it, and one that brings a taken name (or
//! a prefix that overlaps a taken one) is refused whole, naming both places.

use crate::catalog::{Catalog, Ensemble};
use std::collections::HashMap;
use std::sync::Arc;
use toolhost_config::draft::overlaps;
use toolhost_config::{Diagnostic, Span};

/// Builds a catalog one accepted ensemble at a time, refusing name collisions.
#[derive(Default)]
pub struct CatalogBuilder {
    /// Which ensemble claimed each enabled name, and where it is defined.
    owners: HashMap<String, (String, Span)>,
    /// The same for prompts.
    prompts: HashMap<String, (String, Span)>,
    /// Each enabled resource set's URI prefix, its ensemble and where it is defined.
    prefixes: Vec<(String, String, Span)>,
    ensembles: Vec<Arc<Ensemble>>,
}

impl CatalogBuilder {
    /// Adds `ensemble` if none of its enabled tools' names is taken; otherwise adds none of
    /// them and says which name collides with which.
    pub fn add(&mut self, ensemble: Arc<Ensemble>) -> Result<(), Diagnostic> {
        let ensemble = self.without_taken_imports(ensemble);
        if ensemble.enabled {
            let enabled = || ensemble.tools.iter().filter(|t| t.enabled);
            if let Some((tool, (owner, first))) =
                enabled().find_map(|t| self.owners.get(&t.name).map(|owner| (t, owner)))
            {
                return Err(Diagnostic::new(
                    tool.definition.location(),
                    format!(
                        "tool name `{}` is already used by ensemble `{owner}`; ensemble `{}` is refused \
                         (rename the invoker, or set `prefix` in [ensemble])",
                        tool.name, ensemble.name
                    ),
                )
                .with_note(Some(first.location()), "first defined here"));
            }
            if let Some((prompt, (owner, first))) = ensemble
                .prompts
                .iter()
                .find_map(|p| self.prompts.get(p.name()).map(|owner| (p, owner)))
            {
                return Err(Diagnostic::new(
                    prompt.definition().location(),
                    format!(
                        "prompt name `{}` is already used by ensemble `{owner}`; ensemble `{}` \
                         is refused (rename the prompt, or set `prefix` in [ensemble])",
                        prompt.name(),
                        ensemble.name
                    ),
                )
                .with_note(Some(first.location()), "first defined here"));
            }
            if let Some((set, (prefix, owner, first))) = ensemble.resources.iter().find_map(|set| {
                self.prefixes
                    .iter()
                    .find(|(taken, _, _)| overlaps(taken, set.uri_prefix()))
                    .map(|taken| (set, taken))
            }) {
                return Err(Diagnostic::new(
                    set.definition().location(),
                    format!(
                        "URI prefix `{}` overlaps `{prefix}` of ensemble `{owner}`; ensemble `{}` \
                         is refused (a URI must name one file: choose prefixes neither of which \
                         starts the other)",
                        set.uri_prefix(),
                        ensemble.name
                    ),
                )
                .with_note(Some(first.location()), "first defined here"));
            }
            for tool in enabled() {
                self.owners.insert(
                    tool.name.clone(),
                    (ensemble.name.clone(), tool.definition.clone()),
                );
            }
            for prompt in &ensemble.prompts {
                self.prompts.insert(
                    prompt.name().to_string(),
                    (ensemble.name.clone(), prompt.definition().clone()),
                );
            }
            for set in &ensemble.resources {
                self.prefixes.push((
                    set.uri_prefix().to_string(),
                    ensemble.name.clone(),
                    set.definition().clone(),
                ));
            }
        }
        self.ensembles.push(ensemble);
        Ok(())
    }

    /// `ensemble` without the prompts its imported server or component passes on whose
    /// names are taken: neither can get an ensemble refused by naming a prompt as another's
    /// (they are left out, and logged).
    fn without_taken_imports(&self, ensemble: Arc<Ensemble>) -> Arc<Ensemble> {
        let taken =
            |p: &crate::prompts::Prompt| p.is_passed() && self.prompts.contains_key(p.name());
        if !ensemble.enabled || !ensemble.prompts.iter().any(|p| taken(p)) {
            return ensemble;
        }
        let mut prompts = Vec::with_capacity(ensemble.prompts.len());
        for prompt in &ensemble.prompts {
            if taken(prompt) {
                tracing::warn!(
                    "ensemble `{}`: the prompt `{}` it passes on is left out: the name is taken",
                    ensemble.name,
                    prompt.name()
                );
            } else {
                prompts.push(Arc::clone(prompt));
            }
        }
        Arc::new(Ensemble {
            name: ensemble.name.clone(),
            file: ensemble.file.clone(),
            enabled: ensemble.enabled,
            description: ensemble.description.clone(),
            tools: ensemble.tools.clone(),
            prompts,
            resources: ensemble.resources.clone(),
            passed: ensemble.passed.clone(),
        })
    }

    pub fn build(self) -> Catalog {
        Catalog::new(self.ensembles)
    }
}
