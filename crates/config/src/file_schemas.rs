//! JSON Schemas of the three kinds of file, for editors (taplo and the Even Better TOML
//! extension read a `#:schema <path>` first line): generated from the very types that read
//! the files, so they cannot drift from them. `schemas/*.schema.json` in the repository holds
//! them (a test checks the copies are current), `toolhost new` writes the ensemble's into each
//! project, and every shipped file names its schema.
//!
//! A schema says the shape (keys, types, ranges, enums); the host's own checks say more, with
//! file:line:col (`toolhost check`).

use crate::v1::{EnsembleFile, HostFile, InvokerFile};
use schemars::JsonSchema;
use serde_json::Value;

/// The kinds of file, by the name their schema is published under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `ensembles/<name>.toml`.
    Ensemble,
    /// `ensembles/<ensemble>/<invoker>.toml`, named by an entry's `source`.
    Invoker,
    /// `toolhost.toml`.
    Host,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Ensemble, Kind::Invoker, Kind::Host];

    /// The file name of its schema: `ensemble.schema.json`, ...
    pub fn file_name(self) -> &'static str {
        match self {
            Kind::Ensemble => "ensemble.schema.json",
            Kind::Invoker => "invoker.schema.json",
            Kind::Host => "toolhost.schema.json",
        }
    }

    /// Its schema (JSON Schema draft 7, which editors read).
    pub fn schema(self) -> Value {
        match self {
            Kind::Ensemble => schema_of::<EnsembleFile>("A toolhost ensemble file"),
            Kind::Invoker => schema_of::<InvokerFile>("A toolhost invoker file"),
            Kind::Host => schema_of::<HostFile>("toolhost.toml"),
        }
    }

    /// Its schema as the published file holds it: pretty JSON and a final newline.
    pub fn schema_text(self) -> String {
        let text = serde_json::to_string_pretty(&self.schema()).unwrap_or_default();
        format!("{text}\n")
    }

    /// What the schema finds wrong with `text` (TOML), each with its JSON pointer; empty when
    /// it fits. A file that is not TOML at all is one error.
    pub fn check(self, text: &str) -> Vec<String> {
        let value: Value = match toml::from_str::<toml::Value>(text) {
            Ok(value) => match serde_json::to_value(value) {
                Ok(value) => value,
                Err(e) => return vec![e.to_string()],
            },
            Err(e) => return vec![e.to_string()],
        };
        let schema = self.schema();
        let validator = match jsonschema::draft7::new(&schema) {
            Ok(validator) => validator,
            Err(e) => return vec![format!("the schema itself: {e}")],
        };
        validator
            .iter_errors(&value)
            .map(|e| format!("at {:?}: {e}", e.instance_path().to_string()))
            .collect()
    }
}

fn schema_of<T: JsonSchema>(title: &str) -> Value {
    let mut schema = schemars::generate::SchemaSettings::draft07()
        .into_generator()
        .into_root_schema_for::<T>();
    schema.insert("title".into(), title.into());
    schema.to_value()
}

#[cfg(test)]
mod tests {
    use super::Kind;

    #[test]
    fn a_schema_knows_the_keys_ranges_and_enums() {
        let good = "schema-version = 1\n[ensemble]\nname = \"web\"\ncomponent = \"../w.wasm\"\n\
                    [defaults]\ntimeout-ms = 500\ndedup = \"exact\"\n";
        assert_eq!(Kind::Ensemble.check(good), Vec::<String>::new());
        let bad = "schema-version = 1\n[ensemble]\nname = \"web\"\ncolour = 1\n\
                   [defaults]\ntimeout-ms = 0\ndedup = \"fuzzy\"\n";
        let errors = Kind::Ensemble.check(bad).join("\n");
        for expected in ["colour", "/defaults/timeout-ms", "/defaults/dedup"] {
            assert!(errors.contains(expected), "{expected} in:\n{errors}");
        }
        assert!(!Kind::Host.check("schema-version = 2\n").is_empty());
        assert!(
            !Kind::Host
                .check("schema-version = 1\n[chat]\napi-key = \"sk\"\n")
                .is_empty()
        );
    }
}
