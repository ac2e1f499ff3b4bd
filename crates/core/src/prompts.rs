//! prompts: the prompts an ensemble offers to MCP clients: written in its TOML
//! (`[[prompts]]`), or passed on from the MCP server it imports or from its
//! `toolhost:plugin@0.3.0` component. A [`Prompt`] checks the arguments a `prompts/get`
//! brings (each named, each a string of at most [`MAX_ARGUMENT_BYTES`], the required ones
//! there), then renders each written message's template with them
//! ([`toolhost_config::template`]: sandboxed, fuel- and output-bounded), asks the server, or
//! runs the component's `get-prompt` (bounded as a call). A `resource` or `image` message reads the resource its URI names, as
//! `resources/read` would for the same caller. Messages hold the items tool results hold
//! ([`Content`]).

use crate::backend::VersionHash;
use crate::backend::component::ComponentOffers;
use crate::import::ImportedServer;
use crate::resources::{Body, Contents, Reader, ResourceError};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use toolhost_config::Span;
use toolhost_config::draft::{ArgumentDraft, MessageDraft, MessageKind, PromptDraft, Role};
use toolhost_config::template::{self, TemplateError};
use toolhost_contract::BoxFuture;
pub use toolhost_contract::{Content, EmbeddedResource, Media, ResourceContents};

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
    pub(crate) source: Source,
    pub(crate) definition: Span,
    pub(crate) version: VersionHash,
}

/// Where a prompt's messages come from.
pub(crate) enum Source {
    /// Its `[[prompts]]` entry's messages.
    Written(Vec<MessageDraft>),
    /// The imported server's prompt of this name.
    Imported {
        server: Arc<dyn ImportedServer>,
        remote: String,
    },
    /// The component's prompt of this name.
    Component {
        offers: Arc<ComponentOffers>,
        remote: String,
    },
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Written(messages) => f.debug_tuple("Written").field(messages).finish(),
            Source::Imported { remote, .. } => {
                f.debug_struct("Imported").field("remote", remote).finish()
            }
            Source::Component { remote, .. } => {
                f.debug_struct("Component").field("remote", remote).finish()
            }
        }
    }
}

/// One message of a prompt, rendered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub role: Role,
    pub content: Content,
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
    /// The server or component that passes it on could not give it.
    #[error("prompt `{prompt}`: {reason}")]
    Passed { prompt: String, reason: String },
    /// The component refused its arguments (its `invalid-arguments`): the caller's to fix.
    #[error("prompt `{prompt}`: {reason}")]
    Refused { prompt: String, reason: String },
    #[error("prompt `{prompt}`, message {message}: `{uri}` is {mime}, not an image")]
    NotAnImage {
        prompt: String,
        message: usize,
        uri: String,
        mime: String,
    },
}

/// Where a prompt's resource and image messages are read from, and for whom: the catalog of
/// one `prompts/get`, as its session may read it (invoke provides it).
pub trait Resources: Sync {
    /// Who renders the prompt.
    fn reader(&self) -> &dyn Reader;

    /// The resource at `uri`, as the reader may read it.
    fn read<'a>(&'a self, uri: &'a str) -> BoxFuture<'a, Result<Vec<Contents>, ResourceError>>;
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
            source: Source::Written(draft.messages),
            definition: draft.definition,
        }
    }

    /// The prompt `listed` of an imported server, named `name` here (with the ensemble's
    /// prefix), defined where the ensemble names the server.
    pub(crate) fn imported(
        ensemble: &Arc<str>,
        name: String,
        server: &Arc<dyn ImportedServer>,
        listed: rmcp::model::Prompt,
        definition: Span,
    ) -> Self {
        let mut hasher = blake3::Hasher::new();
        hasher.update(&crate::backend::Backend::source_hash(server.as_ref()).0);
        hasher.update(name.as_bytes());
        hasher.update(
            serde_json::to_string(&listed)
                .unwrap_or_default()
                .as_bytes(),
        );
        let arguments = (listed.arguments.unwrap_or_default().into_iter())
            .map(|a| ArgumentDraft {
                name: a.name,
                description: a.description,
                required: a.required == Some(true),
                values: Vec::new(),
            })
            .collect();
        Prompt {
            version: VersionHash(*hasher.finalize().as_bytes()),
            description: (listed.description.clone())
                .or_else(|| listed.title.clone())
                .unwrap_or_else(|| listed.name.clone()),
            name,
            ensemble: Arc::clone(ensemble),
            title: listed.title,
            arguments,
            source: Source::Imported {
                server: Arc::clone(server),
                remote: listed.name,
            },
            definition,
        }
    }

    /// The prompt `listed` of a component, named `name` here (with the ensemble's prefix),
    /// defined where the ensemble names its component.
    pub(crate) fn of_component(
        ensemble: &Arc<str>,
        name: String,
        offers: &Arc<ComponentOffers>,
        listed: &toolhost_runtime::PromptSpec,
        definition: Span,
    ) -> Self {
        let mut hasher = blake3::Hasher::new();
        hasher.update(&offers.source_hash().0);
        hasher.update(format!("{:?} {:?}", offers.limits(), listed).as_bytes());
        hasher.update(name.as_bytes());
        Prompt {
            version: VersionHash(*hasher.finalize().as_bytes()),
            name,
            ensemble: Arc::clone(ensemble),
            title: listed.title.clone(),
            description: listed.description.clone(),
            arguments: (listed.arguments.iter())
                .map(|a| ArgumentDraft {
                    name: a.name.clone(),
                    description: a.description.clone(),
                    required: a.required,
                    values: Vec::new(),
                })
                .collect(),
            source: Source::Component {
                offers: Arc::clone(offers),
                remote: listed.name.clone(),
            },
            definition,
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

    /// Whether an imported server or a component passes it on (rather than the ensemble's
    /// TOML).
    pub fn is_passed(&self) -> bool {
        !matches!(self.source, Source::Written(_))
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

    /// The prompt's messages for `given` arguments, for `resources`' reader, who reads the
    /// resources the messages name from there.
    pub async fn render(
        &self,
        given: &Map<String, Value>,
        resources: &dyn Resources,
    ) -> Result<Vec<Rendered>, PromptError> {
        let arguments = self.arguments_of(given)?;
        match &self.source {
            Source::Written(messages) => self.written(messages, &arguments, resources).await,
            Source::Imported { server, remote } => {
                let arguments = arguments
                    .into_iter()
                    .map(|(k, v)| (k, Value::String(v)))
                    .collect();
                let result = server
                    .get_prompt(remote, &arguments)
                    .await
                    .map_err(|reason| PromptError::Passed {
                        prompt: self.name.clone(),
                        reason,
                    })?;
                Ok(result
                    .messages
                    .into_iter()
                    .map(|message| Rendered {
                        role: match message.role {
                            rmcp::model::Role::Assistant => Role::Assistant,
                            _ => Role::User,
                        },
                        content: crate::content::item(message.content),
                    })
                    .collect())
            }
            Source::Component { offers, remote } => {
                let arguments: Vec<(String, String)> = arguments.into_iter().collect();
                let request = toolhost_runtime::OfferRequest::Prompt {
                    name: remote,
                    arguments: &arguments,
                };
                let failed = |reason: String| PromptError::Passed {
                    prompt: self.name.clone(),
                    reason,
                };
                match offers.run(resources.reader().id(), request).await {
                    Ok(toolhost_runtime::Offered::Prompt(messages)) => Ok(messages
                        .into_iter()
                        .map(|(role, content)| Rendered {
                            role: match role {
                                toolhost_contract::Role::User => Role::User,
                                toolhost_contract::Role::Assistant => Role::Assistant,
                            },
                            content,
                        })
                        .collect()),
                    Ok(toolhost_runtime::Offered::NotFound(_)) => {
                        Err(PromptError::NotFound(self.name.clone()))
                    }
                    Ok(toolhost_runtime::Offered::Resource(_)) => {
                        Err(failed("the component answered with a resource".into()))
                    }
                    Err(toolhost_contract::RunError::Tool(
                        toolhost_contract::ToolFailure::InvalidArguments(reason),
                    )) => Err(PromptError::Refused {
                        prompt: self.name.clone(),
                        reason,
                    }),
                    Err(toolhost_contract::RunError::Tool(failure)) => {
                        Err(failed(failure.to_string()))
                    }
                    Err(error) => Err(failed(format!("the component {error}"))),
                }
            }
        }
    }

    async fn written(
        &self,
        messages: &[MessageDraft],
        arguments: &BTreeMap<String, String>,
        resources: &dyn Resources,
    ) -> Result<Vec<Rendered>, PromptError> {
        let mut rendered = Vec::with_capacity(messages.len());
        for (index, message) in messages.iter().enumerate() {
            let number = index + 1;
            let text = template::render(&message.template, arguments).map_err(|error| {
                PromptError::Template {
                    prompt: self.name.clone(),
                    message: number,
                    error,
                }
            })?;
            let content = match message.kind {
                MessageKind::Text => Content::Text(text),
                MessageKind::Resource | MessageKind::Image => {
                    let uri = text.trim();
                    let read = resources.read(uri).await;
                    let mut contents = read.map_err(|error| PromptError::Resource {
                        prompt: self.name.clone(),
                        message: number,
                        error,
                    })?;
                    // A resource is one item; a server's may be several: the first is taken.
                    let contents = contents.swap_remove(0);
                    match message.kind {
                        MessageKind::Image if contents.mime.starts_with("image/") => {
                            Content::Image(Media {
                                mime_type: contents.mime,
                                data: match contents.body {
                                    Body::Blob(data) => data,
                                    // An SVG is text, and an image.
                                    Body::Text(text) => text.into_bytes(),
                                },
                            })
                        }
                        MessageKind::Image => {
                            return Err(PromptError::NotAnImage {
                                prompt: self.name.clone(),
                                message: number,
                                uri: contents.uri,
                                mime: contents.mime,
                            });
                        }
                        _ => Content::Resource(contents.into()),
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
