//! The host's own log messages, relayed to MCP sessions as `notifications/message`.
//!
//! [`LogRelay`] is a `tracing` layer: it forwards the events of the host (`toolhost::*`) to
//! every session that subscribed, and the events of plugins (`plugin`) only to the session
//! whose call made them (their `session` field), at or above the level each session set with
//! `logging/setLevel` (warning until it does). A plugin line that belongs to no session (a
//! component's load, an imported server's stderr) goes to none: it may carry another caller's
//! data. Other crates' events (rmcp's own among them) are not relayed, so relaying never
//! feeds on itself.

// See the note in `mcp`: logging is deprecated only by a revision this server does not speak.
#![allow(deprecated)]

use rmcp::RoleServer;
use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use rmcp::service::Peer;
use serde_json::Value;
use std::fmt::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use tokio::sync::broadcast;
use tokio::task::AbortHandle;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::Context;

/// One relayed message.
#[derive(Debug, Clone)]
pub struct LogRecord {
    pub level: LoggingLevel,
    pub target: String,
    pub message: String,
    /// For a plugin's line, the session whose call made it (`None`: no session may see it).
    /// `None` for the host's own lines, which every session sees.
    pub session: Option<String>,
}

impl LogRecord {
    /// Whether the session `id` may see this record.
    pub fn visible_to(&self, id: &str) -> bool {
        if self.target != "plugin" {
            return true;
        }
        self.session
            .as_deref()
            .is_some_and(|s| !s.is_empty() && s == id)
    }
}

/// The `tracing` layer that feeds sessions. Clones share the channel.
#[derive(Debug, Clone)]
pub struct LogRelay {
    sender: broadcast::Sender<LogRecord>,
}

impl Default for LogRelay {
    fn default() -> Self {
        LogRelay {
            sender: broadcast::channel(256).0,
        }
    }
}

impl LogRelay {
    /// Receives every relayed message from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<LogRecord> {
        self.sender.subscribe()
    }
}

/// Maps a `tracing` level to MCP's (syslog's) levels.
pub(crate) fn mcp_level(level: &Level) -> LoggingLevel {
    match *level {
        Level::ERROR => LoggingLevel::Error,
        Level::WARN => LoggingLevel::Warning,
        Level::INFO => LoggingLevel::Info,
        _ => LoggingLevel::Debug,
    }
}

/// Orders MCP levels from least to most severe.
pub(crate) fn severity(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

#[derive(Default)]
struct MessageVisitor {
    message: String,
    fields: String,
    session: Option<String>,
}

impl Visit for MessageVisitor {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => {
                let _ = write!(self.message, "{value:?}");
            }
            "session" => self.session = Some(format!("{value:?}")),
            name => {
                let _ = write!(self.fields, " {name}={value:?}");
            }
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => self.message.push_str(value),
            "session" => self.session = Some(value.to_string()),
            name => {
                let _ = write!(self.fields, " {name}={value}");
            }
        }
    }
}

/// Whether lines of this target are relayed to MCP clients: the host's own (every crate of it,
/// `toolhost_core::invoke` and the like) and plugins' (`plugin`), no library's.
pub fn relayed(target: &str) -> bool {
    target == "plugin"
        || target == "toolhost"
        || target.starts_with("toolhost::")
        || target.starts_with("toolhost_")
}

impl<S: Subscriber> tracing_subscriber::Layer<S> for LogRelay {
    fn on_event(&self, event: &Event<'_>, _context: Context<'_, S>) {
        let target = event.metadata().target();
        if !relayed(target) || self.sender.receiver_count() == 0 {
            return;
        }
        let mut visitor = MessageVisitor::default();
        event.record(&mut visitor);
        let message = format!("{}{}", visitor.message, visitor.fields);
        let record = LogRecord {
            level: mcp_level(event.metadata().level()),
            target: target.to_string(),
            message,
            session: visitor.session,
        };
        // No session listening is fine.
        let _ = self.sender.send(record);
    }
}

/// Sends each relayed log message this session may see (the host's, and its own calls'
/// plugin lines) at or above the session's level, until the session ends or the task is
/// aborted.
pub(crate) fn relay_logs(
    mut records: broadcast::Receiver<LogRecord>,
    peer: Peer<RoleServer>,
    level: Arc<AtomicU8>,
    session: String,
) -> AbortHandle {
    let relay = tokio::spawn(async move {
        loop {
            let record = match records.recv().await {
                Ok(record) => record,
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return,
            };
            if severity(record.level) < level.load(Ordering::Relaxed)
                || !record.visible_to(&session)
            {
                continue;
            }
            let param =
                LoggingMessageNotificationParam::new(record.level, Value::String(record.message))
                    .with_logger(record.target);
            let sent = peer.notify_logging_message(param).await;
            if sent.is_err() {
                return; // The session is gone.
            }
        }
    });
    relay.abort_handle()
}
