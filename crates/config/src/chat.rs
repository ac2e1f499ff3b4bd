//! The chat's vocabulary as `toolhost.toml` and the command line write it: which API a
//! provider speaks, and whether the model may, must or must not call a tool. Read here, so
//! that the configuration needs nothing of the providers; `provider` re-exports both.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Whether the model may, must or must not call a tool. Written `auto`, `required`, `none`,
/// or a tool's name, in `toolhost.toml` and on the command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides (the default).
    #[default]
    Auto,
    /// The model must call some tool.
    Required,
    /// The model must not call a tool (the tools are still described).
    None,
    /// The model must call this tool.
    Tool(String),
}

impl ToolChoice {
    /// The choice for a model call after the first of a run: a forced call holds once, or the
    /// model could never give its answer.
    pub fn after_first(&self) -> ToolChoice {
        match self {
            ToolChoice::None => ToolChoice::None,
            _ => ToolChoice::Auto,
        }
    }
}

impl FromStr for ToolChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "auto" => ToolChoice::Auto,
            "required" => ToolChoice::Required,
            "none" => ToolChoice::None,
            "" => {
                return Err(
                    "an empty tool choice; expected auto, required, none or a tool's name".into(),
                );
            }
            name => ToolChoice::Tool(name.to_string()),
        })
    }
}

impl fmt::Display for ToolChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ToolChoice::Auto => f.write_str("auto"),
            ToolChoice::Required => f.write_str("required"),
            ToolChoice::None => f.write_str("none"),
            ToolChoice::Tool(name) => f.write_str(name),
        }
    }
}

impl Serialize for ToolChoice {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ToolChoice {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl schemars::JsonSchema for ToolChoice {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ToolChoice".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "`auto`, `required`, `none`, or the name of the tool the model must call",
            "type": "string",
            "minLength": 1,
            "examples": ["auto", "required", "none"]
        })
    }
}

/// Which API a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    OpenAi,
    Anthropic,
    Prompted,
}

impl ProviderKind {
    /// The base URL used when none is set.
    pub fn default_base_url(self) -> &'static str {
        match self {
            ProviderKind::OpenAi | ProviderKind::Prompted => "https://api.openai.com/v1",
            ProviderKind::Anthropic => "https://api.anthropic.com/v1",
        }
    }

    /// The environment variable that holds the API key when none is named.
    pub fn default_key_env(self) -> &'static str {
        match self {
            ProviderKind::OpenAi | ProviderKind::Prompted => "OPENAI_API_KEY",
            ProviderKind::Anthropic => "ANTHROPIC_API_KEY",
        }
    }
}

impl FromStr for ProviderKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "openai" => Ok(ProviderKind::OpenAi),
            "anthropic" => Ok(ProviderKind::Anthropic),
            "prompted" => Ok(ProviderKind::Prompted),
            other => Err(format!(
                "unknown provider `{other}`; expected openai, anthropic or prompted"
            )),
        }
    }
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProviderKind::OpenAi => "openai",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::Prompted => "prompted",
        })
    }
}
