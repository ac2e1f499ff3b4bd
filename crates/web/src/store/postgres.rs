//! postgres: the chat database on PostgreSQL, shared by every replica of a fleet. The same
//! rows as SQLite's, in tables named `toolhost_*` that the host makes at start (numbered
//! steps, run once per database under a lock: replicas starting together make them once).
//!
//! The bounds hold for the whole database, whichever replica writes: a new conversation is
//! counted under a transaction lock (two replicas cannot both add the last one), and the
//! bytes in use are the sum of each conversation's `bytes` (its messages, its tools and its
//! log as stored), kept up to date in the transaction that writes them.

use super::{Owner, RunRecord, StoreError, StoreLimits, Stored, Summary, order};
use serde_json::Value;
use std::sync::Arc;
use toolhost_agent::provider::conversation::Conversation;
use toolhost_state::postgres::{Client, Failed, Postgres};

/// The tables, step by step. A shipped step never changes: a new one is added.
const STEPS: &[&str] = &["
CREATE TABLE toolhost_conversations (
    id TEXT PRIMARY KEY,
    owner TEXT,
    title TEXT NOT NULL,
    created TEXT NOT NULL,
    updated TEXT NOT NULL,
    updated_order BIGINT NOT NULL,
    made BIGSERIAL,
    conversation TEXT NOT NULL,
    allowed_tools TEXT NOT NULL DEFAULT '[]',
    pending_question TEXT,
    bytes BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX toolhost_conversations_by_owner
    ON toolhost_conversations (owner, updated_order DESC);
CREATE TABLE toolhost_log (
    conversation TEXT NOT NULL REFERENCES toolhost_conversations (id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    event TEXT NOT NULL,
    PRIMARY KEY (conversation, seq)
);
"];

/// The transaction lock new conversations are counted under ("chatnew" in ASCII).
const CREATE_LOCK: i64 = 0x63_6861_746e_6577;

/// The chat's tables on one PostgreSQL.
#[derive(Debug)]
pub struct PgStore {
    engine: Arc<Postgres>,
    limits: StoreLimits,
    /// Set once the tables are known to be made (at start, or at the first request that
    /// reached PostgreSQL).
    migrated: tokio::sync::OnceCell<()>,
}

impl PgStore {
    pub(super) fn new(engine: Arc<Postgres>, limits: StoreLimits) -> Self {
        PgStore {
            engine,
            limits,
            migrated: tokio::sync::OnceCell::new(),
        }
    }

    pub(super) fn shown(&self) -> &str {
        self.engine.shown()
    }

    /// The tables made, once.
    pub(super) async fn migrated(&self) -> Result<(), StoreError> {
        self.migrated
            .get_or_try_init(|| async {
                let made = self.engine.migrate(STEPS).await;
                made.map_err(|e| StoreError::Unavailable(e.0))
            })
            .await
            .map(|_| ())
    }

    /// Runs `work` once the tables are there, bounded, with the engine's health noted.
    async fn with<T>(
        &self,
        what: &str,
        work: impl AsyncFnOnce(&mut Client) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.migrated().await?;
        self.engine.run(what, work).await.map_err(|f| match f {
            Failed::Unavailable(why) => StoreError::Unavailable(why.0),
            Failed::Work(e) => e,
        })
    }

    pub(super) async fn list(&self, owner: Owner<'_>) -> Result<Vec<Summary>, StoreError> {
        self.with("list conversations", async |c: &mut Client| {
            let rows = c
                .query(
                    "SELECT id, title, created, updated FROM toolhost_conversations \
                     WHERE owner IS NOT DISTINCT FROM $1 ORDER BY updated_order DESC, made DESC",
                    &[&owner],
                )
                .await?;
            Ok(rows
                .iter()
                .map(|row| Summary {
                    id: row.get(0),
                    title: row.get(1),
                    created: row.get(2),
                    updated: row.get(3),
                })
                .collect())
        })
        .await
    }

    pub(super) async fn has_room(&self) -> Result<(), StoreError> {
        let max = self.limits.max_bytes;
        self.with("measure itself", async |c: &mut Client| room(c, max).await)
            .await
    }

    pub(super) async fn create(
        &self,
        id: &str,
        title: &str,
        conversation: &Conversation,
        owner: Owner<'_>,
    ) -> Result<Summary, StoreError> {
        let text = serde_json::to_string(conversation)?;
        let (max, max_bytes) = (self.limits.max_conversations, self.limits.max_bytes);
        self.with("add a conversation", async |c: &mut Client| {
            let transaction = c.transaction().await?;
            transaction
                .execute("SELECT pg_advisory_xact_lock($1)", &[&CREATE_LOCK])
                .await?;
            room(&transaction, max_bytes).await?;
            let count: i64 = transaction
                .query_one("SELECT count(*) FROM toolhost_conversations", &[])
                .await?
                .get(0);
            if count as usize >= max {
                return Err(StoreError::Full(max));
            }
            let now = toolhost_audit::now_rfc3339();
            transaction
                .execute(
                    "INSERT INTO toolhost_conversations \
                     (id, title, created, updated, updated_order, conversation, owner, bytes) \
                     VALUES ($1, $2, $3, $3, $4, $5, $6, octet_length($5))",
                    &[&id, &title, &now, &order(), &text, &owner],
                )
                .await?;
            transaction.commit().await?;
            Ok(Summary {
                id: id.to_string(),
                title: title.to_string(),
                created: now.clone(),
                updated: now,
            })
        })
        .await
    }

    pub(super) async fn owns(&self, id: &str, owner: Owner<'_>) -> Result<bool, StoreError> {
        self.with("find a conversation", async |c: &mut Client| {
            let row = c
                .query_opt(
                    "SELECT 1 FROM toolhost_conversations \
                     WHERE id = $1 AND owner IS NOT DISTINCT FROM $2",
                    &[&id, &owner],
                )
                .await?;
            Ok(row.is_some())
        })
        .await
    }

    pub(super) async fn sizes(
        &self,
        id: &str,
        owner: Owner<'_>,
    ) -> Result<Option<(u64, u64)>, StoreError> {
        self.with("measure a conversation", async |c: &mut Client| {
            let row = c
                .query_opt(
                    "SELECT octet_length(conversation)::BIGINT, \
                     (SELECT coalesce(sum(octet_length(event)), 0)::BIGINT FROM toolhost_log \
                      WHERE conversation = $1) \
                     FROM toolhost_conversations WHERE id = $1 AND owner IS NOT DISTINCT FROM $2",
                    &[&id, &owner],
                )
                .await?;
            Ok(row.map(|row| {
                let (messages, log): (i64, i64) = (row.get(0), row.get(1));
                (messages.max(0) as u64, log.max(0) as u64)
            }))
        })
        .await
    }

    pub(super) async fn get(
        &self,
        id: &str,
        owner: Owner<'_>,
    ) -> Result<Option<Stored>, StoreError> {
        self.with("read a conversation", async |c: &mut Client| {
            let Some(row) = c
                .query_opt(
                    "SELECT title, created, updated, conversation, allowed_tools, \
                     pending_question FROM toolhost_conversations \
                     WHERE id = $1 AND owner IS NOT DISTINCT FROM $2",
                    &[&id, &owner],
                )
                .await?
            else {
                return Ok(None);
            };
            let log = c
                .query(
                    "SELECT event FROM toolhost_log WHERE conversation = $1 ORDER BY seq",
                    &[&id],
                )
                .await?
                .iter()
                .map(|event| Ok(serde_json::from_str(event.get::<_, &str>(0))?))
                .collect::<Result<Vec<Value>, StoreError>>()?;
            Ok(Some(Stored {
                summary: Summary {
                    id: id.to_string(),
                    title: row.get(0),
                    created: row.get(1),
                    updated: row.get(2),
                },
                conversation: serde_json::from_str(row.get::<_, &str>(3))?,
                log,
                allowed_tools: serde_json::from_str(row.get::<_, &str>(4))?,
                pending_question: row.get(5),
            }))
        })
        .await
    }

    pub(super) async fn save_run(&self, id: &str, run: &RunRecord) -> Result<bool, StoreError> {
        let conversation = serde_json::to_string(&run.conversation)?;
        let allowed = serde_json::to_string(&run.allowed_tools)?;
        let events = run
            .log
            .iter()
            .map(serde_json::to_string)
            .collect::<Result<Vec<_>, _>>()?;
        let max_bytes = self.limits.max_bytes;
        self.with("keep a run", async |c: &mut Client| {
            // Past the size bound (runs that started before it was reached), the conversation
            // is kept and its log is not: the overshoot is at most one conversation a run.
            let full = match room(c, max_bytes).await {
                Ok(()) => None,
                Err(e @ StoreError::DatabaseFull { .. }) => Some(e),
                Err(e) => return Err(e),
            };
            let transaction = c.transaction().await?;
            // The row is locked from here to the commit: a run of the same conversation
            // ending on another replica appends its log after this one's.
            let changed = transaction
                .execute(
                    "UPDATE toolhost_conversations SET updated = $2, updated_order = $3, \
                     conversation = $4, allowed_tools = $5, pending_question = $6 WHERE id = $1",
                    &[
                        &id,
                        &toolhost_audit::now_rfc3339(),
                        &order(),
                        &conversation,
                        &allowed,
                        &run.pending_question,
                    ],
                )
                .await?;
            if changed == 0 {
                return Ok(false);
            }
            let next: i32 = transaction
                .query_one(
                    "SELECT coalesce(max(seq), -1) + 1 FROM toolhost_log WHERE conversation = $1",
                    &[&id],
                )
                .await?
                .get(0);
            let insert = transaction
                .prepare("INSERT INTO toolhost_log (conversation, seq, event) VALUES ($1, $2, $3)")
                .await?;
            if let Some(full) = &full {
                let note = serde_json::json!({
                    "type": "error",
                    "message": format!("this run's log was not kept: {full}"),
                });
                transaction
                    .execute(&insert, &[&id, &next, &note.to_string()])
                    .await?;
            } else {
                for (offset, event) in events.iter().enumerate() {
                    let seq = next.saturating_add(offset as i32);
                    transaction.execute(&insert, &[&id, &seq, event]).await?;
                }
            }
            transaction
                .execute(
                    "UPDATE toolhost_conversations SET bytes = octet_length(conversation) + \
                     octet_length(allowed_tools) + (SELECT coalesce(sum(octet_length(event)), 0) \
                     FROM toolhost_log WHERE conversation = $1) WHERE id = $1",
                    &[&id],
                )
                .await?;
            transaction.commit().await?;
            Ok(true)
        })
        .await
    }

    pub(super) async fn delete(&self, id: &str, owner: Owner<'_>) -> Result<bool, StoreError> {
        self.with("delete a conversation", async |c: &mut Client| {
            // Its log goes with it (ON DELETE CASCADE).
            let deleted = c
                .execute(
                    "DELETE FROM toolhost_conversations \
                     WHERE id = $1 AND owner IS NOT DISTINCT FROM $2",
                    &[&id, &owner],
                )
                .await?;
            Ok(deleted > 0)
        })
        .await
    }
}

/// Ok while the conversations use no more than `max` bytes as stored.
async fn room(
    c: &impl toolhost_state::postgres::GenericClient,
    max: u64,
) -> Result<(), StoreError> {
    let used: i64 = c
        .query_one(
            "SELECT coalesce(sum(bytes), 0)::BIGINT FROM toolhost_conversations",
            &[],
        )
        .await?
        .get(0);
    let used = used.max(0) as u64;
    if used > max {
        return Err(StoreError::DatabaseFull { used, max });
    }
    Ok(())
}
