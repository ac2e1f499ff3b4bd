//! What a `toolhost:plugin@0.3.0` component offers besides tools: the prompts and resources
//! its `offers` interface lists when it is loaded ([`Offers`], checked against the bounds
//! here), and what one `get-prompt` or `read-resource` asks and answers ([`OfferRequest`],
//! [`Offered`]). Components of the other worlds offer none.

use toolhost_contract::{Content, EmbeddedResource, Role};

/// The most prompts a component may list.
pub const MAX_OFFERED_PROMPTS: usize = 1000;
/// The most resources a component may list.
pub const MAX_OFFERED_RESOURCES: usize = 1000;
/// The most resource templates a component may list.
pub const MAX_OFFERED_TEMPLATES: usize = 100;
/// The most arguments one prompt may take.
pub const MAX_PROMPT_ARGUMENTS: usize = 64;
/// The most bytes of names, descriptions, URIs and types the lists may hold in all. It is
/// also the hostcall fuel of each list's call: what wasmtime may copy out of the guest.
pub const MAX_OFFERED_BYTES: usize = 4 << 20;
/// The longest URI (or URI template) a component may offer, as for resource files.
pub const MAX_OFFERED_URI_BYTES: usize = 2048;

/// A component's prompts, resources and resource templates, as it listed them at load.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Offers {
    pub prompts: Vec<PromptSpec>,
    pub resources: Vec<ResourceSpec>,
    pub templates: Vec<TemplateSpec>,
}

/// One prompt a component offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptSpec {
    pub name: String,
    pub title: Option<String>,
    pub description: String,
    pub arguments: Vec<PromptArgument>,
}

/// One argument of a component's prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptArgument {
    pub name: String,
    pub description: Option<String>,
    pub required: bool,
}

/// One resource a component offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceSpec {
    pub uri: String,
    pub name: String,
    pub title: Option<String>,
    pub description: Option<String>,
    pub mime_type: Option<String>,
}

/// One resource template a component offers (RFC 6570).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateSpec {
    pub uri_template: String,
    pub name: String,
    pub title: Option<String>,
    pub description: Option<String>,
    pub mime_type: Option<String>,
}

/// What one run of a component's `offers` asks.
#[derive(Debug, Clone, Copy)]
pub enum OfferRequest<'a> {
    /// `get-prompt`, with arguments the caller already checked against the prompt's.
    Prompt {
        name: &'a str,
        arguments: &'a [(String, String)],
    },
    /// `read-resource`.
    Resource { uri: &'a str },
}

/// What a component gave for an [`OfferRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Offered {
    /// A prompt's messages, in order.
    Prompt(Vec<(Role, Content)>),
    /// A resource's contents (one item or more, each naming its URI).
    Resource(Vec<EmbeddedResource>),
    /// The component has no such prompt or resource; its own words.
    NotFound(String),
}

impl Offered {
    /// The bytes it holds, counted against the call's `max-output-bytes` as a result's are.
    pub(crate) fn bytes(&self) -> usize {
        match self {
            Offered::Prompt(messages) => messages.iter().map(|(_, c)| c.bytes()).sum(),
            Offered::Resource(items) => items.iter().map(EmbeddedResource::bytes).sum(),
            Offered::NotFound(reason) => reason.len(),
        }
    }
}

/// Whether `name` may name a prompt or an argument: 1 to 64 of `[a-zA-Z0-9_-]`, as a tool.
fn usable_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Whether `uri` may be offered: a scheme (`letter *( letter / digit / + / - / . ) :`), no
/// whitespace or control characters, at most [`MAX_OFFERED_URI_BYTES`].
fn usable_uri(uri: &str) -> bool {
    let scheme = uri.split_once(':').map(|(scheme, _)| scheme);
    uri.len() <= MAX_OFFERED_URI_BYTES
        && !uri.chars().any(|c| c.is_whitespace() || c.is_control())
        && scheme.is_some_and(|s| {
            s.starts_with(|c: char| c.is_ascii_alphabetic())
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        })
}

/// A guest's name or URI as a message shows it: at most 120 bytes.
fn shown(text: &str) -> std::borrow::Cow<'_, str> {
    toolhost_contract::cut(text, 120, |_| "…".into())
}

fn text_bytes(parts: &[Option<&str>]) -> usize {
    parts.iter().map(|p| p.map_or(0, str::len)).sum()
}

impl Offers {
    /// Whether it lists nothing (every component before 0.3.0, and a 0.3.0 one may).
    pub fn is_empty(&self) -> bool {
        self.prompts.is_empty() && self.resources.is_empty() && self.templates.is_empty()
    }

    /// Checks what a component listed against the bounds and naming rules above; the
    /// reason names the first prompt, argument or resource that breaks one.
    pub(crate) fn check(&self) -> Result<(), String> {
        let counts = [
            ("prompts", self.prompts.len(), MAX_OFFERED_PROMPTS),
            ("resources", self.resources.len(), MAX_OFFERED_RESOURCES),
            (
                "resource templates",
                self.templates.len(),
                MAX_OFFERED_TEMPLATES,
            ),
        ];
        for (what, count, most) in counts {
            if count > most {
                return Err(format!(
                    "it lists {count} {what}; a component may list at most {most}"
                ));
            }
        }
        let mut bytes = 0usize;
        let mut names = std::collections::HashSet::new();
        for prompt in &self.prompts {
            if !usable_name(&prompt.name) {
                return Err(format!(
                    "prompt `{}`: a prompt's name is 1 to 64 of a-z, A-Z, 0-9, `_` and `-`",
                    shown(&prompt.name)
                ));
            }
            if !names.insert(prompt.name.as_str()) {
                return Err(format!("it lists prompt `{}` twice", prompt.name));
            }
            if prompt.arguments.len() > MAX_PROMPT_ARGUMENTS {
                return Err(format!(
                    "prompt `{}` takes {} arguments; a prompt may take at most \
                     {MAX_PROMPT_ARGUMENTS}",
                    prompt.name,
                    prompt.arguments.len()
                ));
            }
            let mut arguments = std::collections::HashSet::new();
            for argument in &prompt.arguments {
                if !usable_name(&argument.name) || !arguments.insert(argument.name.as_str()) {
                    return Err(format!(
                        "prompt `{}`: argument `{}` is not a usable name (1 to 64 of a-z, \
                         A-Z, 0-9, `_` and `-`) or is listed twice",
                        prompt.name,
                        shown(&argument.name)
                    ));
                }
                bytes += text_bytes(&[Some(&argument.name), argument.description.as_deref()]);
            }
            bytes += text_bytes(&[
                Some(&prompt.name),
                prompt.title.as_deref(),
                Some(&prompt.description),
            ]);
        }
        let mut uris = std::collections::HashSet::new();
        for resource in &self.resources {
            if !usable_uri(&resource.uri) {
                return Err(format!(
                    "resource `{}`: a URI has a scheme, no spaces, and at most \
                     {MAX_OFFERED_URI_BYTES} bytes",
                    shown(&resource.uri)
                ));
            }
            if !uris.insert(resource.uri.as_str()) {
                return Err(format!(
                    "it lists resource `{}` twice",
                    shown(&resource.uri)
                ));
            }
            bytes += text_bytes(&[
                Some(&resource.uri),
                Some(&resource.name),
                resource.title.as_deref(),
                resource.description.as_deref(),
                resource.mime_type.as_deref(),
            ]);
        }
        let mut templates = std::collections::HashSet::new();
        for template in &self.templates {
            if !templates.insert(template.uri_template.as_str()) {
                return Err(format!(
                    "it lists resource template `{}` twice",
                    shown(&template.uri_template)
                ));
            }
            if !usable_uri(&template.uri_template) {
                return Err(format!(
                    "resource template `{}`: a URI template has a scheme, no spaces, and at \
                     most {MAX_OFFERED_URI_BYTES} bytes",
                    shown(&template.uri_template)
                ));
            }
            bytes += text_bytes(&[
                Some(&template.uri_template),
                Some(&template.name),
                template.title.as_deref(),
                template.description.as_deref(),
                template.mime_type.as_deref(),
            ]);
        }
        if bytes > MAX_OFFERED_BYTES {
            return Err(format!(
                "its prompts and resources take {bytes} bytes of names, descriptions and \
                 URIs, more than the {MAX_OFFERED_BYTES} a component may list"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(uri: &str) -> ResourceSpec {
        ResourceSpec {
            uri: uri.into(),
            name: "r".into(),
            title: None,
            description: None,
            mime_type: None,
        }
    }

    #[test]
    fn uris_need_a_scheme_and_no_spaces() {
        assert!(usable_uri("notes://a/b"));
        assert!(usable_uri("urn:x-y:z"));
        assert!(!usable_uri("no-scheme"));
        assert!(!usable_uri("1x://a"));
        assert!(!usable_uri("a b://c"));
        assert!(!usable_uri("notes://a b"));
        assert!(!usable_uri(&format!(
            "n://{}",
            "a".repeat(MAX_OFFERED_URI_BYTES)
        )));
    }

    #[test]
    fn a_listing_past_a_bound_or_twice_the_same_is_refused_by_name() {
        let mut offers = Offers {
            resources: vec![resource("n://a"), resource("n://a")],
            ..Offers::default()
        };
        assert_eq!(
            offers.check().unwrap_err(),
            "it lists resource `n://a` twice"
        );
        offers.resources = (0..=MAX_OFFERED_RESOURCES)
            .map(|i| resource(&format!("n://{i}")))
            .collect();
        assert!(offers.check().unwrap_err().contains("at most 1000"));
        offers.resources.clear();
        offers.prompts = vec![PromptSpec {
            name: "has space".into(),
            title: None,
            description: "d".into(),
            arguments: Vec::new(),
        }];
        assert!(
            offers
                .check()
                .unwrap_err()
                .starts_with("prompt `has space`")
        );
    }
}
