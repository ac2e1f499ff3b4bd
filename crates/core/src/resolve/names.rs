//! Tool names across ensembles: the first ensemble (in file-name order) to claim an enabled
//! name keeps it, and one that brings a taken name is refused whole, naming both places.

use crate::catalog::{Catalog, Ensemble};
use std::collections::HashMap;
use std::sync::Arc;
use toolhost_config::{Diagnostic, Span};

/// Builds a catalog one accepted ensemble at a time, refusing name collisions.
#[derive(Default)]
pub struct CatalogBuilder {
    /// Which ensemble claimed each enabled name, and where it is defined.
    owners: HashMap<String, (String, Span)>,
    ensembles: Vec<Arc<Ensemble>>,
}

impl CatalogBuilder {
    /// Adds `ensemble` if none of its enabled tools' names is taken; otherwise adds none of
    /// them and says which name collides with which.
    pub fn add(&mut self, ensemble: Arc<Ensemble>) -> Result<(), Diagnostic> {
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
            for tool in enabled() {
                self.owners.insert(
                    tool.name.clone(),
                    (ensemble.name.clone(), tool.definition.clone()),
                );
            }
        }
        self.ensembles.push(ensemble);
        Ok(())
    }

    pub fn build(self) -> Catalog {
        Catalog::new(self.ensembles)
    }
}
