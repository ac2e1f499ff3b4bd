//! Prompts and resources through the host: `prompts/get` and `resources/read` for a
//! session, on one snapshot of the catalog, each audited as a call is (with `kind` `prompt`
//! or `resource`), and the watch that tells which resources changed.

use super::watch::{ResourceEvent, ResourceWatch};
use super::{Host, Session};
use crate::prompts::{Prompt, PromptError, Rendered};
use crate::resources::{Contents, ResourceError};
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::broadcast;
use toolhost_audit::{self as audit, AuditRecord};

/// A prompt's resources, read from one catalog snapshot as a session may.
struct Snapshot<'a> {
    catalog: &'a crate::catalog::Catalog,
    session: &'a Session,
}

impl crate::prompts::Resources for Snapshot<'_> {
    fn reader(&self) -> &dyn crate::resources::Reader {
        self.session
    }

    fn read<'a>(
        &'a self,
        uri: &'a str,
    ) -> toolhost_contract::BoxFuture<'a, Result<Vec<Contents>, ResourceError>> {
        Box::pin(self.catalog.read_resource(self.session, uri))
    }
}

impl Host {
    /// The prompt `name`, if `session` may see it.
    pub fn prompt(&self, session: &Session, name: &str) -> Option<Arc<Prompt>> {
        let catalog = self.catalog().snapshot();
        catalog
            .prompt(name)
            .filter(|p| session.permits_offer(p.ensemble(), p.name()))
            .cloned()
    }

    /// The messages of prompt `name` for `arguments`, as `session` may have them; audited.
    pub async fn get_prompt(
        &self,
        session: &Session,
        name: &str,
        arguments: &Map<String, Value>,
    ) -> Result<(Arc<Prompt>, Vec<Rendered>), PromptError> {
        let started = Instant::now();
        let catalog = self.catalog().snapshot();
        let prompt = catalog
            .prompt(name)
            .filter(|p| session.permits_offer(p.ensemble(), p.name()))
            .cloned();
        let result = match &prompt {
            Some(prompt) => {
                let resources = Snapshot {
                    catalog: &catalog,
                    session,
                };
                prompt.render(arguments, &resources).await
            }
            None => Err(PromptError::NotFound(audit::cut_text(name))),
        };
        let bytes = result.as_ref().map_or(0, |messages| {
            messages.iter().map(|m| m.content.bytes()).sum()
        });
        let arguments = Value::Object(arguments.clone());
        self.audit_offer(OfferRecord {
            session,
            kind: "prompt",
            name,
            ensemble: prompt.as_ref().map(|p| p.ensemble()),
            arguments: Some(&arguments),
            error: result.as_ref().err().map(ToString::to_string),
            started,
            bytes,
        });
        Ok((
            prompt.ok_or_else(|| PromptError::NotFound(name.into()))?,
            result?,
        ))
    }

    /// The resource at `uri` (one item, or several from an imported server), as `session` may
    /// read it; audited.
    pub async fn read_resource(
        &self,
        session: &Session,
        uri: &str,
    ) -> Result<Vec<Contents>, ResourceError> {
        let started = Instant::now();
        let catalog = self.catalog().snapshot();
        let result = catalog.read_resource(session, uri).await;
        let owner = catalog.resource_owner_known(uri);
        let ensemble = owner.as_ref().map(|owner| owner.ensemble());
        self.audit_offer(OfferRecord {
            session,
            kind: "resource",
            name: uri,
            ensemble: ensemble.filter(|_| result.is_ok()),
            arguments: None,
            error: result.as_ref().err().map(ToString::to_string),
            started,
            bytes: result
                .as_ref()
                .map_or(0, |c| c.iter().map(Contents::len).sum()),
        });
        result
    }

    /// Receives an event each time resources change on disk, from now on. The first call
    /// starts the watch (within a tokio runtime; the live catalog's directories are watched
    /// when it returns).
    pub fn resource_events(&self) -> broadcast::Receiver<Arc<ResourceEvent>> {
        self.resource_watch
            .get_or_init(|| ResourceWatch::start(self.catalog()))
            .subscribe()
    }

    fn audit_offer(&self, record: OfferRecord<'_>) {
        let Some(log) = self.audit_log() else { return };
        let (arguments, arguments_bytes) =
            record.arguments.map_or((Value::Null, None), |arguments| {
                audit::record_arguments(arguments, &audit::Withheld::default())
            });
        let (trace_id, span_id) = crate::trace::current_ids().unzip();
        let record = AuditRecord {
            time: audit::now_rfc3339(),
            session: record.session.id.clone(),
            identity: record.session.caller().map(|c| c.identity.clone()),
            tool: audit::cut_text(record.name),
            kind: Some(record.kind.into()),
            ensemble: record.ensemble.map(str::to_string),
            component: None,
            arguments,
            arguments_bytes,
            outcome: if record.error.is_some() {
                "refused".into()
            } else {
                "ok".into()
            },
            error: record
                .error
                .map(|e| audit::cut_text(&audit::redact_text(&e))),
            duration_ms: record.started.elapsed().as_secs_f64() * 1000.0,
            deduplicated: false,
            result_bytes: record.bytes,
            summary: String::new(),
            trace_id,
            span_id,
        };
        // A record the file refuses is held and written later; the log says so itself, once.
        let _ = log.append(&record);
    }
}

/// What one audit record of a prompt or resource says.
struct OfferRecord<'a> {
    session: &'a Session,
    kind: &'static str,
    name: &'a str,
    ensemble: Option<&'a str>,
    arguments: Option<&'a Value>,
    error: Option<String>,
    started: Instant,
    bytes: usize,
}
