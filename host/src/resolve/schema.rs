//! Arguments schemas, checked and compiled once per distinct text: invokers with the same
//! schema share one [`Schema`], and a reload reuses every schema the catalog already holds
//! instead of checking and compiling it again. No engine is needed.

use crate::catalog::Schema;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

/// Why a schema cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum SchemaError {
    /// The text is not JSON at all.
    NotJson(String),
    /// It is JSON, but not a valid JSON Schema of an object.
    Unusable(String),
}

/// The schemas the catalogs of one host hold, by the blake3 of their JSON text.
#[derive(Debug, Default)]
pub(super) struct SchemaCache {
    schemas: Mutex<HashMap<[u8; 32], Weak<Schema>>>,
}

impl SchemaCache {
    /// The compiled schema of `value`, shared with every other user of the same schema.
    pub(super) fn of_value(&self, value: Value) -> Result<Arc<Schema>, SchemaError> {
        let text = value.to_string();
        self.get_or_compile(&text, || Ok(value))
    }

    /// The compiled schema whose JSON text is `text`.
    pub(super) fn of_text(&self, text: &str) -> Result<Arc<Schema>, SchemaError> {
        self.get_or_compile(text, || {
            serde_json::from_str(text).map_err(|e| SchemaError::NotJson(e.to_string()))
        })
    }

    fn get_or_compile(
        &self,
        text: &str,
        value: impl FnOnce() -> Result<Value, SchemaError>,
    ) -> Result<Arc<Schema>, SchemaError> {
        let hash = *blake3::hash(text.as_bytes()).as_bytes();
        if let Some(schema) = self.lock().get(&hash).and_then(Weak::upgrade) {
            return Ok(schema);
        }
        let value = value()?;
        let validator = compile(&value).map_err(SchemaError::Unusable)?;
        // compile() accepts only objects.
        let Value::Object(object) = value else {
            return Err(SchemaError::Unusable("it is not a JSON object".into()));
        };
        let schema = Arc::new(Schema {
            object: Arc::new(object),
            validator,
            hash,
            json_len: text.len(),
        });
        self.lock().insert(hash, Arc::downgrade(&schema));
        Ok(schema)
    }

    /// Forgets the schemas no catalog holds any more.
    pub(super) fn prune(&self) {
        self.lock().retain(|_, schema| schema.strong_count() > 0);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Weak<Schema>>> {
        self.schemas.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Compiles a JSON Schema; it must itself be valid and describe an object, because tool
/// arguments are always a JSON object.
fn compile(schema: &Value) -> Result<jsonschema::Validator, String> {
    jsonschema::meta::validate(schema).map_err(|e| {
        let at = e.instance_path().to_string();
        if at.is_empty() {
            e.to_string()
        } else {
            format!("at {at}: {e}")
        }
    })?;
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        return Err("it must have \"type\": \"object\" (tool arguments are a JSON object)".into());
    }
    jsonschema::validator_for(schema).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_same_schema_is_compiled_once_and_shared() {
        let cache = SchemaCache::default();
        let a = cache
            .of_value(json!({"type": "object", "properties": {"x": {"type": "string"}}}))
            .unwrap();
        let b = cache
            .of_text(r#"{"type":"object","properties":{"x":{"type":"string"}}}"#)
            .unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        drop((a, b));
        cache.prune();
        assert!(cache.lock().is_empty());
    }

    #[test]
    fn schemas_must_be_valid_and_of_objects() {
        let cache = SchemaCache::default();
        let unusable = |e| match e {
            SchemaError::Unusable(message) => message,
            other => panic!("{other:?}"),
        };
        let message = unusable(cache.of_value(json!({"type": "string"})).unwrap_err());
        assert!(message.contains("\"type\": \"object\""), "{message}");
        let message = unusable(cache.of_value(json!({"type": "objekt"})).unwrap_err());
        assert!(message.starts_with("at /type"), "{message}");
        assert!(matches!(
            cache.of_text("{oops"),
            Err(SchemaError::NotJson(_))
        ));
    }
}
