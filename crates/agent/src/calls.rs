//! calls: the tool calls of one model answer, as the loop takes them: each with an id unique
//! in the conversation (the provider's where it is fit to keep, else one of toolhost's), and
//! at most `max-calls-per-answer` of them.

use crate::RunLimits;
use crate::provider::conversation::{Conversation, Invocation, Message};
use std::collections::HashSet;

/// The longest call id taken from a model (the providers' own are about 30 characters).
const MAX_CALL_ID: usize = 128;

/// Gives every call an id unique in the conversation: the provider's, or a generated one
/// where it gave none (or repeated one, or one longer than [`MAX_CALL_ID`] or with a control
/// character).
pub(crate) fn name_calls(
    calls: Vec<Invocation>,
    conversation: &Conversation,
    iteration: u32,
) -> Vec<Invocation> {
    let mut seen: HashSet<String> = conversation
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Assistant { calls, .. } => Some(calls.iter().map(|c| c.id.clone())),
            _ => None,
        })
        .flatten()
        .collect();
    calls
        .into_iter()
        .enumerate()
        .map(|(index, mut call)| {
            // An id a store could not keep (a NUL: PostgreSQL's text) or that is not an id
            // at all is replaced too; the conversation holds the new one on both sides.
            let unfit = call.id.len() > MAX_CALL_ID || call.id.chars().any(char::is_control);
            if call.id.is_empty() || unfit || seen.contains(&call.id) {
                call.id = format!("toolhost_{iteration}_{index}");
            }
            seen.insert(call.id.clone());
            call
        })
        .collect()
}

/// The calls of one answer that the loop takes: at most `max_calls_per_answer`, and one more
/// that stands for all the others (it is refused, saying how many were left out). Returns
/// them with the number of calls the last one stands for (0 when none were left out).
pub(crate) fn at_most(mut calls: Vec<Invocation>, limits: &RunLimits) -> (Vec<Invocation>, usize) {
    let max = limits.max_calls_per_answer.max(1);
    if calls.len() <= max {
        return (calls, 0);
    }
    let dropped = calls.len() - max;
    tracing::warn!(
        "a model answer asked for {} tool calls; {max} run ([chat] max-calls-per-answer), the \
         other {dropped} are refused",
        calls.len()
    );
    calls.truncate(max + 1);
    (calls, dropped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_call_id_a_store_could_not_keep_is_replaced_and_a_fit_one_kept() {
        let calls = vec![
            Invocation::new("call_abc", "echo", json!({})),
            Invocation::new("bad\u{0}id", "echo", json!({})),
            Invocation::new("x".repeat(MAX_CALL_ID + 1), "echo", json!({})),
            Invocation::new("", "echo", json!({})),
            Invocation::new("call_abc", "echo", json!({})),
        ];
        let named = name_calls(calls, &Conversation::new(None), 3);
        let ids: Vec<&str> = named.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "call_abc",
                "toolhost_3_1",
                "toolhost_3_2",
                "toolhost_3_3",
                "toolhost_3_4"
            ]
        );
    }
}
