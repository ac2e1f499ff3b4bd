//! Values between JSON and WIT: the arguments a model sends become the parameters of a typed
//! export, and what it returns becomes JSON again, both as DESIGN.md section 3.1 maps them.
//!
//! Arguments have passed the tool's schema already, but the operator's `[arguments]` may be
//! wider than the WIT types: a value they cannot hold is an error that names its place (a
//! JSON pointer), never a trap.

use super::schema::property_name;
use serde_json::{Map, Number, Value};
use wasmtime::component::Val;
use wasmtime::component::types::Type;

/// Why a value could not be converted, and where (a JSON pointer).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {reason}", if pointer.is_empty() { "the arguments" } else { pointer.as_str() })]
pub(crate) struct ConvertError {
    pub pointer: String,
    pub reason: String,
}

fn fail<T>(pointer: &str, reason: impl Into<String>) -> Result<T, ConvertError> {
    Err(ConvertError {
        pointer: pointer.to_string(),
        reason: reason.into(),
    })
}

/// A JSON pointer one step further down.
fn child(pointer: &str, step: &str) -> String {
    format!("{pointer}/{}", step.replace('~', "~0").replace('/', "~1"))
}

/// The parameters of a call, from its arguments object.
pub(crate) fn arguments(
    params: &[(String, Type)],
    arguments: &Value,
) -> Result<Vec<Val>, ConvertError> {
    let Value::Object(object) = arguments else {
        return fail("", "must be an object");
    };
    fields(params.iter().map(|(n, t)| (n.as_str(), t)), object, "")
        .map(|fields| fields.into_iter().map(|(_, v)| v).collect())
}

/// The named values of an object: a missing or `null` option is `none`; other properties are
/// refused.
fn fields<'a>(
    wanted: impl Iterator<Item = (&'a str, &'a Type)> + Clone,
    object: &Map<String, Value>,
    pointer: &str,
) -> Result<Vec<(String, Val)>, ConvertError> {
    let known: std::collections::HashSet<String> = wanted
        .clone()
        .map(|(name, _)| property_name(name))
        .collect();
    if let Some(extra) = object.keys().find(|key| !known.contains(*key)) {
        return fail(
            &child(pointer, extra),
            "is not a parameter or field of this type",
        );
    }
    wanted
        .map(|(name, ty)| {
            let property = property_name(name);
            let at = child(pointer, &property);
            let value = match (object.get(&property), ty) {
                (None, Type::Option(_)) => Val::Option(None),
                (None, _) => return fail(&at, "is required"),
                (Some(value), ty) => to_val(ty, value, &at)?,
            };
            Ok((name.to_string(), value))
        })
        .collect()
}

fn integer<T: TryFrom<i64> + TryFrom<u64>>(
    value: &Value,
    pointer: &str,
    wit: &str,
) -> Result<T, ConvertError> {
    // JSON Schema counts 2.0 as an integer; so does the conversion, while it is exact.
    const EXACT: f64 = 9_007_199_254_740_992.0;
    let fits = match value {
        Value::Number(n) => n
            .as_i64()
            .and_then(|i| T::try_from(i).ok())
            .or_else(|| n.as_u64().and_then(|u| T::try_from(u).ok()))
            .or_else(|| {
                let f = n
                    .as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() <= EXACT)?;
                T::try_from(f as i64).ok()
            }),
        _ => None,
    };
    match fits {
        Some(n) => Ok(n),
        None => fail(pointer, format!("must be an integer that fits {wit}")),
    }
}

/// One JSON value as a value of `ty`.
pub(crate) fn to_val(ty: &Type, value: &Value, pointer: &str) -> Result<Val, ConvertError> {
    Ok(match ty {
        Type::Bool => match value {
            Value::Bool(b) => Val::Bool(*b),
            _ => return fail(pointer, "must be true or false"),
        },
        Type::S8 => Val::S8(integer(value, pointer, "s8")?),
        Type::U8 => Val::U8(integer(value, pointer, "u8")?),
        Type::S16 => Val::S16(integer(value, pointer, "s16")?),
        Type::U16 => Val::U16(integer(value, pointer, "u16")?),
        Type::S32 => Val::S32(integer(value, pointer, "s32")?),
        Type::U32 => Val::U32(integer(value, pointer, "u32")?),
        Type::S64 => Val::S64(integer(value, pointer, "s64")?),
        Type::U64 => Val::U64(integer(value, pointer, "u64")?),
        Type::Float32 => match value.as_f64() {
            Some(f) if (f as f32).is_finite() => Val::Float32(f as f32),
            _ => return fail(pointer, "must be a number that fits f32"),
        },
        Type::Float64 => match value.as_f64() {
            Some(f) => Val::Float64(f),
            None => return fail(pointer, "must be a number"),
        },
        Type::Char => {
            let mut chars = value.as_str().map(str::chars);
            match chars.as_mut().map(|c| (c.next(), c.next())) {
                Some((Some(c), None)) => Val::Char(c),
                _ => return fail(pointer, "must be a string of exactly one character"),
            }
        }
        Type::String => match value {
            Value::String(s) => Val::String(s.clone()),
            _ => return fail(pointer, "must be a string"),
        },
        Type::List(list) => Val::List(elements(&list.ty(), value, pointer, None)?),
        Type::FixedLengthList(list) => Val::FixedLengthList(elements(
            &list.ty(),
            value,
            pointer,
            Some(list.len() as usize),
        )?),
        Type::Tuple(tuple) => {
            let types: Vec<Type> = tuple.types().collect();
            let Value::Array(items) = value else {
                return fail(
                    pointer,
                    format!("must be an array of {} items", types.len()),
                );
            };
            if items.len() != types.len() {
                return fail(pointer, format!("must have exactly {} items", types.len()));
            }
            Val::Tuple(
                types
                    .iter()
                    .zip(items)
                    .enumerate()
                    .map(|(i, (t, v))| to_val(t, v, &child(pointer, &i.to_string())))
                    .collect::<Result<_, _>>()?,
            )
        }
        Type::Option(option) => match value {
            Value::Null => Val::Option(None),
            value => Val::Option(Some(Box::new(to_val(&option.ty(), value, pointer)?))),
        },
        Type::Record(record) => {
            let Value::Object(object) = value else {
                return fail(pointer, "must be an object");
            };
            let types: Vec<(String, Type)> = record
                .fields()
                .map(|f| (f.name.to_string(), f.ty))
                .collect();
            Val::Record(fields(
                types.iter().map(|(n, t)| (n.as_str(), t)),
                object,
                pointer,
            )?)
        }
        Type::Enum(cases) => match value.as_str() {
            Some(name) if cases.names().any(|n| n == name) => Val::Enum(name.to_string()),
            _ => return fail(pointer, format!("must be one of {}", list(cases.names()))),
        },
        Type::Flags(flags) => {
            let Value::Array(items) = value else {
                return fail(pointer, "must be an array of flag names");
            };
            let mut set = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                match item.as_str() {
                    Some(name) if flags.names().any(|n| n == name) => {
                        if !set.iter().any(|s| s == name) {
                            set.push(name.to_string());
                        }
                    }
                    _ => {
                        return fail(
                            &child(pointer, &i.to_string()),
                            format!("must be one of {}", list(flags.names())),
                        );
                    }
                }
            }
            Val::Flags(set)
        }
        Type::Variant(variant) => {
            let (name, payload) = tag(value, pointer)?;
            let Some(case) = variant.cases().find(|c| c.name == name) else {
                let names = list(variant.cases().map(|c| c.name));
                return fail(pointer, format!("names no case of {names}"));
            };
            let at = child(pointer, name);
            let payload = match (case.ty, payload) {
                (None, None) => None,
                (Some(ty), Some(value)) => Some(Box::new(to_val(&ty, value, &at)?)),
                (None, Some(_)) => return fail(pointer, format!("case `{name}` has no value")),
                (Some(_), None) => {
                    return fail(
                        pointer,
                        format!("case `{name}` needs a value: {{\"{name}\": ...}}"),
                    );
                }
            };
            Val::Variant(name.to_string(), payload)
        }
        Type::Result(result) => {
            let (name, payload) = tag(value, pointer)?;
            let at = child(pointer, name);
            let side = |ty: Option<Type>| -> Result<Option<Box<Val>>, ConvertError> {
                match (ty, payload) {
                    (Some(ty), Some(value)) => Ok(Some(Box::new(to_val(&ty, value, &at)?))),
                    (None, None | Some(Value::Null)) => Ok(None),
                    (Some(_), None) => fail(&at, "is required"),
                    (None, Some(_)) => fail(&at, "must be null"),
                }
            };
            match name {
                "ok" => Val::Result(Ok(side(result.ok())?)),
                "err" => Val::Result(Err(side(result.err())?)),
                _ => return fail(pointer, "must be {\"ok\": ...} or {\"err\": ...}"),
            }
        }
        Type::Own(_)
        | Type::Borrow(_)
        | Type::Future(_)
        | Type::Stream(_)
        | Type::ErrorContext
        | Type::Map(_) => return fail(pointer, "has a type that cannot come from JSON"),
    })
}

fn elements(
    ty: &Type,
    value: &Value,
    pointer: &str,
    length: Option<usize>,
) -> Result<Vec<Val>, ConvertError> {
    let Value::Array(items) = value else {
        return fail(pointer, "must be an array");
    };
    if let Some(length) = length.filter(|n| *n != items.len()) {
        return fail(pointer, format!("must have exactly {length} items"));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, v)| to_val(ty, v, &child(pointer, &i.to_string())))
        .collect()
}

/// A variant or result as JSON: `"name"`, or `{"name": payload}`.
fn tag<'v>(value: &'v Value, pointer: &str) -> Result<(&'v str, Option<&'v Value>), ConvertError> {
    match value {
        Value::String(name) => Ok((name, None)),
        Value::Object(object) if object.len() == 1 => match object.iter().next() {
            Some((name, payload)) => Ok((name, Some(payload))),
            None => fail(pointer, "must name a case"),
        },
        _ => fail(
            pointer,
            "must be a case name, or an object with one case: {\"case\": value}",
        ),
    }
}

fn list<'a>(names: impl Iterator<Item = &'a str>) -> String {
    names
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A returned value as JSON. A NaN or an infinity has no JSON: an error naming its place.
pub(crate) fn to_json(value: &Val, pointer: &str) -> Result<Value, ConvertError> {
    let float = |f: f64| match Number::from_f64(f) {
        Some(n) => Ok(Value::Number(n)),
        None => fail(pointer, format!("is {f}, which JSON cannot hold")),
    };
    Ok(match value {
        Val::Bool(b) => Value::Bool(*b),
        Val::S8(n) => (*n).into(),
        Val::U8(n) => (*n).into(),
        Val::S16(n) => (*n).into(),
        Val::U16(n) => (*n).into(),
        Val::S32(n) => (*n).into(),
        Val::U32(n) => (*n).into(),
        Val::S64(n) => (*n).into(),
        Val::U64(n) => (*n).into(),
        Val::Float32(f) => float(f64::from(*f))?,
        Val::Float64(f) => float(*f)?,
        Val::Char(c) => Value::String(c.to_string()),
        Val::String(s) => Value::String(s.clone()),
        Val::List(items) | Val::Tuple(items) | Val::FixedLengthList(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, v)| to_json(v, &child(pointer, &i.to_string())))
                .collect::<Result<_, _>>()?,
        ),
        Val::Record(fields) => Value::Object(
            fields
                .iter()
                .map(|(name, v)| {
                    let name = property_name(name);
                    let value = to_json(v, &child(pointer, &name))?;
                    Ok((name, value))
                })
                .collect::<Result<_, _>>()?,
        ),
        Val::Variant(name, None) | Val::Enum(name) => Value::String(name.clone()),
        Val::Variant(name, Some(payload)) => tagged(name, to_json(payload, &child(pointer, name))?),
        Val::Option(None) => Value::Null,
        Val::Option(Some(v)) => to_json(v, pointer)?,
        Val::Result(Ok(v)) => tagged("ok", payload(v.as_deref(), &child(pointer, "ok"))?),
        Val::Result(Err(v)) => tagged("err", payload(v.as_deref(), &child(pointer, "err"))?),
        Val::Flags(names) => Value::Array(names.iter().cloned().map(Value::String).collect()),
        Val::Map(_) | Val::Resource(_) | Val::Future(_) | Val::Stream(_) | Val::ErrorContext(_) => {
            return fail(pointer, "has a type that cannot become JSON");
        }
    })
}

fn payload(value: Option<&Val>, pointer: &str) -> Result<Value, ConvertError> {
    value.map_or(Ok(Value::Null), |v| to_json(v, pointer))
}

fn tagged(name: &str, payload: Value) -> Value {
    let mut object = Map::new();
    object.insert(name.to_string(), payload);
    Value::Object(object)
}
