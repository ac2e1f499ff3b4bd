//! `prompted`: tool use for models without native tool calling, over the chat-completions
//! wire format.
//!
//! The tools are described in the system prompt; the model calls one by writing
//! `<tool>{"name": "...", "arguments": {...}}</tool>` in its text. Results go back in a user
//! message as `<tool_result>` blocks. A block that does not parse becomes a call with a
//! `problem`, which the loop returns to the model as an error. Streamed text reaches the
//! caller with the `<tool>` blocks held back.

use super::conversation::{Invocation, Message};
use super::{
    BoxFuture, ModelRequest, ModelTurn, OpenAi, Provider, ProviderError, TextSink, ToolChoice,
};
use serde_json::{Value, json};
use std::sync::Mutex;

const NAME: &str = "prompted";
const OPEN: &str = "<tool>";
const CLOSE: &str = "</tool>";

/// Tool calls written as text, for any chat-completions model.
#[derive(Debug)]
pub struct Prompted {
    inner: OpenAi,
}

impl Prompted {
    pub(crate) fn new(inner: OpenAi) -> Self {
        Prompted { inner }
    }
}

impl Provider for Prompted {
    fn name(&self) -> &'static str {
        NAME
    }

    fn retry(&self) -> super::RetryPolicy {
        self.inner.retry()
    }

    fn model(&self) -> &str {
        self.inner.model()
    }

    fn complete<'a>(
        &'a self,
        request: ModelRequest<'a>,
        on_text: TextSink<'a>,
    ) -> BoxFuture<'a, Result<ModelTurn, ProviderError>> {
        Box::pin(async move {
            let filter = Mutex::new(BlockFilter::default());
            let sink = |text: &str| {
                let visible = match filter.lock() {
                    Ok(mut f) => f.push(text),
                    Err(_) => String::new(),
                };
                if !visible.is_empty() {
                    on_text(&visible);
                }
            };
            let mut turn = self
                .inner
                .chat(
                    NAME,
                    wire_messages(request),
                    Vec::new(),
                    &ToolChoice::Auto,
                    &sink,
                )
                .await?;
            if let Ok(mut f) = filter.lock() {
                let rest = f.finish();
                if !rest.is_empty() {
                    on_text(&rest);
                }
            }
            let (text, calls) = parse_tool_blocks(&turn.text);
            turn.text = text;
            turn.calls = calls;
            Ok(turn)
        })
    }
}

/// The system prompt: the caller's, then the tools and how to call them.
fn system_prompt(request: ModelRequest<'_>) -> String {
    let mut prompt = String::new();
    if let Some(system) = request.system {
        prompt.push_str(system);
        prompt.push_str("\n\n");
    }
    if request.tools.is_empty() {
        prompt.push_str("No tools are available; answer directly.");
        return prompt;
    }
    prompt.push_str(
        "You can call tools. To call one, write a block like this, with the arguments as a \
         JSON object that matches the tool's schema:\n\
         <tool>{\"name\": \"TOOL_NAME\", \"arguments\": {...}}</tool>\n\
         You may write several blocks in one answer; they run together, and their results come \
         back in <tool_result> blocks in the next message. Do not write <tool_result> blocks \
         yourself. Answer without a block when you need no tool.\n\nTools:\n",
    );
    for tool in request.tools {
        prompt.push_str(&format!(
            "- {}: {}\n  arguments schema: {}\n",
            tool.name, tool.description, tool.parameters
        ));
    }
    // No wire field for the choice here: it is said in words.
    match request.tool_choice {
        ToolChoice::Auto => {}
        ToolChoice::Required => prompt.push_str("\nCall at least one tool in this answer.\n"),
        ToolChoice::None => prompt.push_str("\nDo not call a tool in this answer.\n"),
        ToolChoice::Tool(name) => {
            prompt.push_str(&format!("\nCall the tool `{name}` in this answer.\n"));
        }
    }
    prompt
}

/// The conversation as plain chat messages: calls written back as blocks, results as text.
fn wire_messages(request: ModelRequest<'_>) -> Vec<Value> {
    let mut out = vec![json!({ "role": "system", "content": system_prompt(request) })];
    for message in request.messages {
        match message {
            Message::User { text } => out.push(json!({ "role": "user", "content": text })),
            Message::Assistant { text, calls } => {
                let mut content = text.clone();
                for call in calls {
                    if !content.is_empty() {
                        content.push('\n');
                    }
                    let block = json!({ "name": call.name, "arguments": call.arguments });
                    content.push_str(&format!("{OPEN}{block}{CLOSE}"));
                }
                out.push(json!({ "role": "assistant", "content": content }));
            }
            Message::Results { results } => {
                let content: Vec<String> = results
                    .iter()
                    .map(|r| {
                        format!(
                            "<tool_result name=\"{}\" status=\"{}\">\n{}\n</tool_result>",
                            r.name,
                            if r.is_error { "error" } else { "ok" },
                            r.content
                        )
                    })
                    .collect();
                out.push(json!({ "role": "user", "content": content.join("\n") }));
            }
        }
    }
    out
}

/// Splits a model's text into the text outside `<tool>` blocks and the calls inside them.
/// A block that is not `{"name": string, "arguments": object or string}` becomes a call with
/// a `problem` that tells the model what to fix.
pub fn parse_tool_blocks(text: &str) -> (String, Vec<Invocation>) {
    let mut outside = String::new();
    let mut calls = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(OPEN) {
        outside.push_str(&rest[..start]);
        let after = &rest[start + OPEN.len()..];
        let (body, next) = match after.find(CLOSE) {
            Some(end) => (&after[..end], &after[end + CLOSE.len()..]),
            None => (after, ""),
        };
        let closed = after.contains(CLOSE);
        calls.push(parse_block(body, closed));
        rest = next;
    }
    outside.push_str(rest);
    (outside.trim().to_string(), calls)
}

fn parse_block(body: &str, closed: bool) -> Invocation {
    let mut call = Invocation::new("", "", Value::String(body.trim().to_string()));
    let problem = |message: String| {
        format!(
            "{message}. Write a call as <tool>{{\"name\": \"TOOL_NAME\", \"arguments\": {{...}}}}</tool>."
        )
    };
    if !closed {
        call.problem = Some(problem("a <tool> block was not closed with </tool>".into()));
        return call;
    }
    match serde_json::from_str::<Value>(body.trim()) {
        Err(e) => call.problem = Some(problem(format!("the <tool> block is not valid JSON ({e})"))),
        Ok(value) => match value.get("name").and_then(Value::as_str) {
            None => call.problem = Some(problem("the <tool> block has no \"name\" string".into())),
            Some(name) => {
                call.name = name.to_string();
                call.arguments = match value.get("arguments") {
                    None | Some(Value::Null) => json!({}),
                    Some(arguments) => arguments.clone(),
                };
            }
        },
    }
    call
}

/// Holds back streamed text that is, or may become, a `<tool>` block.
#[derive(Debug, Default)]
struct BlockFilter {
    held: String,
    inside: bool,
}

impl BlockFilter {
    /// Takes a delta; returns the text that can be shown now.
    fn push(&mut self, text: &str) -> String {
        self.held.push_str(text);
        let mut visible = String::new();
        loop {
            if self.inside {
                match self.held.find(CLOSE) {
                    Some(end) => {
                        self.held.drain(..end + CLOSE.len());
                        self.inside = false;
                    }
                    None => return visible,
                }
            } else if let Some(start) = self.held.find(OPEN) {
                visible.push_str(&self.held[..start]);
                self.held.drain(..start + OPEN.len());
                self.inside = true;
            } else {
                // Keep a tail that could be the start of `<tool>`.
                let keep = (1..OPEN.len())
                    .rev()
                    .find(|&n| self.held.ends_with(&OPEN[..n]))
                    .unwrap_or(0);
                let cut = self.held.len() - keep;
                visible.push_str(&self.held[..cut]);
                self.held.drain(..cut);
                return visible;
            }
        }
    }

    /// The stream ended: whatever is held outside a block is text after all.
    fn finish(&mut self) -> String {
        if self.inside {
            self.held.clear();
            String::new()
        } else {
            std::mem::take(&mut self.held)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_parse_and_bad_blocks_carry_a_problem() {
        let text = "I will add.\n<tool>{\"name\": \"calc\", \"arguments\": {\"e\": \"1+1\"}}</tool>\n<tool>{\"name\": \"x\", \"arguments\": \"{\\\"a\\\":1}\"}</tool><tool>{name: calc}</tool> done <tool>{\"name\":\"y\"";
        let (outside, calls) = parse_tool_blocks(text);
        assert_eq!(outside, "I will add.\n\n done");
        assert_eq!(calls.len(), 4);
        assert_eq!(calls[0].name, "calc");
        assert_eq!(calls[0].arguments, json!({"e": "1+1"}));
        assert_eq!(calls[1].arguments, json!("{\"a\":1}"));
        assert!(
            calls[2]
                .problem
                .as_ref()
                .unwrap()
                .contains("not valid JSON")
        );
        assert!(calls[3].problem.as_ref().unwrap().contains("not closed"));
    }

    #[test]
    fn the_stream_filter_hides_blocks_split_anywhere() {
        let text = "A <b> x<tool>{\"name\":\"t\"}</tool> after <to";
        for size in 1..6 {
            let mut filter = BlockFilter::default();
            let mut shown = String::new();
            let chars: Vec<char> = text.chars().collect();
            for chunk in chars.chunks(size) {
                shown.push_str(&filter.push(&chunk.iter().collect::<String>()));
            }
            shown.push_str(&filter.finish());
            assert_eq!(shown, "A <b> x after <to", "chunks of {size}");
        }
    }
}
