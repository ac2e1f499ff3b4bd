//! JSON Schema from WIT types, as DESIGN.md section 3.1 maps them: the arguments object of a
//! typed export (one property per parameter) and the schema of what it returns.
//!
//! WIT types are never recursive, but they are a graph: a type used twice is written out
//! twice, so a hostile component can make a small type expand into a huge schema. Every
//! schema value counts against a [`Budget`] for the whole component.

use crate::{OutputSchema, OutputShape};
use serde_json::{Map, Value, json};
use wasmtime::component::types::Type;

/// The schema values one component's typed exports may expand to, in all.
pub(super) const MAX_SCHEMA_VALUES: usize = 200_000;

/// What is left of a component's schema budget.
pub(super) struct Budget(usize);

impl Default for Budget {
    fn default() -> Self {
        Budget(MAX_SCHEMA_VALUES)
    }
}

/// Why no schema can be made of a type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum SchemaError {
    /// A type a tool cannot be given or return through JSON.
    #[error("{0}")]
    Unsupported(String),
    #[error(
        "its types expand to more than {MAX_SCHEMA_VALUES} JSON Schema values (a type used \
         many times is written out each time)"
    )]
    TooLarge,
}

impl Budget {
    fn take(&mut self) -> Result<(), SchemaError> {
        self.0 = self.0.checked_sub(1).ok_or(SchemaError::TooLarge)?;
        Ok(())
    }
}

/// A WIT parameter or field name as a JSON property: `-` becomes `_`.
pub(super) fn property_name(wit: &str) -> String {
    wit.replace('-', "_")
}

/// The schema of the arguments object of a function with these parameters.
pub(super) fn arguments(
    params: &[(String, Type)],
    budget: &mut Budget,
) -> Result<Value, SchemaError> {
    object(params.iter().map(|(n, t)| (n.as_str(), t)), budget)
}

/// The schema of what a function returns, as its result is shown: `T` of a `result<T, E>`,
/// wrapped as `{"result": ...}` when it is not an object (MCP's structured content is an
/// object). `None` for a function that returns nothing.
pub(super) fn output(
    result: Option<&Type>,
    budget: &mut Budget,
) -> Result<Option<OutputSchema>, SchemaError> {
    let shown = match result {
        None => return Ok(None),
        Some(Type::Result(r)) => match r.ok() {
            Some(ok) => ok,
            None => return Ok(None),
        },
        Some(other) => other.clone(),
    };
    let schema = of(&shown, budget)?;
    let shape = match shown {
        Type::Record(_) => OutputShape::Object,
        Type::String => OutputShape::WrappedString,
        _ => OutputShape::Wrapped,
    };
    let schema = match shape {
        OutputShape::Object | OutputShape::Declared => schema,
        OutputShape::Wrapped | OutputShape::WrappedString => json!({
            "type": "object",
            "properties": { "result": schema },
            "required": ["result"],
            "additionalProperties": false,
        }),
    };
    Ok(Some(OutputSchema {
        schema: schema.to_string(),
        shape,
    }))
}

/// An object with a property per named type: non-option ones required, no others allowed.
fn object<'a>(
    fields: impl Iterator<Item = (&'a str, &'a Type)>,
    budget: &mut Budget,
) -> Result<Value, SchemaError> {
    budget.take()?;
    let mut properties = Map::new();
    let mut required = Vec::new();
    for (name, ty) in fields {
        let name = property_name(name);
        if !matches!(ty, Type::Option(_)) {
            required.push(Value::String(name.clone()));
        }
        properties.insert(name, of(ty, budget)?);
    }
    Ok(json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    }))
}

fn integer(minimum: i128, maximum: i128) -> Value {
    // Every bound of a WIT integer fits an i64 or a u64, which JSON numbers hold exactly.
    let bound = |n: i128| {
        i64::try_from(n)
            .map(Value::from)
            .or_else(|_| u64::try_from(n).map(Value::from))
            .unwrap_or(Value::Null)
    };
    json!({ "type": "integer", "minimum": bound(minimum), "maximum": bound(maximum) })
}

/// The schema of one type.
pub(super) fn of(ty: &Type, budget: &mut Budget) -> Result<Value, SchemaError> {
    budget.take()?;
    Ok(match ty {
        Type::Bool => json!({ "type": "boolean" }),
        Type::S8 => integer(i8::MIN.into(), i8::MAX.into()),
        Type::U8 => integer(0, u8::MAX.into()),
        Type::S16 => integer(i16::MIN.into(), i16::MAX.into()),
        Type::U16 => integer(0, u16::MAX.into()),
        Type::S32 => integer(i32::MIN.into(), i32::MAX.into()),
        Type::U32 => integer(0, u32::MAX.into()),
        Type::S64 => integer(i64::MIN.into(), i64::MAX.into()),
        Type::U64 => integer(0, u64::MAX.into()),
        Type::Float32 | Type::Float64 => json!({ "type": "number" }),
        Type::Char => json!({ "type": "string", "minLength": 1, "maxLength": 1 }),
        Type::String => json!({ "type": "string" }),
        Type::List(list) => json!({ "type": "array", "items": of(&list.ty(), budget)? }),
        Type::FixedLengthList(list) => json!({
            "type": "array",
            "items": of(&list.ty(), budget)?,
            "minItems": list.len(),
            "maxItems": list.len(),
        }),
        Type::Tuple(tuple) => {
            let items = tuple
                .types()
                .map(|t| of(&t, budget))
                .collect::<Result<Vec<_>, _>>()?;
            json!({
                "type": "array",
                "prefixItems": items,
                "minItems": items.len(),
                "maxItems": items.len(),
            })
        }
        Type::Option(option) => {
            json!({ "anyOf": [of(&option.ty(), budget)?, { "type": "null" }] })
        }
        Type::Record(record) => {
            let fields: Vec<(String, Type)> = record
                .fields()
                .map(|f| (f.name.to_string(), f.ty))
                .collect();
            object(fields.iter().map(|(n, t)| (n.as_str(), t)), budget)?
        }
        Type::Enum(cases) => json!({ "type": "string", "enum": cases.names().collect::<Vec<_>>() }),
        Type::Flags(flags) => json!({
            "type": "array",
            "items": { "type": "string", "enum": flags.names().collect::<Vec<_>>() },
            "uniqueItems": true,
        }),
        Type::Variant(variant) => {
            let cases = variant
                .cases()
                .map(|case| tagged(case.name, case.ty.as_ref(), budget))
                .collect::<Result<Vec<_>, _>>()?;
            json!({ "oneOf": cases })
        }
        Type::Result(result) => json!({
            "oneOf": [
                tagged_payload("ok", result.ok().as_ref(), budget)?,
                tagged_payload("err", result.err().as_ref(), budget)?,
            ]
        }),
        Type::Own(_) | Type::Borrow(_) => {
            return Err(SchemaError::Unsupported(
                "resources (own<..>, borrow<..>) cannot be passed through JSON".into(),
            ));
        }
        Type::Future(_) | Type::Stream(_) | Type::ErrorContext => {
            return Err(SchemaError::Unsupported(
                "futures, streams and error contexts cannot be passed through JSON".into(),
            ));
        }
        Type::Map(_) => {
            return Err(SchemaError::Unsupported(
                "map<K, V> is not supported yet".into(),
            ));
        }
    })
}

/// A variant case: the bare name without a payload, `{"name": payload}` with one.
fn tagged(name: &str, payload: Option<&Type>, budget: &mut Budget) -> Result<Value, SchemaError> {
    match payload {
        None => Ok(json!({ "const": name })),
        Some(ty) => tagged_payload(name, Some(ty), budget),
    }
}

/// `{"name": payload}`, where a missing payload is `null`.
fn tagged_payload(
    name: &str,
    payload: Option<&Type>,
    budget: &mut Budget,
) -> Result<Value, SchemaError> {
    budget.take()?;
    let inner = match payload {
        Some(ty) => of(ty, budget)?,
        None => json!({ "type": "null" }),
    };
    Ok(json!({
        "type": "object",
        "properties": { name: inner },
        "required": [name],
        "additionalProperties": false,
    }))
}
