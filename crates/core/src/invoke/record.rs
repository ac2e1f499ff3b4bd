//! The record of a call: counted in the metrics and appended to the audit log, with what
//! the tool was given from the host's environment withheld from it (`Withheld`).

use super::{CallOutcome, ErrorKind, Host, Session};
use crate::catalog::Tool;
use serde_json::Value;
use toolhost_audit::{self as audit, AuditRecord, Withheld};

impl Host {
    /// Counts the call in the metrics and appends its audit record.
    pub(super) fn record(
        &self,
        session: &Session,
        tool: Option<&Tool>,
        arguments: Option<&Value>,
        outcome: &CallOutcome,
    ) {
        if let Some(metrics) = &self.metrics {
            let kind = outcome.result.as_ref().err().map(|e| e.kind);
            if let Some(caller) = session.caller()
                && caller.identity.kind != toolhost_contract::IdentityKind::Local
            {
                metrics.identity_call(&caller.identity.name, kind.map_or("ok", ErrorKind::as_str));
            }
            metrics.call(
                tool.map(|t| t.name.as_str()),
                kind.map_or("ok", ErrorKind::as_str),
                outcome.duration.as_secs_f64(),
                outcome.deduplicated,
                kind == Some(ErrorKind::InvalidArguments) && tool.is_some(),
            );
        }
        let Some(log) = &self.audit else { return };
        let withheld = tool.map(withheld).unwrap_or_default();
        let (outcome_name, error, bytes, summary) = match &outcome.result {
            Ok(result) => (
                "ok".to_string(),
                None,
                result.bytes(),
                audit::summarize_result(&result.text(), &withheld),
            ),
            Err(e) => (
                e.kind.as_str().to_string(),
                Some(audit::record_error(&e.audit_message(), &withheld)),
                0,
                String::new(),
            ),
        };
        let (arguments, arguments_bytes) = arguments.map_or((Value::Null, None), |arguments| {
            audit::record_arguments(arguments, &withheld)
        });
        let (trace_id, span_id) = crate::trace::current_ids().unzip();
        let record = AuditRecord {
            time: audit::now_rfc3339(),
            session: session.id.clone(),
            identity: session.caller().map(|c| c.identity.clone()),
            tool: audit::cut_text(&outcome.tool),
            kind: None,
            ensemble: tool.map(|t| t.ensemble.to_string()),
            component: tool.map(|t| t.source_hash().to_string()),
            arguments,
            arguments_bytes,
            outcome: outcome_name,
            error,
            duration_ms: outcome.duration.as_secs_f64() * 1000.0,
            deduplicated: outcome.deduplicated,
            result_bytes: bytes,
            summary,
            trace_id,
            span_id,
        };
        // A record the file refuses is held and written later; the log says so itself, once.
        let _ = log.append(&record);
    }
}

/// What `tool`'s calls are given from the host's environment: the values of its environment
/// variables and of its settings taken from a variable. A setting written in the ensemble is
/// no secret (`list --json` shows it) and is recorded as it is.
fn withheld(tool: &Tool) -> Withheld<'_> {
    let sandbox = &tool.policy.sandbox;
    let settings = (sandbox.config.iter())
        .filter(|setting| setting.env.is_some())
        .map(|setting| setting.value.as_str());
    Withheld::new(
        sandbox
            .env
            .iter()
            .map(|(_, value)| value.as_str())
            .chain(settings),
    )
}
