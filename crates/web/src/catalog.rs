//! The catalog as the page shows it: every ensemble with its tools (schemas, versions,
//! component hashes), what was refused with its file:line errors, what is compiling; once as
//! JSON, and as a stream that sends it again after every reload.

use super::Web;
use super::sse::{self, EventStream, frame};
use axum::extract::{Extension, State};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;
use toolhost_core::invoke::Caller;
use toolhost_core::reload::Reloader;

/// The catalog and its reload status, as one JSON value (`"type": "catalog"`).
pub(super) fn describe(reloader: &Reloader) -> Value {
    let status = reloader.status();
    let snapshot = reloader.catalog().snapshot();
    let mut tools: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
    for tool in snapshot.tools() {
        tools.entry(tool.ensemble()).or_default().push(json!({
            "name": tool.name(),
            "description": tool.description(),
            "enabled": tool.enabled(),
            "destructive": tool.policy().destructive,
            "read_only": tool.policy().read_only,
            "version": tool.version().to_string(),
            "input_schema": tool.input_schema(),
        }));
    }
    let ensembles: Vec<Value> = status
        .ensembles
        .iter()
        .map(|e| {
            json!({
                "name": e.name,
                "file": e.file,
                "enabled": e.enabled,
                "loaded_at": e.loaded_at,
                "components": e.components,
                "tools": tools.remove(e.name.as_str()).unwrap_or_default(),
            })
        })
        .collect();
    json!({
        "type": "catalog",
        "generation": status.generation,
        "reloaded_at": status.reloaded_at,
        "ensembles": ensembles,
        "refused": status.refused,
        "loading": status.loading,
    })
}

/// The catalog's JSON, made once per reload however many streams follow it: a client that
/// opens many streams does not make each reload cost as many descriptions.
#[derive(Default)]
pub(super) struct Described {
    last: std::sync::Mutex<Option<(Key, Arc<Value>)>>,
}

/// What a description depends on besides the catalog, which changes with the generation.
type Key = (u64, usize, usize);

impl Described {
    pub(super) fn get(&self, reloader: &Reloader) -> Arc<Value> {
        let status = reloader.status();
        let key = (
            status.generation,
            status.loading.len(),
            status.refused.len(),
        );
        let mut last = self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((at, value)) = &*last
            && *at == key
        {
            return Arc::clone(value);
        }
        let value = Arc::new(describe(reloader));
        *last = Some((key, Arc::clone(&value)));
        value
    }
}

pub(super) async fn catalog(
    State(web): State<Arc<Web>>,
    caller: Option<Extension<Caller>>,
) -> Response {
    let caller = caller.map(|Extension(caller)| caller);
    axum::Json(for_caller(
        &web,
        web.described.get(&web.reloader),
        caller.as_ref(),
    ))
    .into_response()
}

/// The description as `caller` may see it: without the tools it may not call.
fn for_caller(web: &Web, described: Arc<Value>, caller: Option<&Caller>) -> Arc<Value> {
    let Some(caller) = caller else {
        return described;
    };
    let snapshot = web.reloader.catalog().snapshot();
    let hidden: std::collections::HashSet<&str> = (snapshot.tools())
        .filter(|tool| !caller.permits(tool))
        .map(|tool| tool.name())
        .collect();
    if hidden.is_empty() {
        return described;
    }
    let mut value = described.as_ref().clone();
    if let Some(ensembles) = value["ensembles"].as_array_mut() {
        for ensemble in ensembles {
            if let Some(tools) = ensemble["tools"].as_array_mut() {
                tools.retain(|t| !t["name"].as_str().is_some_and(|n| hidden.contains(n)));
            }
        }
    }
    Arc::new(value)
}

/// The catalog now, then again after every reload, until the client goes away or the host
/// stops.
pub(super) async fn events(
    State(web): State<Arc<Web>>,
    caller: Option<Extension<Caller>>,
) -> Response {
    let caller = caller.map(|Extension(caller)| caller);
    // A client that reads none of the catalogs sent has its stream closed.
    let (sender, frames) = sse::channel(sse::MAX_UNREAD, CancellationToken::new());
    let mut changes = web.reloader.subscribe();
    let described =
        move |web: &Web| for_caller(web, web.described.get(&web.reloader), caller.as_ref());
    let _ = sender.send(frame(&described(&web)));
    let host = web.host.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                change = changes.recv() => match change {
                    // Many reloads at once: one catalog says them all.
                    Ok(_) | Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => return,
                },
                () = sender.closed() => return,
                () = host.stopping() => return,
            }
            if !sender.send(frame(&described(&web))) {
                return;
            }
        }
    });
    EventStream::new(frames, None).response()
}
