//! An in-process model for tests of the agent loop where HTTP is not the point (feature
//! `test-support`): it answers with scripted turns, in order, and records what the loop asked
//! it (the tools on offer and the conversation so far). The wire formats are tested against
//! scripted servers that speak them (`tests/all/scripted.rs`).

use super::conversation::{Invocation, Message};
use super::{ModelRequest, ModelTurn, Provider, ProviderError, TextSink, Usage};
use serde_json::Value;
use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};
use toolhost_contract::BoxFuture;

/// What the loop asked for one turn.
#[derive(Debug, Clone)]
pub struct Asked {
    pub tools: Vec<String>,
    pub messages: Vec<Message>,
}

/// A model that plays back `turns`.
pub struct FakeModel {
    turns: Mutex<VecDeque<ModelTurn>>,
    asked: Mutex<Vec<Asked>>,
}

impl FakeModel {
    pub fn new(turns: Vec<ModelTurn>) -> Self {
        FakeModel {
            turns: Mutex::new(turns.into()),
            asked: Mutex::default(),
        }
    }

    /// Every request so far, in order.
    pub fn asked(&self) -> Vec<Asked> {
        self.asked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Provider for FakeModel {
    fn name(&self) -> &'static str {
        "fake"
    }

    fn complete<'a>(
        &'a self,
        request: ModelRequest<'a>,
        on_text: TextSink<'a>,
    ) -> BoxFuture<'a, Result<ModelTurn, ProviderError>> {
        self.asked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Asked {
                tools: request.tools.iter().map(|t| t.name.clone()).collect(),
                messages: request.messages.to_vec(),
            });
        let turn = self
            .turns
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop_front();
        Box::pin(async move {
            let turn =
                turn.ok_or_else(|| ProviderError::Setup("the fake model ran out of turns".into()))?;
            if !turn.text.is_empty() {
                on_text(&turn.text);
            }
            Ok(turn)
        })
    }
}

/// A turn that calls tools: (id, name, arguments).
pub fn calls(calls: &[(&str, &str, Value)]) -> ModelTurn {
    ModelTurn {
        calls: calls
            .iter()
            .map(|(id, name, arguments)| Invocation::new(*id, *name, arguments.clone()))
            .collect(),
        usage: Some(Usage::default()),
        ..ModelTurn::default()
    }
}

/// A turn that answers with `text`.
pub fn text(text: &str) -> ModelTurn {
    ModelTurn {
        text: text.to_string(),
        ..ModelTurn::default()
    }
}
