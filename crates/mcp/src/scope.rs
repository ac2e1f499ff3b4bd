//! Which earlier calls an MCP call may be answered from: dedup's scope, now that the
//! 2026-07-28 revision has no sessions.
//!
//! The rule (docs/mcp-clients.md, "Using it from an MCP client"; docs/decisions.md):
//!
//! - A request whose `_meta` carries [`CONVERSATION_KEY`] belongs to that conversation, among
//!   the requests of the same identity: over HTTP the identity the guard found (every token
//!   of one identity alike; every loopback client is one party, the local operator, when it
//!   presents no token), the same connection over stdio.
//!   The id is a secret the client makes up, at least [`MIN_ID_CHARS`] characters (a UUID);
//!   it is hashed with the credentials, never stored or logged as it is.
//! - Without one: the MCP session (2025-11-25 and older, over HTTP), the connection (stdio,
//!   either revision), and nothing else: a 2026-07-28 request over HTTP without a
//!   conversation id is answered only from its own call.
//!
//! So a call is never answered from another party's results: two clients share results only
//! when they are the same identity and hold the same secret conversation id.
//!
//! Conversations are kept in memory per host (per replica), at most [`MAX_CONVERSATIONS`];
//! one unused for the idle time is forgotten first when the table is full, and otherwise the
//! least recently used. What each remembers is bounded by the host's dedup budget. In a
//! fleet (`[fleet] redis`) a conversation's results are also shared with the other replicas
//! under the same key (toolhost-state's `dedup`), so that any replica answers from them.

use rmcp::ErrorData;
use rmcp::model::JsonObject;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use toolhost_core::invoke::{Caller, Host, Session};

/// The request `_meta` key naming a conversation.
pub const CONVERSATION_KEY: &str = "io.toolhost/conversation";
/// The shortest conversation id taken: about 96 random bits in any common alphabet.
pub const MIN_ID_CHARS: usize = 16;
/// The longest conversation id taken.
pub const MAX_ID_CHARS: usize = 128;
/// Conversations a host keeps (each with its own dedup memory) before forgetting one.
pub const MAX_CONVERSATIONS: usize = 4096;

/// The conversation id in a request's `_meta`: `None` without one, an `invalid params`
/// error (naming the key and the rule) for one that is not a string of 16 to 128 visible
/// ASCII characters.
pub fn conversation_id(meta: &JsonObject) -> Result<Option<&str>, ErrorData> {
    let Some(value) = meta.get(CONVERSATION_KEY) else {
        return Ok(None);
    };
    let id = match value {
        Value::String(id) => id.as_str(),
        _ => return Err(bad_id("is not a string")),
    };
    let chars = id.chars().count();
    if !(MIN_ID_CHARS..=MAX_ID_CHARS).contains(&chars) {
        return Err(bad_id(&format!("has {chars} characters")));
    }
    if !id.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(bad_id("has characters other than visible ASCII"));
    }
    Ok(Some(id))
}

fn bad_id(what: &str) -> ErrorData {
    ErrorData::invalid_params(
        format!(
            "_meta[\"{CONVERSATION_KEY}\"] {what}: a conversation id is a secret of \
             {MIN_ID_CHARS} to {MAX_ID_CHARS} visible ASCII characters (a random UUID will do)"
        ),
        None,
    )
}

struct Entry {
    session: Arc<Session>,
    used: Instant,
}

/// The conversations of one party set: every HTTP client of a host (told apart by their
/// credentials), or one stdio connection.
pub struct Conversations {
    /// Names the sessions in audit records: `<prefix>-conv-<hash>`.
    prefix: String,
    idle: Duration,
    capacity: usize,
    entries: Mutex<HashMap<[u8; 32], Entry>>,
}

impl Conversations {
    /// Conversations named `<prefix>-conv-...`, forgotten first once unused for `idle`.
    pub fn new(prefix: impl Into<String>, idle: Duration) -> Self {
        Conversations::with_capacity(prefix, idle, MAX_CONVERSATIONS)
    }

    fn with_capacity(prefix: impl Into<String>, idle: Duration, capacity: usize) -> Self {
        Conversations {
            prefix: prefix.into(),
            idle,
            capacity: capacity.max(1),
            entries: Mutex::default(),
        }
    }

    /// The session of conversation `id` among the requests that present `credentials`.
    pub fn session(
        &self,
        host: &Host,
        credentials: &[u8],
        id: &str,
        caller: Option<Caller>,
    ) -> Arc<Session> {
        let mut hasher = blake3::Hasher::new();
        // Lengths first, so that no two (credentials, id) pairs hash the same bytes.
        hasher.update(&(credentials.len() as u64).to_le_bytes());
        hasher.update(credentials);
        hasher.update(id.as_bytes());
        let key = *hasher.finalize().as_bytes();
        let now = Instant::now();
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = entries.get_mut(&key) {
            entry.used = now;
            if let Some(caller) = &caller {
                entry.session.follow(caller);
            }
            return Arc::clone(&entry.session);
        }
        if entries.len() >= self.capacity {
            self.make_room(&mut entries, now);
        }
        let name = format!(
            "{}-conv-{}",
            self.prefix,
            &blake3::Hash::from(key).to_hex()[..12]
        );
        let mut session = host.session(name, Default::default());
        if let Some(shared) = host.shared_dedup() {
            // The fleet's replicas meet under the same key: the identity and the id.
            session = session.share_dedup(Arc::clone(shared), key);
        }
        let session = Arc::new(match caller {
            Some(caller) => session.for_caller(caller),
            None => session,
        });
        entries.insert(
            key,
            Entry {
                session: Arc::clone(&session),
                used: now,
            },
        );
        session
    }

    /// Forgets every conversation idle for longer than the idle time, or, when none is, the
    /// least recently used one. Runs only when the table is full, so each new conversation
    /// pays at most one pass.
    fn make_room(&self, entries: &mut HashMap<[u8; 32], Entry>, now: Instant) {
        let before = entries.len();
        entries.retain(|_, entry| now.duration_since(entry.used) < self.idle);
        if entries.len() < before {
            return;
        }
        let oldest = entries
            .iter()
            .min_by_key(|(_, entry)| entry.used)
            .map(|(key, _)| *key);
        if let Some(oldest) = oldest {
            entries.remove(&oldest);
        }
    }

    /// Conversations kept now.
    pub fn len(&self) -> usize {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolhost_core::catalog::LiveCatalog;

    fn host() -> Host {
        Host::new(Arc::new(LiveCatalog::default()), None)
    }

    fn meta(value: Value) -> JsonObject {
        let mut meta = JsonObject::new();
        meta.insert(CONVERSATION_KEY.into(), value);
        meta
    }

    #[test]
    fn ids_are_read_and_bad_ones_refused_with_the_rule() {
        assert_eq!(conversation_id(&JsonObject::new()).ok(), Some(None));
        let id = "0b0d3c1e-5c1f-4bd4-9a0c-6f1f0c4d2a77";
        assert_eq!(
            conversation_id(&meta(Value::String(id.into()))).ok(),
            Some(Some(id))
        );
        for bad in [
            Value::from(7),
            Value::String("short".into()),
            Value::String("x".repeat(MAX_ID_CHARS + 1)),
            Value::String("has a space in the middle".into()),
        ] {
            let error = conversation_id(&meta(bad.clone())).expect_err("refused");
            assert!(
                error.message.contains(CONVERSATION_KEY) && error.message.contains("16 to 128"),
                "{bad}: {}",
                error.message
            );
        }
    }

    #[test]
    fn the_same_id_under_other_credentials_is_another_conversation() {
        let host = host();
        let conversations = Conversations::new("t", Duration::from_secs(60));
        let id = "a-conversation-id-0001";
        let mine = conversations.session(&host, b"token-a", id, None);
        assert!(Arc::ptr_eq(
            &mine,
            &conversations.session(&host, b"token-a", id, None)
        ));
        let theirs = conversations.session(&host, b"token-b", id, None);
        assert!(!Arc::ptr_eq(&mine, &theirs));
        let other = conversations.session(&host, b"token-a", "a-conversation-id-0002", None);
        assert!(!Arc::ptr_eq(&mine, &other));
        // Credentials and id are not simply joined: moving bytes between them changes the key.
        let shifted = conversations.session(&host, b"token-a-", "conversation-id-0001", None);
        assert!(!Arc::ptr_eq(&mine, &shifted));
        assert!(
            !mine.id.contains(id),
            "the secret id is not in the session name"
        );
    }

    #[test]
    fn a_full_table_forgets_the_least_recently_used() {
        let host = host();
        let conversations = Conversations::with_capacity("t", Duration::from_secs(3600), 3);
        let ids: Vec<String> = (0..4).map(|n| format!("conversation-number-{n}")).collect();
        let tick = || std::thread::sleep(Duration::from_millis(2));
        let first = conversations.session(&host, b"", &ids[0], None);
        tick();
        let second = conversations.session(&host, b"", &ids[1], None);
        tick();
        conversations.session(&host, b"", &ids[2], None);
        tick();
        // The first is used again, so the second is now the least recently used.
        conversations.session(&host, b"", &ids[0], None);
        conversations.session(&host, b"", &ids[3], None);
        assert_eq!(conversations.len(), 3);
        assert!(Arc::ptr_eq(
            &first,
            &conversations.session(&host, b"", &ids[0], None)
        ));
        assert!(!Arc::ptr_eq(
            &second,
            &conversations.session(&host, b"", &ids[1], None)
        ));
    }
}
