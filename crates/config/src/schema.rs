//! Arguments schemas, checked and compiled once per distinct text: invokers with the same
//! schema share one [`Schema`], and a reload reuses every schema the catalog already holds
//! instead of checking and compiling it again. No engine is needed.
//!
//! A schema comes from a plugin as often as from an operator, and the host evaluates it on
//! every call, so it is bounded before it is compiled ([`check_bounds`]): its size, its
//! depth, how many subschemas it expands to once every `$ref` is followed where it is used
//! (a schema that doubles at each level is refused, not evaluated), and its patterns, whose
//! matching is also bounded in backtracking steps.

use serde_json::{Map, Value};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError, Weak};

/// An arguments schema (always a JSON object) with its compiled validator. Invokers with the
/// same schema share one.
pub struct Schema {
    /// The schema, shared as it is with whoever lists it (an MCP `inputSchema` is one).
    pub object: Arc<Map<String, Value>>,
    validator: jsonschema::Validator,
    /// blake3 of the schema's JSON text, for version hashes.
    hash: [u8; 32],
    /// The length of its JSON text, for budgets.
    pub json_len: usize,
}

impl Schema {
    /// What checks a value against it.
    pub fn validator(&self) -> &jsonschema::Validator {
        &self.validator
    }

    /// blake3 of its JSON text.
    pub fn hash(&self) -> &[u8; 32] {
        &self.hash
    }
}

impl fmt::Debug for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Schema")
            .field("object", &self.object)
            .finish_non_exhaustive()
    }
}

/// Why a schema cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaError {
    /// The text is not JSON at all.
    NotJson(String),
    /// It is JSON, but not a valid JSON Schema of an object.
    Unusable(String),
}

/// The schemas the catalogs of one host hold, by the blake3 of their JSON text.
#[derive(Debug, Default)]
pub struct SchemaCache {
    schemas: Mutex<HashMap<[u8; 32], Weak<Schema>>>,
}

impl SchemaCache {
    /// The compiled schema of `value`, shared with every other user of the same schema.
    pub fn of_value(&self, value: Value) -> Result<Arc<Schema>, SchemaError> {
        // Measured before it is written out: a descriptor's `[arguments]` may be megabytes.
        check_size(toolhost_contract::json_len(&value)).map_err(SchemaError::Unusable)?;
        let text = value.to_string();
        self.get_or_compile(&text, || Ok(value))
    }

    /// The compiled schema whose JSON text is `text`.
    pub fn of_text(&self, text: &str) -> Result<Arc<Schema>, SchemaError> {
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
        check_size(text.len()).map_err(SchemaError::Unusable)?;
        let value = value()?;
        check_bounds(&value).map_err(SchemaError::Unusable)?;
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
    pub fn prune(&self) {
        self.lock().retain(|_, schema| schema.strong_count() > 0);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Weak<Schema>>> {
        self.schemas.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A schema's JSON text, at most.
pub const MAX_SCHEMA_BYTES: usize = 256 << 10;
/// How deep a schema's JSON may nest.
pub const MAX_SCHEMA_DEPTH: usize = 32;
/// Subschemas once every `$ref` is followed where it is used.
pub const MAX_SUBSCHEMAS: usize = 10_000;
/// JSON values of every kind (an `enum`'s items, say) once every `$ref` is followed.
pub const MAX_SCHEMA_VALUES: usize = 200_000;
/// Keywords that name or reach a schema by something other than a local JSON pointer from
/// the root: the walk could not follow them as jsonschema does, so their cost could not be
/// bounded. (`$id` is accepted at the root, where it changes nothing the walk follows.)
const UNFOLLOWABLE: [&str; 6] = [
    "$anchor",
    "$dynamicAnchor",
    "$dynamicRef",
    "$recursiveAnchor",
    "$recursiveRef",
    "$id",
];
/// `pattern`s and `patternProperties` keys in one schema, and the length of each.
pub const MAX_PATTERNS: usize = 1_000;
pub const MAX_PATTERN_CHARS: usize = 1_000;
/// Backtracking steps one pattern match may take (jsonschema's default is 1,000,000).
const PATTERN_BACKTRACK_LIMIT: usize = 100_000;

/// Refuses schema text past [`MAX_SCHEMA_BYTES`], before it is parsed.
fn check_size(text_len: usize) -> Result<(), String> {
    if text_len > MAX_SCHEMA_BYTES {
        return Err(format!(
            "it is {} KiB of JSON, more than the {} KiB a schema may be",
            text_len >> 10,
            MAX_SCHEMA_BYTES >> 10
        ));
    }
    Ok(())
}

/// Refuses a schema past the bounds above, saying which and where.
fn check_bounds(schema: &Value) -> Result<(), String> {
    // Draft 4 spells `$id` as `id`.
    let draft4 = schema
        .get("$schema")
        .and_then(Value::as_str)
        .is_some_and(|s| s.contains("draft-04"));
    let mut walk = Walk {
        root: schema,
        draft4,
        subschemas: 0,
        values: 0,
        patterns: 0,
        following: Vec::new(),
    };
    walk.value(schema, "", 0, Role::Schema)
}

/// One walk over a schema, following local `$ref`s where they are used.
struct Walk<'a> {
    root: &'a Value,
    draft4: bool,
    subschemas: usize,
    values: usize,
    patterns: usize,
    /// The `$ref`s being followed now, as JSON pointers (a recursive schema is walked once
    /// per cycle).
    following: Vec<std::borrow::Cow<'a, str>>,
}

/// Keywords whose values are data (instances), not schemas: counted like everything else,
/// but a `$ref` or a `pattern` inside them is only text.
const DATA_KEYWORDS: [&str; 4] = ["enum", "const", "default", "examples"];
/// Keywords whose values map names to schemas: a property called `enum` is a schema still.
const MAP_KEYWORDS: [&str; 6] = [
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
    "dependencies",
];

/// What a JSON value in a schema is.
#[derive(Clone, Copy, PartialEq)]
enum Role {
    /// A schema (or, conservatively, anything not known to be something else).
    Schema,
    /// An object whose values are schemas (`properties`, `$defs`, ...).
    Map,
    /// An instance (`enum`, `const`, `default`, `examples`).
    Data,
}

impl Role {
    /// The role of the value under `key` of an object of this role.
    fn of(self, key: &str) -> Role {
        match self {
            Role::Data => Role::Data,
            Role::Map => Role::Schema,
            Role::Schema if DATA_KEYWORDS.contains(&key) => Role::Data,
            Role::Schema if MAP_KEYWORDS.contains(&key) => Role::Map,
            Role::Schema => Role::Schema,
        }
    }
}

impl<'a> Walk<'a> {
    /// Walks `value`, found at `at`, `depth` levels down, in the role it has there.
    fn value(
        &mut self,
        value: &'a Value,
        at: &str,
        depth: usize,
        role: Role,
    ) -> Result<(), String> {
        if depth > MAX_SCHEMA_DEPTH {
            return Err(format!(
                "it nests deeper than {MAX_SCHEMA_DEPTH} levels (at {at})"
            ));
        }
        self.values += 1;
        if self.values > MAX_SCHEMA_VALUES {
            return Err(format!(
                "it expands to more than {MAX_SCHEMA_VALUES} JSON values, counting each \
                 `$ref` where it is used"
            ));
        }
        match value {
            Value::Object(map) if role != Role::Schema => {
                for (key, child) in map {
                    self.value(child, &format!("{at}/{key}"), depth + 1, role.of(key))?;
                }
                Ok(())
            }
            Value::Object(map) => {
                self.subschemas += 1;
                if self.subschemas > MAX_SUBSCHEMAS {
                    return Err(format!(
                        "it expands to more than {MAX_SUBSCHEMAS} subschemas, counting each \
                         `$ref` where it is used"
                    ));
                }
                if let Some(Value::String(pattern)) = map.get("pattern") {
                    self.pattern(pattern, at)?;
                }
                if let Some(Value::Object(patterns)) = map.get("patternProperties") {
                    for pattern in patterns.keys() {
                        self.pattern(pattern, at)?;
                    }
                }
                let draft4_id = self.draft4.then_some("id");
                if let Some(keyword) = UNFOLLOWABLE
                    .into_iter()
                    .chain(draft4_id)
                    .filter(|k| !at.is_empty() || !k.ends_with("id"))
                    .find(|k| map.get(*k).is_some_and(Value::is_string))
                {
                    return Err(format!(
                        "it uses `{keyword}` (at {at}); only `$ref`s to a JSON pointer in the \
                         same schema (\"#/$defs/name\") are accepted"
                    ));
                }
                let reference = match map.get("$ref") {
                    Some(Value::String(reference)) => {
                        Some(local_pointer(reference).ok_or_else(|| {
                            format!(
                                "its `$ref` {reference:?} (at {at}) is not a JSON pointer in the \
                                 same schema (\"#/$defs/name\"); other references are not \
                                 accepted"
                            )
                        })?)
                    }
                    _ => None,
                };
                if let Some(pointer) = reference
                    && !self.following.contains(&pointer)
                {
                    let Some(target) = self.root.pointer(&pointer) else {
                        return Err(format!(
                            "its `$ref` \"#{pointer}\" (at {at}) points at nothing"
                        ));
                    };
                    if self.following.len() >= MAX_SCHEMA_DEPTH {
                        return Err(format!(
                            "it follows `$ref` more than {MAX_SCHEMA_DEPTH} deep (at {at})"
                        ));
                    }
                    // The target's own nesting counts from its place; the chain of `$ref`s
                    // is bounded on its own, above.
                    self.following.push(pointer);
                    self.value(target, &format!("{at}/$ref"), 0, Role::Schema)?;
                    self.following.pop();
                }
                for (key, child) in map {
                    self.value(child, &format!("{at}/{key}"), depth + 1, role.of(key))?;
                }
                Ok(())
            }
            // An array's items have its role (`allOf`'s are schemas, `enum`'s data).
            Value::Array(items) => items
                .iter()
                .enumerate()
                .try_for_each(|(i, item)| self.value(item, &format!("{at}/{i}"), depth + 1, role)),
            _ => Ok(()),
        }
    }

    fn pattern(&mut self, pattern: &str, at: &str) -> Result<(), String> {
        self.patterns += 1;
        if self.patterns > MAX_PATTERNS {
            return Err(format!("it has more than {MAX_PATTERNS} patterns"));
        }
        if pattern.chars().count() > MAX_PATTERN_CHARS {
            return Err(format!(
                "a pattern is longer than {MAX_PATTERN_CHARS} characters (at {at})"
            ));
        }
        // JSON Schema patterns are ECMA 262 regular expressions, which have no subroutine
        // calls (`\g1`, `(?1)`); the pattern engine accepts them, and a call to a group
        // numbered in the billions makes it allocate for every group up to it. What the
        // engine compiles is jsonschema's translation of the pattern (`\cA` becomes a control
        // character, say), so that is what is checked, and the pattern as written too.
        let translated = jsonschema_regex::to_rust_regex(pattern).ok();
        let subroutines = |text: &str| {
            fancy_regex::Expr::parse_tree(text).is_ok_and(|tree| tree.contains_subroutines)
        };
        if subroutines(pattern) || translated.as_deref().is_some_and(subroutines) {
            return Err(format!(
                "a pattern uses a subroutine call (at {at}), which JSON Schema patterns do not have"
            ));
        }
        // What does not parse is refused, with the engine's reason, when it is compiled.
        Ok(())
    }
}

/// The JSON pointer of a `$ref` that names a place in the same schema, `#` or `#/...`,
/// percent-decoded as jsonschema decodes it before it looks the pointer up.
fn local_pointer(reference: &str) -> Option<std::borrow::Cow<'_, str>> {
    let pointer = reference.strip_prefix('#')?;
    if !(pointer.is_empty() || pointer.starts_with('/')) {
        return None;
    }
    percent_encoding::percent_decode_str(pointer)
        .decode_utf8()
        .ok()
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
    jsonschema::options()
        .with_pattern_options(
            jsonschema::PatternOptions::fancy_regex().backtrack_limit(PATTERN_BACKTRACK_LIMIT),
        )
        .build(schema)
        .map_err(|e| e.to_string())
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

    #[test]
    fn hostile_schemas_are_refused_before_they_are_compiled() {
        let cache = SchemaCache::default();
        let refused = |schema: Value| match cache.of_value(schema) {
            Err(SchemaError::Unusable(message)) => message,
            other => panic!("accepted: {other:?}"),
        };
        // allOf that doubles at each of 20 levels: 2^20 subschemas once expanded.
        let mut defs = serde_json::Map::new();
        defs.insert("l0".into(), json!({"type": "string"}));
        for level in 1..=20 {
            let below = format!("#/$defs/l{}", level - 1);
            defs.insert(
                format!("l{level}"),
                json!({"allOf": [{"$ref": below}, {"$ref": below}]}),
            );
        }
        let doubling = json!({"type": "object", "$defs": defs,
            "properties": {"x": {"$ref": "#/$defs/l20"}}});
        assert!(refused(doubling).contains("more than 10000 subschemas"));
        // A recursive schema (a tree) is fine: each cycle is walked once.
        let tree = json!({"type": "object", "$defs": {"node": {"type": "object",
            "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}},
            "properties": {"root": {"$ref": "#/$defs/node"}}});
        assert!(cache.of_value(tree).is_ok());
        // Deep nesting, many patterns, a huge pattern, a huge schema.
        let mut deep = json!({"type": "string"});
        for _ in 0..40 {
            deep = json!({"type": "object", "properties": {"a": deep}});
        }
        assert!(refused(deep).contains("deeper than 32"));
        let patterns: serde_json::Map<String, Value> =
            (0..1001).map(|i| (format!("^p{i}$"), json!({}))).collect();
        assert!(
            refused(json!({"type": "object", "patternProperties": patterns}))
                .contains("more than 1000 patterns")
        );
        // A subroutine call to group 1,111,111,111,101 (found by fuzzing: the engine tried
        // to allocate 139 GB).
        let call =
            json!({"type": "object", "properties": {"a": {"pattern": "(a)\\g1111111111101"}}});
        assert!(refused(call).contains("subroutine call"));
        // Hidden from a check of the pattern as written (`\c` does not parse there), but not
        // from one of what the engine compiles.
        let hidden = json!({"type": "object", "properties": {"a": {"pattern": "\\cA(a)\\1\\g1111111111101"}}});
        assert!(refused(hidden).contains("subroutine call"));
        let long = json!({"type": "object", "properties": {"a": {"pattern": "a".repeat(2000)}}});
        assert!(refused(long).contains("longer than 1000 characters"));
        let properties: serde_json::Map<String, Value> = (0..20_000)
            .map(|i| (format!("property_{i}"), json!({"type": "string"})))
            .collect();
        assert!(
            refused(json!({"type": "object", "properties": properties})).contains("KiB of JSON")
        );
    }

    #[test]
    fn references_the_walk_cannot_follow_are_refused() {
        let cache = SchemaCache::default();
        let refused = |schema: Value| match cache.of_value(schema) {
            Err(SchemaError::Unusable(message)) => message,
            other => panic!("accepted: {other:?}"),
        };
        let with = |x: Value| {
            json!({"type": "object", "$defs": {"a": {"type": "string"}},
            "properties": {"x": x}})
        };
        // Anchors, embedded ids, remote and missing targets, escapes that are not UTF-8.
        assert!(refused(with(json!({"$ref": "#/%FF"}))).contains("not a JSON pointer"));
        assert!(refused(with(json!({"$ref": "#a"}))).contains("not a JSON pointer"));
        assert!(refused(with(json!({"$ref": "https://example.com/s.json"}))).contains("$ref"));
        assert!(refused(with(json!({"$anchor": "a"}))).contains("`$anchor`"));
        assert!(refused(with(json!({"$id": "https://x/y", "type": "string"}))).contains("`$id`"));
        assert!(refused(with(json!({"$dynamicRef": "#a"}))).contains("`$dynamicRef`"));
        assert!(refused(with(json!({"$ref": "#/$defs/nothing"}))).contains("points at nothing"));
        // Draft 4's `id` likewise, but only in draft 4, and a property named `$id` is fine.
        let draft4 = json!({"$schema": "http://json-schema.org/draft-04/schema#",
            "type": "object", "properties": {"x": {"id": "other", "type": "string"}}});
        assert!(refused(draft4).contains("`id`"));
        assert!(
            cache
                .of_value(with(
                    json!({"type": "object", "properties": {"$id": {"type": "string"}},
            "examples": [{"id": "abc"}]})
                ))
                .is_ok()
        );
        assert!(
            cache
                .of_value(json!({"$id": "https://example.com/root", "type": "object"}))
                .is_ok()
        );
        // Percent escapes are decoded as jsonschema decodes them (typescript-json-schema
        // writes `Foo%3CBar%3E` for `Foo<Bar>`), and are followed.
        let escaped = json!({"type": "object", "$defs": {"Foo<Bar>": {"type": "string"}},
            "properties": {"x": {"$ref": "#/%24defs/Foo%3CBar%3E"}}});
        assert!(cache.of_value(escaped).is_ok());
        // In data (examples, defaults, enums, consts) a `$ref`, an `id` or a `pattern` is
        // only text...
        let data = json!({"type": "object", "properties": {"x": {
            "examples": [{"$ref": "#/components/schemas/Pet"}],
            "default": {"$anchor": "a", "pattern": "(a)\\g1"},
            "enum": [{"$id": "x"}, 1],
        }}});
        assert!(cache.of_value(data).is_ok(), "data refused");
        // ...but a property that happens to be called `enum` is a schema still.
        let named =
            json!({"type": "object", "properties": {"enum": {"pattern": "(a)\\g1111111111101"}}});
        assert!(refused(named).contains("subroutine call"));
        // An enum of 30,000 items used 8 times is 270,000 values to walk.
        let items: Vec<Value> = (0..30_000).map(|i| json!(i)).collect();
        let uses: serde_json::Map<String, Value> = (0..8)
            .map(|i| (format!("p{i}"), json!({"$ref": "#/$defs/big"})))
            .collect();
        let big = json!({"type": "object", "$defs": {"big": {"enum": items}}, "properties": uses});
        assert!(refused(big).contains("more than 200000 JSON values"));
    }
}
