//! Names across ensembles: the first ensemble (in file-name order) to claim an enabled tool
//! or prompt name, or a resource URI (by a files set's prefix, or a URI or template its
//! component or imported server lists), keeps it, and one that brings a taken name or a URI
//! another answers for is refused whole, naming both places.

use crate::catalog::{Catalog, Ensemble};
use crate::resources::owners::{Claim, Claims};
use std::collections::HashMap;
use std::sync::Arc;
use toolhost_config::{Diagnostic, Span};

/// Builds a catalog one accepted ensemble at a time, refusing name collisions.
#[derive(Default)]
pub struct CatalogBuilder {
    /// Which ensemble claimed each enabled name, and where it is defined.
    owners: HashMap<String, (String, Span)>,
    /// The same for prompts.
    prompts: HashMap<String, (String, Span)>,
    /// The resource URIs claimed, by which ensemble, and where.
    claims: Claims<(String, Span)>,
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
            if let Some(refusal) = self.claimed_elsewhere(&ensemble) {
                return Err(refusal);
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
            for (_, at, claims) in resource_claims(&ensemble) {
                for claim in claims {
                    self.claims.take(claim, (ensemble.name.clone(), at.clone()));
                }
            }
        }
        self.ensembles.push(ensemble);
        Ok(())
    }

    /// A refusal of `ensemble` if a resource URI it would answer for is answered for by an
    /// ensemble accepted before it, or by another of its own sources.
    fn claimed_elsewhere(&self, ensemble: &Ensemble) -> Option<Diagnostic> {
        let mut own: Claims<(String, Span)> = Claims::default();
        let sources = resource_claims(ensemble);
        for (source, at, claims) in &sources {
            for claim in claims {
                let met = (self.claims.met(claim))
                    .map(|(taken, (owner, first))| (taken, format!("of ensemble `{owner}`"), first))
                    .or_else(|| {
                        own.met(claim)
                            .map(|(taken, (other, first))| (taken, other, first))
                    });
                if let Some((taken, owner, first)) = met {
                    return Some(
                        Diagnostic::new(
                            at.location(),
                            format!(
                                "{} ({source}) overlaps {} {owner}; ensemble `{}` is refused (a \
                                 resource URI must have one owner: choose URIs, templates and \
                                 prefixes of which no two can name the same resource)",
                                claim.describe(),
                                taken.describe(),
                                ensemble.name
                            ),
                        )
                        .with_note(Some(first.location()), "first defined here"),
                    );
                }
            }
            // A source's own claims may meet each other (a URI its template matches).
            for claim in claims {
                own.take(claim.clone(), (source.clone(), at.clone()));
            }
        }
        None
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
            warnings: ensemble.warnings.clone(),
        })
    }

    pub fn build(self) -> Catalog {
        Catalog::new(self.ensembles)
    }
}

/// The resource URIs an enabled ensemble answers for, by source: each files set (its prefix),
/// and its component or imported server (the URIs and templates it lists), with where each
/// source is written.
fn resource_claims(ensemble: &Ensemble) -> Vec<(String, Span, Vec<Claim>)> {
    let sets = ensemble.resources.iter().map(|set| {
        (
            format!("of resource set `{}`", set.name()),
            set.definition().clone(),
            vec![Claim::Prefix(set.uri_prefix().to_string())],
        )
    });
    let passed = ensemble.passed.iter().map(|passed| {
        (
            format!("passed on by its {}", passed.source_kind()),
            passed.definition().clone(),
            passed.claimed(),
        )
    });
    sets.chain(passed).collect()
}
