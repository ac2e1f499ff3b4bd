//! `CallState`: what one call's `Store` holds — the WASI context of its capabilities, the
//! memory limiter, the budget of `host.log` messages and of talking back to the caller — and
//! the `host` import of every plugin version.

use super::bindings::since_v0_1_0::{Host, LogLevel, TypesHost};
use super::bindings::since_v0_2_0::host as v2;
use super::bindings::since_v0_3_0::host as v3;
use super::talk::{self, TalkBudget};
use crate::sandbox::NetworkGuard;
use toolhost_contract::{ANSWER_BYTES, AskError, ElicitAnswer, Progress, Role, SamplingRequest};
use wasmtime::ResourceLimiter;
use wasmtime_wasi::{ResourceTable, WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

/// A plugin may log this many messages per call; the rest are counted and dropped.
const LOG_MESSAGES_PER_CALL: u32 = 100;
/// Longer messages are cut to this many bytes.
const LOG_MESSAGE_BYTES: usize = 4096;

pub(crate) struct CallState {
    pub(crate) wasi: WasiCtx,
    pub(crate) table: ResourceTable,
    pub(crate) limiter: CallLimiter,
    pub(crate) log: LogBudget,
    /// What is left of the call's progress reports and questions, and the way to its caller.
    pub(crate) talk: TalkBudget,
    pub(crate) http: WasiHttpCtx,
    /// Checks and sends the call's outgoing HTTP requests.
    pub(crate) network: NetworkGuard,
    /// What `wasi:config/store` answers (`0.2.0-rc.1`, by wasmtime-wasi-config): the settings
    /// the invoker was granted, nothing else.
    pub(crate) config: wasmtime_wasi_config::WasiConfigVariables,
    /// The same settings, for `wasi:config/store@0.2.0-draft` (`settings`).
    pub(crate) settings: std::collections::HashMap<String, String>,
}

impl WasiHttpView for CallState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.network,
        }
    }
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Refuses memory growth that would take the call's memories, all of them together, past the
/// invoker's limit, and remembers that it did, so that the trap that usually follows (Rust
/// aborts on allocation failure) is reported as a limit. A component with several memories
/// shares one `memory-mib` among them.
pub(crate) struct CallLimiter {
    memory_bytes: usize,
    /// Bytes of every memory of the call so far.
    in_use: usize,
    pub(crate) memory_refused: bool,
}

impl CallLimiter {
    pub(crate) fn new(memory_bytes: usize) -> Self {
        CallLimiter {
            memory_bytes,
            in_use: 0,
            memory_refused: false,
        }
    }

    /// Bytes of the instance's linear memories now.
    pub(crate) fn in_use(&self) -> usize {
        self.in_use
    }
}

impl ResourceLimiter for CallLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let after = self.in_use.saturating_sub(current).saturating_add(desired);
        if after > self.memory_bytes {
            self.memory_refused = true;
            return Ok(false);
        }
        self.in_use = after;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= super::engine::TABLE_ELEMENTS)
    }
}

/// The `host.log` budget of one call, tagged with the invoker's name and the caller's
/// session (the only session its lines are relayed to).
pub(crate) struct LogBudget {
    invoker: String,
    session: String,
    remaining: u32,
    pub(crate) dropped: u32,
}

impl LogBudget {
    /// The budget of a call for `caller`; none at all when the invoker's `log` is taken away.
    pub(crate) fn new(caller: super::Caller<'_>, granted: bool) -> Self {
        LogBudget {
            invoker: caller.invoker.to_string(),
            session: caller.session.to_string(),
            remaining: if granted { LOG_MESSAGES_PER_CALL } else { 0 },
            dropped: 0,
        }
    }
}

impl Host for CallState {
    fn log(&mut self, level: LogLevel, message: String) {
        self.write_log(level, message);
    }
}

impl CallState {
    /// One `host.log` line of any plugin version, within the call's budget.
    fn write_log(&mut self, level: LogLevel, mut message: String) {
        let budget = &mut self.log;
        if budget.remaining == 0 {
            budget.dropped = budget.dropped.saturating_add(1);
            return;
        }
        budget.remaining -= 1;
        if message.len() > LOG_MESSAGE_BYTES {
            message.truncate(message.floor_char_boundary(LOG_MESSAGE_BYTES));
            message.push_str(" [cut]");
        }
        let (invoker, session) = (budget.invoker.as_str(), budget.session.as_str());
        match level {
            LogLevel::Trace => tracing::trace!(target: "plugin", invoker, session, "{message}"),
            LogLevel::Debug => tracing::debug!(target: "plugin", invoker, session, "{message}"),
            LogLevel::Info => tracing::info!(target: "plugin", invoker, session, "{message}"),
            LogLevel::Warn => tracing::warn!(target: "plugin", invoker, session, "{message}"),
            LogLevel::Error => tracing::error!(target: "plugin", invoker, session, "{message}"),
        }
    }
}

/// The `types` interfaces have no functions; the bindings still want them implemented.
impl TypesHost for CallState {}
impl super::bindings::since_v0_2_0::types::Host for CallState {}
impl super::bindings::since_v0_3_0::types::Host for CallState {}

/// The `host` interface of 0.2.0 and later: the same functions in each version, whose types
/// wasmtime makes distinct, so the implementation is written once and made for each.
macro_rules! talk_back_host {
    ($v:ident) => {
        impl From<AskError> for $v::AskError {
            fn from(error: AskError) -> Self {
                match error {
                    AskError::NotGranted(m) => $v::AskError::NotGranted(m),
                    AskError::Unsupported(m) => $v::AskError::Unsupported(m),
                    AskError::LimitReached(m) => $v::AskError::LimitReached(m),
                    AskError::Failed(m) => $v::AskError::Failed(m),
                }
            }
        }

        impl $v::Host for CallState {
            async fn log(&mut self, level: $v::LogLevel, message: String) {
                let level = match level {
                    $v::LogLevel::Trace => LogLevel::Trace,
                    $v::LogLevel::Debug => LogLevel::Debug,
                    $v::LogLevel::Info => LogLevel::Info,
                    $v::LogLevel::Warn => LogLevel::Warn,
                    $v::LogLevel::Error => LogLevel::Error,
                };
                self.write_log(level, message);
            }

            async fn progress(&mut self, done: f64, total: Option<f64>, message: Option<String>) {
                let report = Progress {
                    done,
                    total,
                    message,
                };
                if let Some(report) = self.talk.progress(report) {
                    self.talk.link.progress(report).await;
                }
            }

            async fn sample(
                &mut self,
                request: $v::SamplingRequest,
            ) -> Result<$v::SamplingResponse, $v::AskError> {
                let request = SamplingRequest {
                    messages: request
                        .messages
                        .into_iter()
                        .map(|m| {
                            let role = match m.role {
                                $v::Role::User => Role::User,
                                $v::Role::Assistant => Role::Assistant,
                            };
                            (role, m.text)
                        })
                        .collect(),
                    system_prompt: request.system_prompt,
                    max_tokens: request.max_tokens,
                    temperature: request.temperature,
                    model_hints: request.model_hints,
                };
                let request = self.talk.sample(request).map_err($v::AskError::from)?;
                let mut answer = self
                    .talk
                    .link
                    .sample(request)
                    .await
                    .map_err($v::AskError::from)?;
                talk::cut(&mut answer.text, ANSWER_BYTES);
                talk::cut(&mut answer.model, toolhost_contract::MESSAGE_BYTES);
                Ok($v::SamplingResponse {
                    text: answer.text,
                    model: answer.model,
                    stop_reason: answer.stop_reason.map(|mut reason| {
                        talk::cut(&mut reason, toolhost_contract::MESSAGE_BYTES);
                        reason
                    }),
                })
            }

            async fn elicit(
                &mut self,
                message: String,
                requested_schema: String,
            ) -> Result<$v::ElicitAnswer, $v::AskError> {
                let (message, schema) = self
                    .talk
                    .elicit(message, &requested_schema)
                    .map_err($v::AskError::from)?;
                match self
                    .talk
                    .link
                    .elicit(message, schema.clone())
                    .await
                    .map_err($v::AskError::from)?
                {
                    ElicitAnswer::Accept(value) => {
                        let text = value.to_string();
                        if text.len() > ANSWER_BYTES {
                            return Err($v::AskError::LimitReached(format!(
                                "the answer has {} bytes, more than the {} a call is given",
                                text.len(),
                                ANSWER_BYTES
                            )));
                        }
                        talk::check_answer(&schema, &value).map_err($v::AskError::from)?;
                        Ok($v::ElicitAnswer::Accept(text))
                    }
                    ElicitAnswer::Decline => Ok($v::ElicitAnswer::Decline),
                    ElicitAnswer::Cancel => Ok($v::ElicitAnswer::Cancel),
                }
            }
        }
    };
}

talk_back_host!(v2);
talk_back_host!(v3);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memories_of_a_call_share_one_limit() {
        let mut limiter = CallLimiter::new(64 << 20);
        // Two memories of 40 MiB each: the first fits, the second would pass 64 MiB in all.
        assert!(limiter.memory_growing(0, 40 << 20, None).unwrap());
        assert!(!limiter.memory_growing(0, 40 << 20, None).unwrap());
        assert!(limiter.memory_refused);
        // Growing the first within the limit still works.
        assert!(limiter.memory_growing(40 << 20, 60 << 20, None).unwrap());
        assert!(!limiter.memory_growing(60 << 20, 65 << 20, None).unwrap());
    }
}
