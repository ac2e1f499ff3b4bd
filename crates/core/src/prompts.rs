//! prompts: the prompts an ensemble writes in its TOML (`[[prompts]]`), offered to MCP
//! clients. A [`Prompt`] checks the arguments a `prompts/get` brings (each named, each a
//! string of at most [`MAX_ARGUMENT_BYTES`], the required ones there), then renders each
//! message's template with them ([`toolhost_config::template`]: sandboxed, fuel- and
//! output-bounded). A `resource` or `image` message reads the resource its URI names, as
//! `resources/read` would for the same caller.

use crate::catalog::{Catalog, VersionHash};
use crate::invoke::Session;
use crate::resources::{Body, Contents, ResourceError};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use toolhost_config::Span;
use toolhost_config::draft::{ArgumentDraft, MessageDraft, MessageKind, PromptDraft, Role};
use toolhost_config::template::{self, TemplateError};

/// The longest value one argument may have.
pub const MAX_ARGUMENT_BYTES: usize = 16 << 10;

/// A prompt an ensemble offers.
#[derive(Debug)]
pub struct Prompt {
    pub(crate) name: String,
    pub(crate) ensemble: Arc<str>,
    pub(crate) title: Option<String>,
    pub(crate) description: String,
    pub(crate) arguments: Vec<ArgumentDraft>,
    pub(crate) messages: Vec<MessageDraft>,
    pub(crate) definition: Span,
    pub(crate) version: VersionHash,
}

/// One message of a prompt, rendered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub role: Role,
    pub content: RenderedContent,
}

/// What a rendered message holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RenderedContent {
    Text(String),
    /// A resource, embedded whole.
    Resource(Contents),
    /// An image resource's bytes, with its MIME type.
    Image {
        data: Vec<u8>,
        mime: String,
    },
}

/// Why a `prompts/get` was refused; each names the prompt and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PromptError {
    #[error("no prompt `{0}`")]
    NotFound(String),
    #[error("prompt `{prompt}` has no argument `{argument}` (its arguments: {known})")]
    UnknownArgument {
        prompt: String,
        argument: String,
        known: String,
    },
    #[error("prompt `{prompt}` needs argument `{argument}`")]
    MissingArgument { prompt: String, argument: String },
    #[error("prompt `{prompt}`: argument `{argument}` must be a string")]
    NotAString { prompt: String, argument: String },
    #[error(
        "prompt `{prompt}`: argument `{argument}` is {bytes} bytes; at most {MAX_ARGUMENT_BYTES} are taken"
    )]
    TooLong {
        prompt: String,
        argument: String,
        bytes: usize,
    },
    #[error("prompt `{prompt}`, message {message}: {error}")]
    Template {
        prompt: String,
        message: usize,
        error: TemplateError,
    },
    #[error("prompt `{prompt}`, message {message}: {error}")]
    Resource {
        prompt: String,
        message: usize,
        error: ResourceError,
    },
    #[error("prompt `{prompt}`, message {message}: `{uri}` is {mime}, not an image")]
    NotAnImage {
        prompt: String,
        message: usize,
        uri: String,
        mime: String,
    },
}

impl Prompt {
    /// The prompt a draft describes, of `ensemble`.
    pub(crate) fn new(ensemble: &Arc<str>, draft: PromptDraft) -> Self {
        let mut hasher = blake3::Hasher::new();
        let mut part = |text: &str| {
            hasher.update(&(text.len() as u64).to_le_bytes());
            hasher.update(text.as_bytes());
        };
        part(&draft.name);
        part(draft.title.as_deref().unwrap_or(""));
        part(&draft.description);
        for argument in &draft.arguments {
            part(&argument.name);
            part(argument.description.as_deref().unwrap_or(""));
            part(if argument.required { "required" } else { "" });
            argument.values.iter().for_each(|v| part(v));
        }
        for message in &draft.messages {
            part(&format!("{:?} {:?}", message.role, message.kind));
            part(&message.template);
        }
        Prompt {
            version: VersionHash(*hasher.finalize().as_bytes()),
            name: draft.name,
            ensemble: Arc::clone(ensemble),
            title: draft.title,
            description: draft.description,
            arguments: draft.arguments,
            messages: draft.messages,
            definition: draft.definition,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn ensemble(&self) -> &str {
        &self.ensemble
    }

    pub fn title(&self) -> Option<&str> {
        self.title.as_deref()
    }

    pub fn description(&self) -> &str {
        &self.description
    }

    pub fn arguments(&self) -> &[ArgumentDraft] {
        &self.arguments
    }

    pub fn definition(&self) -> &Span {
        &self.definition
    }

    pub fn version(&self) -> VersionHash {
        self.version
    }

    /// The values of `argument` that start with `typed` (its `values`), at most `max`.
    pub fn complete(&self, argument: &str, typed: &str, max: usize) -> Vec<String> {
        self.arguments
            .iter()
            .find(|a| a.name == argument)
            .map(|a| {
                a.values
                    .iter()
                    .filter(|v| v.starts_with(typed))
                    .take(max)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The arguments of a `prompts/get`, checked: every one known and a string within
    /// bounds, every required one given.
    pub fn arguments_of(
        &self,
        given: &Map<String, Value>,
    ) -> Result<BTreeMap<String, String>, PromptError> {
        let mut values = BTreeMap::new();
        for (name, value) in given {
            if !self.arguments.iter().any(|a| &a.name == name) {
                let known: Vec<&str> = self.arguments.iter().map(|a| a.name.as_str()).collect();
                return Err(PromptError::UnknownArgument {
                    prompt: self.name.clone(),
                    argument: toolhost_audit::cut_text(name),
                    known: if known.is_empty() {
                        "none".into()
                    } else {
                        known.join(", ")
                    },
                });
            }
            let Value::String(text) = value else {
                return Err(PromptError::NotAString {
                    prompt: self.name.clone(),
                    argument: name.clone(),
                });
            };
            if text.len() > MAX_ARGUMENT_BYTES {
                return Err(PromptError::TooLong {
                    prompt: self.name.clone(),
                    argument: name.clone(),
                    bytes: text.len(),
                });
            }
            values.insert(name.clone(), text.clone());
        }
        if let Some(missing) = self
            .arguments
            .iter()
            .find(|a| a.required && !values.contains_key(&a.name))
        {
            return Err(PromptError::MissingArgument {
                prompt: self.name.clone(),
                argument: missing.name.clone(),
            });
        }
        Ok(values)
    }

    /// The prompt's messages for `given` arguments. Resources are read from `catalog`, as
    /// `session` may read them.
    pub async fn render(
        &self,
        given: &Map<String, Value>,
        catalog: &Catalog,
        session: &Session,
    ) -> Result<Vec<Rendered>, PromptError> {
        let arguments = self.arguments_of(given)?;
        let mut rendered = Vec::with_capacity(self.messages.len());
        for (index, message) in self.messages.iter().enumerate() {
            let number = index + 1;
            let text = template::render(&message.template, &arguments).map_err(|error| {
                PromptError::Template {
                    prompt: self.name.clone(),
                    message: number,
                    error,
                }
            })?;
            let content = match message.kind {
                MessageKind::Text => RenderedContent::Text(text),
                MessageKind::Resource | MessageKind::Image => {
                    let uri = text.trim();
                    let contents = catalog.read_resource(session, uri).await.map_err(|error| {
                        PromptError::Resource {
                            prompt: self.name.clone(),
                            message: number,
                            error,
                        }
                    })?;
                    match (message.kind, contents.body) {
                        (MessageKind::Image, body) if contents.mime.starts_with("image/") => {
                            let data = match body {
                                Body::Blob(data) => data,
                                // An SVG is text, and an image.
                                Body::Text(text) => text.into_bytes(),
                            };
                            RenderedContent::Image {
                                data,
                                mime: contents.mime,
                            }
                        }
                        (MessageKind::Image, _) => {
                            return Err(PromptError::NotAnImage {
                                prompt: self.name.clone(),
                                message: number,
                                uri: contents.uri,
                                mime: contents.mime,
                            });
                        }
                        (_, body) => RenderedContent::Resource(Contents { body, ..contents }),
                    }
                }
            };
            rendered.push(Rendered {
                role: message.role,
                content,
            });
        }
        Ok(rendered)
    }
}
