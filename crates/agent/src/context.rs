//! context: what a person brings into a conversation besides their own words: a prompt's
//! messages (`toolhost chat --prompt`, the page's commands) and resources they attach. The
//! conversation holds text, so a text resource goes in whole, under a line that names its
//! URI and type; an image or other bytes are named, not sent, and said so in the notes.
//! Messages of one role in a row become one message (some APIs refuse two user turns in a
//! row).

use crate::provider::conversation::{Conversation, Message};
use toolhost_config::draft::Role;
use toolhost_core::prompts::{Content, Rendered, ResourceContents};
use toolhost_core::resources::{Body, Contents};

/// A resource as text for the conversation, or why it cannot be (bytes).
pub fn resource_text(contents: &Contents) -> Result<String, String> {
    match &contents.body {
        Body::Text(text) => Ok(format!(
            "Resource {} ({}):\n{text}",
            contents.uri, contents.mime
        )),
        Body::Blob(bytes) => Err(format!(
            "{} ({}, {} bytes) is not text; this chat sends text only, so it was left out",
            contents.uri,
            contents.mime,
            bytes.len()
        )),
    }
}

/// Adds a prompt's messages to `conversation`; returns notes on what was left out.
pub fn push_prompt(conversation: &mut Conversation, messages: Vec<Rendered>) -> Vec<String> {
    let mut notes = Vec::new();
    for message in messages {
        let text =
            match message.content {
                Content::Text(text) => text,
                Content::Resource(embedded) => {
                    let mime = embedded.mime_type.unwrap_or_default();
                    match embedded.contents {
                        ResourceContents::Text(text) => {
                            format!("Resource {} ({mime}):\n{text}", embedded.uri)
                        }
                        ResourceContents::Blob(bytes) => {
                            notes.push(format!(
                                "{} ({mime}, {} bytes) is not text; this chat sends text only, so \
                             it was left out",
                                embedded.uri,
                                bytes.len()
                            ));
                            continue;
                        }
                    }
                }
                Content::Image(media) | Content::Audio(media) => {
                    notes.push(format!(
                    "{} ({}, {} bytes) is not text; this chat sends text only, so it was left out",
                    if media.mime_type.starts_with("audio/") { "audio" } else { "an image" },
                    media.mime_type,
                    media.data.len()
                ));
                    continue;
                }
            };
        push(conversation, message.role, text);
    }
    notes
}

/// Adds `text` said by `role`, joined to the last message when that is the same role's.
pub fn push(conversation: &mut Conversation, role: Role, text: String) {
    match (role, conversation.messages.last_mut()) {
        (Role::User, Some(Message::User { text: last })) => {
            last.push_str("\n\n");
            last.push_str(&text);
        }
        (Role::Assistant, Some(Message::Assistant { text: last, calls })) if calls.is_empty() => {
            last.push_str("\n\n");
            last.push_str(&text);
        }
        (Role::User, _) => conversation.push_user(text),
        (Role::Assistant, _) => conversation.messages.push(Message::Assistant {
            text,
            calls: Vec::new(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prompts_messages_become_alternating_text_turns() {
        let text = |role, t: &str| Rendered {
            role,
            content: Content::Text(t.into()),
        };
        let resource = Rendered {
            role: Role::User,
            content: Content::Resource(
                Contents {
                    uri: "docs://a.md".into(),
                    mime: "text/markdown".into(),
                    body: Body::Text("# A".into()),
                }
                .into(),
            ),
        };
        let image = Rendered {
            role: Role::User,
            content: Content::Image(toolhost_core::prompts::Media {
                data: vec![1, 2, 3],
                mime_type: "image/png".into(),
            }),
        };
        let mut conversation = Conversation::new(None);
        let notes = push_prompt(
            &mut conversation,
            vec![
                resource,
                image,
                text(Role::User, "Review it."),
                text(Role::Assistant, "Which part?"),
            ],
        );
        assert_eq!(notes.len(), 1);
        assert!(
            notes[0].contains("an image (image/png, 3 bytes)"),
            "{notes:?}"
        );
        assert_eq!(
            conversation.messages,
            [
                Message::User {
                    text: "Resource docs://a.md (text/markdown):\n# A\n\nReview it.".into()
                },
                Message::Assistant {
                    text: "Which part?".into(),
                    calls: Vec::new()
                },
            ]
        );
    }
}
