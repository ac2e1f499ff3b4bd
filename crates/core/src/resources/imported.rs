//! imported: the resources of an MCP server an ensemble imports, passed through. The set
//! answers for the URIs the server listed last and those its templates match (a URI a client
//! makes up is asked of no server); listing, reading and subscribing go to the server, within
//! the bounds of [`crate::backend::mcp::offers`].

use super::{Body, Contents, Listed, ResourceError};
use crate::backend::mcp::McpImport;
use crate::catalog::VersionHash;
use base64::Engine;
use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::broadcast;
use toolhost_config::Span;

/// An imported server's resources.
#[derive(Debug)]
pub struct ImportedResources {
    name: String,
    ensemble: Arc<str>,
    server: Arc<McpImport>,
    definition: Span,
    version: VersionHash,
    known: Mutex<Known>,
    /// When a failure to list was last logged: a client that lists again and again while
    /// the server is down costs one log line every [`WARN_INTERVAL`], not one per request.
    warned: Mutex<Option<std::time::Instant>>,
}

/// How often a server that fails to list its resources is logged, at most.
const WARN_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

/// What the server listed last: the URIs, the templates, and whether it has listed at all.
#[derive(Debug, Default)]
struct Known {
    listed: bool,
    uris: HashSet<String>,
    templates: Vec<String>,
}

impl ImportedResources {
    /// The resources of `server`, named `name` (the ensemble's name: what access rules
    /// match), defined where the ensemble names the server.
    pub(crate) fn new(
        ensemble: &Arc<str>,
        name: String,
        server: &Arc<McpImport>,
        definition: Span,
    ) -> Self {
        let mut hasher = blake3::Hasher::new();
        hasher.update(&crate::backend::Backend::source_hash(server.as_ref()).0);
        hasher.update(name.as_bytes());
        ImportedResources {
            name,
            ensemble: Arc::clone(ensemble),
            server: Arc::clone(server),
            definition,
            version: VersionHash(*hasher.finalize().as_bytes()),
            known: Mutex::default(),
            warned: Mutex::default(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn ensemble(&self) -> &str {
        &self.ensemble
    }

    pub fn definition(&self) -> &Span {
        &self.definition
    }

    pub fn version(&self) -> VersionHash {
        self.version
    }

    /// The server's resources, and whether there were more than were taken. A server that
    /// cannot be reached lists nothing (and says why in the log).
    pub async fn list(&self) -> (Vec<Listed>, bool) {
        match self.server.resources().await {
            Ok((resources, cut)) => {
                let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
                known.listed = true;
                known.uris = resources.iter().map(|r| r.uri.clone()).collect();
                drop(known);
                let listed = resources
                    .into_iter()
                    .map(|r| Listed {
                        path: r.name.clone(),
                        mime: r.mime_type.clone().unwrap_or_default(),
                        size: r.size.unwrap_or(0),
                        uri: r.uri,
                    })
                    .collect();
                (listed, cut)
            }
            Err(e) => {
                self.warn(&format!("resources of `{}`: {e}", self.name));
                (Vec::new(), false)
            }
        }
    }

    /// The server's resource templates.
    pub async fn templates(&self) -> Vec<rmcp::model::ResourceTemplate> {
        match self.server.resource_templates().await {
            Ok(templates) => {
                let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
                known.templates = templates.iter().map(|t| t.uri_template.clone()).collect();
                templates
            }
            Err(e) => {
                self.warn(&format!("resource templates of `{}`: {e}", self.name));
                Vec::new()
            }
        }
    }

    /// Whether `uri` is one of this server's: listed last, or matched by a template. A set
    /// that has not listed yet lists first.
    pub async fn claims(&self, uri: &str) -> bool {
        let listed = self
            .known
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .listed;
        if !listed {
            self.list().await;
            self.templates().await;
        }
        self.claims_listed(uri)
    }

    /// Logs `message` unless a failure was logged within [`WARN_INTERVAL`] (then at debug).
    fn warn(&self, message: &str) {
        let now = std::time::Instant::now();
        let mut warned = self.warned.lock().unwrap_or_else(PoisonError::into_inner);
        if warned.is_none_or(|at| now.duration_since(at) >= WARN_INTERVAL) {
            *warned = Some(now);
            tracing::warn!("{message} (said at most once a minute)");
        } else {
            tracing::debug!("{message}");
        }
    }

    /// Whether `uri` is one of this server's as far as it is known now (no listing asked).
    pub fn claims_listed(&self, uri: &str) -> bool {
        let known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        known.uris.contains(uri) || known.templates.iter().any(|t| matches_template(t, uri))
    }

    /// Reads `uri` on the server: each item it answers, text or bytes.
    pub async fn read(&self, uri: &str) -> Result<Vec<Contents>, ResourceError> {
        let result =
            self.server
                .read_resource(uri)
                .await
                .map_err(|reason| ResourceError::Unreadable {
                    uri: toolhost_audit::cut_text(uri),
                    reason,
                })?;
        let mut contents = Vec::with_capacity(result.contents.len());
        for item in result.contents {
            contents.push(match item {
                rmcp::model::ResourceContents::TextResourceContents {
                    uri,
                    mime_type,
                    text,
                    ..
                } => Contents {
                    uri,
                    mime: mime_type.unwrap_or_else(|| "text/plain".into()),
                    body: Body::Text(text),
                },
                rmcp::model::ResourceContents::BlobResourceContents {
                    uri,
                    mime_type,
                    blob,
                    ..
                } => Contents {
                    body: Body::Blob(
                        base64::engine::general_purpose::STANDARD
                            .decode(&blob)
                            .map_err(|e| ResourceError::Unreadable {
                                uri: toolhost_audit::cut_text(&uri),
                                reason: format!("the server's blob is not base64: {e}"),
                            })?,
                    ),
                    uri,
                    mime: mime_type.unwrap_or_else(|| "application/octet-stream".into()),
                },
                _ => continue,
            });
        }
        // An item under a URI the server never named (nor the one asked for) is left out: a
        // server cannot pass its text off as another resource's.
        contents.retain(|item| item.uri == uri || self.claims_listed(&item.uri));
        if contents.is_empty() {
            return Err(ResourceError::NotFound {
                uri: toolhost_audit::cut_text(uri),
            });
        }
        Ok(contents)
    }

    /// Asks the server to report `uri`'s updates; `false` when it does not take that.
    pub async fn subscribe(&self, uri: &str) -> bool {
        self.server.subscribe(uri).await
    }

    /// The server's updates: a URI, or `None` when its list changed.
    pub fn updates(&self) -> broadcast::Receiver<Option<String>> {
        self.server.resource_updates()
    }
}

/// Whether `uri` is one `template` (RFC 6570, level 2) describes: literal parts as written,
/// `{name}` a non-empty run without `/`, `?` or `#`, `{+name}` and `{#name}` any non-empty
/// run. Each expression takes the shortest run that lets the next literal follow (no
/// backtracking: linear in the URI).
pub fn matches_template(template: &str, uri: &str) -> bool {
    let mut rest = uri;
    let mut parts = template.split('{');
    let Some(first) = parts.next() else {
        return false;
    };
    let Some(after) = rest.strip_prefix(first) else {
        return false;
    };
    rest = after;
    for part in parts {
        let Some((expression, literal)) = part.split_once('}') else {
            return false;
        };
        let reserved = expression.starts_with('+') || expression.starts_with('#');
        let allowed = |c: char| reserved || !matches!(c, '/' | '?' | '#');
        let end = if literal.is_empty() {
            rest.len()
        } else {
            match rest.find(literal) {
                Some(at) => at,
                None => return false,
            }
        };
        let value = &rest[..end];
        if value.is_empty() || !value.chars().all(allowed) {
            return false;
        }
        rest = &rest[end + literal.len()..];
    }
    rest.is_empty()
}

#[cfg(test)]
mod tests {
    use super::matches_template;

    #[test]
    fn templates_match_the_uris_they_describe() {
        assert!(matches_template(
            "test://template/{id}/data",
            "test://template/123/data"
        ));
        assert!(!matches_template(
            "test://template/{id}/data",
            "test://template/1/2/data"
        ));
        assert!(!matches_template(
            "test://template/{id}/data",
            "test://template//data"
        ));
        assert!(matches_template("file:///{+path}", "file:///a/b/c.md"));
        assert!(!matches_template("file:///{+path}", "file:///"));
        assert!(matches_template("db://{table}/{id}", "db://users/7"));
        assert!(!matches_template("db://{table}/{id}", "db://users/7/x"));
        assert!(!matches_template("db://{table", "db://users"));
        assert!(matches_template("exact://a", "exact://a"));
        assert!(!matches_template("exact://a", "exact://ab"));
    }
}
