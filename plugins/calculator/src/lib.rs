//! `calculate`: evaluates an arithmetic expression with a real parser (never an `eval`).
//!
//! Grammar, loosest binding first:
//! ```text
//! expr    = term (("+" | "-") term)*
//! term    = unary (("*" | "/" | "%") unary)*
//! unary   = "-" unary | power
//! power   = atom ("^" unary)?          (right-associative: 2^3^2 = 2^9)
//! atom    = number | constant | function "(" expr ("," expr)* ")" | "(" expr ")"
//! ```
//! Errors name the character position (1-based) where the expression went wrong.

mod parser;

wit_bindgen::generate!({
    path: "../../wit/toolhost-plugin-0.1.0",
    world: "plugin",
});

use exports::toolhost::plugin::tool::{Guest, ToolError, ToolSpec};

const SCHEMA: &str = r#"{
  "type": "object",
  "required": ["expression"],
  "additionalProperties": false,
  "properties": {
    "expression": {
      "type": "string",
      "minLength": 1,
      "maxLength": 4096,
      "description": "Arithmetic expression, e.g. \"2 * (3 + 4) ^ 2\" or \"sqrt(2) * max(1, pi)\""
    }
  }
}"#;

struct Calculator;

impl Guest for Calculator {
    fn describe() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "calculate".into(),
            description: "Evaluate an arithmetic expression exactly as written and return the number. \
                Operators: + - * / % ^ (power), parentheses, unary minus. Functions: sqrt, ln, log10, \
                sin, cos, tan (radians), abs, min, max, round(x) or round(x, digits). Constants: pi, e."
                .into(),
            input_schema: SCHEMA.into(),
        }]
    }

    fn call(name: String, arguments: String) -> Result<String, ToolError> {
        if name != "calculate" {
            return Err(ToolError::Failed(format!(
                "this component has no tool named {name:?}"
            )));
        }
        let args: serde_json::Value = serde_json::from_str(&arguments)
            .map_err(|e| ToolError::InvalidArguments(format!("arguments are not JSON: {e}")))?;
        let expression = args
            .get("expression")
            .and_then(|v| v.as_str())
            .ok_or_else(|| ToolError::InvalidArguments("`expression` must be a string".into()))?;
        let value =
            parser::evaluate(expression).map_err(|e| ToolError::InvalidArguments(e.to_string()))?;
        Ok(serde_json::json!({ "expression": expression, "result": value }).to_string())
    }
}

export!(Calculator);
