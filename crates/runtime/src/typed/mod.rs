//! Typed components, the second kind of component (DESIGN.md section 3.1): any component whose
//! exports are ordinary typed functions. Each exported function is a tool; its schema comes
//! from its WIT types ([`schema`]), its arguments and result cross as JSON ([`convert`]).
//!
//! A component is of the `toolhost:plugin` world when it exports `toolhost:plugin/tool`;
//! every other component is typed. Exports of WASI interfaces (a command's `wasi:cli/run`)
//! are not tools.

mod convert;
mod schema;

use super::ToolDescription;
use schema::{Budget, SchemaError};
use serde_json::Value;
use std::collections::HashMap;
use wasmtime::Engine;
use wasmtime::component::types::{ComponentFunc, ComponentItem, Type};
use wasmtime::component::{Component, ComponentExportIndex, Val};

pub(crate) use convert::ConvertError;

/// The versions of the `toolhost:plugin` world this host speaks, oldest first.
pub(super) const PLUGIN_VERSIONS: &[&str] = &["0.1.0", "0.2.0", "0.3.0"];
/// The newest of them, which new plugins are built against.
pub(super) const PLUGIN_VERSION: &str = "0.3.0";
const PLUGIN_TOOL: &str = "toolhost:plugin/tool";

/// The versions this host speaks, as messages name them: `0.1.0, @0.2.0 and @0.3.0`.
pub(super) fn versions_spoken() -> String {
    match PLUGIN_VERSIONS.split_last() {
        Some((last, [])) => last.to_string(),
        Some((last, rest)) => format!("{} and @{last}", rest.join(", @")),
        None => String::new(),
    }
}

/// One exported function, ready to be called as a tool.
pub(crate) struct TypedFunc {
    /// `function`, or `interface/function` inside an exported interface.
    pub id: String,
    pub index: ComponentExportIndex,
    /// Parameters by their WIT names, in order.
    pub params: Vec<(String, Type)>,
    pub result: Option<Type>,
    /// How its result becomes structured content, when it returns anything.
    pub shape: Option<super::OutputShape>,
}

/// Which world a component is built for, from its exports.
pub(super) enum Kind {
    /// `toolhost:plugin@0.1.0`.
    Plugin,
    /// `toolhost:plugin@0.2.0`.
    Plugin2,
    /// `toolhost:plugin@0.3.0`.
    Plugin3,
    Typed,
}

/// The kind of `component`, or why it cannot be loaded: a `toolhost:plugin` of another
/// version than this host speaks.
pub(super) fn kind(component: &Component, engine: &Engine) -> Result<Kind, String> {
    let ty = component.component_type();
    for (name, _) in ty.exports(engine) {
        let Some(rest) = name
            .strip_prefix(PLUGIN_TOOL)
            .filter(|rest| rest.is_empty() || rest.starts_with('@'))
        else {
            continue;
        };
        return match rest.strip_prefix('@') {
            Some("0.1.0") => Ok(Kind::Plugin),
            Some("0.2.0") => Ok(Kind::Plugin2),
            Some("0.3.0") => Ok(Kind::Plugin3),
            Some(version) => Err(format!(
                "it is built for toolhost:plugin@{version}; this host speaks \
                 toolhost:plugin@{} (rebuild it against the WIT in the host's `wit/` folder)",
                versions_spoken()
            )),
            None => Err(format!(
                "it exports {PLUGIN_TOOL} without a version; this host speaks \
                 toolhost:plugin@{}",
                versions_spoken()
            )),
        };
    }
    Ok(Kind::Typed)
}

/// The exported functions of a typed component and the tools they make, or why it cannot be
/// loaded (a type JSON cannot carry, naming the function; too many or too large tools).
/// `bytes` are the component's, for the WIT doc comments it may carry.
pub(super) fn exports(
    component: &Component,
    engine: &Engine,
    bytes: &[u8],
) -> Result<(Vec<TypedFunc>, Vec<ToolDescription>), String> {
    let ty = component.component_type();
    let mut found: Vec<(Option<String>, String, ComponentFunc, ComponentExportIndex)> = Vec::new();
    for (name, export) in ty.exports(engine) {
        match export.ty {
            ComponentItem::ComponentFunc(func) => {
                if let Some(index) = component.get_export_index(None, name) {
                    found.push((None, name.to_string(), func, index));
                }
            }
            ComponentItem::ComponentInstance(instance) if !name.starts_with("wasi:") => {
                let Some(outer) = component.get_export_index(None, name) else {
                    continue;
                };
                for (inner, export) in instance.exports(engine) {
                    if let ComponentItem::ComponentFunc(func) = export.ty
                        && !is_build_hook(name, inner, &func)
                        && let Some(index) = component.get_export_index(Some(&outer), inner)
                    {
                        found.push((Some(interface_name(name)), inner.to_string(), func, index));
                    }
                }
            }
            _ => {}
        }
        if found.len() > crate::tools::MAX_DESCRIBED_TOOLS {
            return Err(format!(
                "it exports more than {} functions, the most a component may offer as tools",
                crate::tools::MAX_DESCRIBED_TOOLS
            ));
        }
    }
    if found.is_empty() {
        return Err(format!(
            "it exports neither toolhost:plugin/tool@{PLUGIN_VERSION} nor any function a tool \
             can be made of (exports of WASI interfaces are not tools)"
        ));
    }
    let docs = package_docs(bytes);
    let mut uses: HashMap<String, usize> = HashMap::new();
    for (_, function, ..) in &found {
        *uses.entry(schema::property_name(function)).or_default() += 1;
    }
    let mut budget = Budget::default();
    let mut funcs = Vec::with_capacity(found.len());
    let mut tools = Vec::with_capacity(found.len());
    let mut described = 0usize;
    for (interface, function, func, index) in found {
        let id = match &interface {
            Some(interface) => format!("{interface}/{function}"),
            None => function.clone(),
        };
        let params: Vec<(String, Type)> = func
            .params()
            .map(|(name, ty)| (name.to_string(), ty))
            .collect();
        let result = func.results().next();
        let unusable = |e: SchemaError| match e {
            SchemaError::TooLarge => e.to_string(),
            SchemaError::Unsupported(why) => format!("function `{id}` cannot be a tool: {why}"),
        };
        let input = schema::arguments(&params, &mut budget).map_err(unusable)?;
        let output = schema::output(result.as_ref(), &mut budget).map_err(unusable)?;
        let plain = schema::property_name(&function);
        let default_name = match &interface {
            Some(interface) if uses.get(&plain).is_some_and(|n| *n > 1) => {
                format!("{}_{plain}", schema::property_name(interface))
            }
            _ => plain,
        };
        let description = docs
            .as_ref()
            .and_then(|d| doc_of(d, interface.as_deref(), &function))
            .unwrap_or_else(|| {
                let names: Vec<String> = params
                    .iter()
                    .map(|(n, _)| schema::property_name(n))
                    .collect();
                format!("Calls `{id}`({}) of a typed component.", names.join(", "))
            });
        let tool = ToolDescription {
            name: id.clone(),
            default_name: Some(default_name),
            description,
            input_schema: input.to_string(),
            output,
        };
        described = described.saturating_add(
            tool.name.len()
                + tool.description.len()
                + tool.input_schema.len()
                + tool.output.as_ref().map_or(0, |o| o.schema.len()),
        );
        if described > crate::tools::MAX_DESCRIBED_BYTES {
            return Err(format!(
                "its tools' names, descriptions and schemas take more than the {} MiB a \
                 component may describe",
                crate::tools::MAX_DESCRIBED_BYTES >> 20
            ));
        }
        let shape = tool.output.as_ref().map(|o| o.shape);
        tools.push(tool);
        funcs.push(TypedFunc {
            id,
            index,
            params,
            result,
            shape,
        });
    }
    Ok((funcs, tools))
}

/// Whether an export is a build tool's, not the author's: componentize-py leaves its
/// `exports/init(app-name, symbols, stub-wasi)`, which it calls while building, in every
/// component it makes.
fn is_build_hook(instance: &str, function: &str, func: &ComponentFunc) -> bool {
    instance == "exports"
        && function == "init"
        && func
            .params()
            .map(|(name, _)| name)
            .eq(["app-name", "symbols", "stub-wasi"])
}

/// `example:typed/weather@0.1.0` and `weather` are both the interface `weather`.
fn interface_name(export: &str) -> String {
    let path = export.split('@').next().unwrap_or(export);
    path.rsplit('/').next().unwrap_or(path).to_string()
}

/// The parameters of a call of `func`, from its JSON arguments.
pub(super) fn parameters(func: &TypedFunc, arguments: &Value) -> Result<Vec<Val>, ConvertError> {
    convert::arguments(&func.params, arguments)
}

/// What a typed export returned, as the tool's outcome: `Ok(text)` or `Err(the tool's
/// error)`. A returned string is the text as it is; any other value is its JSON; the `err`
/// of a `result` is the tool's error (its text as it is when it is a string, else its JSON).
pub(super) fn outcome(result: Option<Val>) -> Result<Result<String, String>, ConvertError> {
    let text = |value: Option<&Val>, pointer: &str| -> Result<String, ConvertError> {
        Ok(match value {
            None => "null".to_string(),
            Some(Val::String(s)) => s.clone(),
            Some(value) => convert::to_json(value, pointer)?.to_string(),
        })
    };
    match result {
        Some(Val::Result(Ok(ok))) => Ok(Ok(text(ok.as_deref(), "/ok")?)),
        Some(Val::Result(Err(err))) => Ok(Err(text(err.as_deref(), "/err")?)),
        other => Ok(Ok(text(other.as_ref(), "")?)),
    }
}

/// The `package-docs` custom section at the top of a component (wit-component's encoding of
/// WIT doc comments: a version byte, then JSON), if it has one.
fn package_docs(bytes: &[u8]) -> Option<Value> {
    let mut rest = bytes.get(8..)?;
    while let Some((&id, after)) = rest.split_first() {
        let (size, after) = leb128(after)?;
        let section = after.get(..size)?;
        rest = &after[size..];
        if id != 0 {
            continue;
        }
        let (length, named) = leb128(section)?;
        let name = named.get(..length)?;
        if name == b"package-docs" {
            let data = &named[length..];
            return match data.split_first() {
                Some((0 | 1, json)) => serde_json::from_slice(json).ok(),
                _ => None,
            };
        }
    }
    None
}

/// `component` with `docs` (wit-component's encoding: a version byte, then JSON) as its
/// `package-docs` custom section, in place of any it had: how a build that lost its WIT doc
/// comments (cargo with wit-bindgen) gets them back (`toolhost add-docs`). `None` when the
/// bytes are not a component's.
pub fn with_package_docs(component: &[u8], docs: &[u8]) -> Option<Vec<u8>> {
    const NAME: &[u8] = b"package-docs";
    let header = component.get(..8)?;
    if !header.starts_with(b"\0asm") {
        return None;
    }
    let mut out = header.to_vec();
    let mut rest = &component[8..];
    while let Some((&id, after)) = rest.split_first() {
        let (size, body) = leb128(after)?;
        let section = body.get(..size)?;
        let whole = &rest[..rest.len() - body.len() + size];
        rest = &body[size..];
        let named_docs = id == 0
            && leb128(section).is_some_and(|(length, named)| named.get(..length) == Some(NAME));
        if !named_docs {
            out.extend_from_slice(whole);
        }
    }
    let mut payload = leb128_bytes(NAME.len());
    payload.extend_from_slice(NAME);
    payload.extend_from_slice(docs);
    out.push(0);
    out.extend(leb128_bytes(payload.len()));
    out.extend(payload);
    Some(out)
}

/// `value` as unsigned LEB128.
fn leb128_bytes(mut value: usize) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

/// An unsigned LEB128 of at most 32 bits, and what follows it.
fn leb128(bytes: &[u8]) -> Option<(usize, &[u8])> {
    let mut value = 0usize;
    for (i, &byte) in bytes.iter().enumerate().take(5) {
        value |= usize::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((value, &bytes[i + 1..]));
        }
    }
    None
}

/// The doc comment of a function in `package-docs`: a world's own export, or a function of
/// an interface (defined in the package, or inline in a world).
fn doc_of(docs: &Value, interface: Option<&str>, function: &str) -> Option<String> {
    let text = |entry: &Value| -> Option<String> {
        match entry {
            Value::String(s) => Some(s.clone()),
            Value::Object(o) => o.get("docs")?.as_str().map(str::to_string),
            _ => None,
        }
    };
    let worlds = docs.get("worlds").and_then(Value::as_object);
    let worlds = worlds.into_iter().flat_map(|w| w.values());
    match interface {
        None => worlds
            .flat_map(|w| ["func_exports", "funcs"].map(|key| w.get(key)))
            .find_map(|funcs| text(funcs?.get(function)?)),
        Some(interface) => std::iter::once(docs.get("interfaces"))
            .chain(worlds.flat_map(|w| ["interface_exports", "interfaces"].map(|k| w.get(k))))
            .find_map(|interfaces| text(interfaces?.get(interface)?.get("funcs")?.get(function)?)),
    }
    .map(|d| d.trim().to_string())
    .filter(|d| !d.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn interface_names_drop_package_and_version() {
        assert_eq!(interface_name("example:typed/weather@0.1.0"), "weather");
        assert_eq!(interface_name("weather"), "weather");
    }

    #[test]
    fn docs_are_found_for_world_and_interface_functions() {
        let docs = json!({
            "interfaces": { "weather": { "funcs": { "get-forecast": { "docs": "Forecast." } } } },
            "worlds": { "typed": { "func_exports": { "add": "Adds." } } }
        });
        assert_eq!(doc_of(&docs, None, "add").as_deref(), Some("Adds."));
        assert_eq!(
            doc_of(&docs, Some("weather"), "get-forecast").as_deref(),
            Some("Forecast.")
        );
        assert_eq!(doc_of(&docs, Some("weather"), "add"), None);
    }

    #[test]
    fn package_docs_written_are_read_back_and_replace_any_before() {
        let component = b"\0asm\x0d\0\x01\0".to_vec();
        let first = with_package_docs(&component, b"\x01{\"docs\":\"one\"}").expect("written");
        let second = with_package_docs(&first, b"\x01{\"docs\":\"two\"}").expect("written");
        assert_eq!(
            package_docs(&second),
            Some(serde_json::json!({"docs": "two"}))
        );
        assert_eq!(second.len(), first.len(), "the first section was replaced");
        let long = format!("\x01{{\"docs\":\"{}\"}}", "x".repeat(300));
        let written = with_package_docs(&component, long.as_bytes()).expect("written");
        assert_eq!(
            package_docs(&written).expect("read")["docs"]
                .as_str()
                .map(str::len),
            Some(300)
        );
        assert_eq!(with_package_docs(b"not wasm", b"\x01{}"), None);
    }

    #[test]
    fn a_package_docs_section_is_read_from_the_top_level() {
        let json = br#"{"worlds":{"w":{"funcs":{"f":"Doc."}}}}"#;
        let mut data = vec![1u8];
        data.extend_from_slice(json);
        let mut section = vec![12u8];
        section.extend_from_slice(b"package-docs");
        section.extend_from_slice(&data);
        let mut bytes = b"\0asm\x0d\0\x01\0".to_vec();
        bytes.push(0);
        bytes.push(section.len() as u8);
        bytes.extend_from_slice(&section);
        let docs = package_docs(&bytes).expect("found");
        assert_eq!(doc_of(&docs, None, "f").as_deref(), Some("Doc."));
        assert_eq!(package_docs(b"\0asm\x0d\0\x01\0\x00\xff"), None);
    }
}
