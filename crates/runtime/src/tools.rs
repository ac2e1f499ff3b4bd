//! What a component offers as tools: each tool's description as the host keeps it, and, for
//! a tool with an output schema, where its structured result comes from.

/// The tools one component may describe, at most.
pub const MAX_DESCRIBED_TOOLS: usize = 10_000;
/// The bytes of names, descriptions and schemas one component may describe, at most: what the
/// host keeps of a component for as long as it serves it.
pub const MAX_DESCRIBED_BYTES: usize = 16 << 20;

/// One tool as a component offers it: what its `describe()` reports, or what the host made
/// of a typed export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolDescription {
    /// What the component calls the tool: an invoker's `tool`. For a typed export, `function`
    /// or `interface/function`.
    pub name: String,
    /// The name a typed export's tool goes by unless an invoker names it (the function's
    /// name with `-` turned into `_`, prefixed by its interface only where two would collide).
    /// `None`: the tool goes by `name`.
    pub default_name: Option<String>,
    pub description: String,
    pub input_schema: String,
    /// What a typed export's result looks like as JSON.
    pub output: Option<OutputSchema>,
}

impl ToolDescription {
    /// A tool of our own world, as its `describe` declares it (with an output schema from
    /// 0.2.0 on).
    pub(crate) fn declared(
        name: String,
        description: String,
        input_schema: String,
        output_schema: Option<String>,
    ) -> Self {
        ToolDescription {
            name,
            default_name: None,
            description,
            input_schema,
            output: output_schema.map(|schema| OutputSchema {
                schema,
                shape: OutputShape::Declared,
            }),
        }
    }
}

/// The JSON Schema of what a typed export returns, and how its text becomes the structured
/// content MCP clients get (an object).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputSchema {
    pub schema: String,
    pub shape: OutputShape,
}

/// How a typed tool's text becomes an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputShape {
    /// The text is a JSON object (a record): the object itself.
    Object,
    /// The text is JSON of another kind: `{"result": <it>}`.
    Wrapped,
    /// The text is a returned string as it is: `{"result": "<the text>"}`.
    WrappedString,
    /// A `toolhost:plugin@0.2.0` tool's declared `output-schema`: its results carry the
    /// object themselves.
    Declared,
}

impl OutputShape {
    /// A typed tool's text as the object its schema describes, if it is one; `None` for a
    /// declared schema (the result carries its object).
    pub fn structured(self, text: &str) -> Option<serde_json::Value> {
        use serde_json::Value;
        let wrap = |value: Value| {
            let mut object = serde_json::Map::new();
            object.insert("result".to_string(), value);
            Value::Object(object)
        };
        match self {
            OutputShape::Object => serde_json::from_str::<Value>(text)
                .ok()
                .filter(Value::is_object),
            OutputShape::Wrapped => serde_json::from_str(text).ok().map(wrap),
            OutputShape::WrappedString => Some(wrap(Value::String(text.to_string()))),
            OutputShape::Declared => None,
        }
    }
}
