//! The chat database: where conversations are kept, so that a restart keeps them, and so
//! that, on PostgreSQL, every replica of a fleet serves every conversation. Two engines behind
//! one interface ([`Store`], asked from the async threads): SQLite in a file of this host
//! ([`sqlite`], the default: nothing to run) and PostgreSQL when `[chat] database` names one
//! ([`postgres`]). The API never knows which answers.
//!
//! A conversation is its row (title, times, owner, the canonical [`Conversation`] as JSON,
//! the tools "allowed for all" and the question its last run ended with) and its log: the
//! events of its runs, one row each, in order, which is what the page shows.

mod postgres;
pub mod sqlite;
#[cfg(test)]
mod sqlite_tests;

use serde::Serialize;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use toolhost_agent::provider::conversation::Conversation;
use toolhost_state::postgres::Postgres;

/// Why the database could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("the chat database {path}: {message}")]
    Open { path: PathBuf, message: String },
    #[error("the chat database: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// PostgreSQL refused a statement (the engine answers: a bug or a constraint, not an
    /// outage).
    #[error("the chat database: {}", toolhost_state::postgres::without_secrets(.0))]
    Postgres(#[from] toolhost_state::postgres::Error),
    /// The engine could not be reached or did not answer in time (no password in it).
    #[error("the chat database: {0}")]
    Unavailable(String),
    /// Not opened, for this reason (the chat is off).
    #[error("{0}")]
    Unused(String),
    #[error("the chat database: a stored conversation does not read back: {0}")]
    Corrupt(#[from] serde_json::Error),
    #[error(
        "{0} conversations are kept, the most this host keeps ([chat] max-conversations); \
         delete some first"
    )]
    Full(usize),
    #[error(
        "the chat database holds {} MiB, the most this host keeps ([chat] max-database-mib, \
         {} MiB); delete conversations first",
        used >> 20,
        max >> 20
    )]
    DatabaseFull { used: u64, max: u64 },
    /// The path no longer names the file the host opened: what is written would be lost.
    #[error(
        "the chat database {path} is not the file this host opened: {what} while the host ran, \
         so nothing written now would be kept; put the file back, or restart the host to \
         start a new database"
    )]
    Detached { path: PathBuf, what: String },
    /// A blocking thread of the SQLite engine ended without an answer.
    #[error("the chat database: {0}")]
    Stopped(String),
}

impl toolhost_state::postgres::AsPostgresError for StoreError {
    fn as_postgres(&self) -> Option<&toolhost_state::postgres::Error> {
        match self {
            StoreError::Postgres(e) => Some(e),
            _ => None,
        }
    }
}

/// A conversation as the list shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub id: String,
    pub title: String,
    pub created: String,
    pub updated: String,
}

/// A conversation with everything kept of it.
#[derive(Debug, Clone)]
pub struct Stored {
    pub summary: Summary,
    pub conversation: Conversation,
    pub log: Vec<Value>,
    pub allowed_tools: Vec<String>,
    /// The call id of the question its last run ended with.
    pub pending_question: Option<String>,
}

/// What a run changed, written in one transaction when it ends.
#[derive(Debug, Clone)]
pub struct RunRecord {
    pub conversation: Conversation,
    pub log: Vec<Value>,
    pub allowed_tools: Vec<String>,
    pub pending_question: Option<String>,
}

/// What the database may hold.
#[derive(Debug, Clone, Copy)]
pub struct StoreLimits {
    /// Conversations kept (`[chat] max-conversations`).
    pub max_conversations: usize,
    /// Bytes of the database in use (`[chat] max-database-mib`): past them, no conversation
    /// is started or continued until some are deleted.
    pub max_bytes: u64,
}

impl Default for StoreLimits {
    fn default() -> Self {
        StoreLimits {
            max_conversations: super::DEFAULT_MAX_CONVERSATIONS,
            max_bytes: super::DEFAULT_MAX_DATABASE_MIB << 20,
        }
    }
}

/// Whose conversations: an identity's key in hex, or `None` for the local operator's (and
/// those kept before conversations had owners).
pub type Owner<'a> = Option<&'a str>;

/// The chat database, on one engine or the other.
#[derive(Debug, Clone)]
pub enum Store {
    /// A file of this host, used from blocking threads.
    Sqlite(Arc<sqlite::Sqlite>),
    /// PostgreSQL, shared by the fleet.
    Postgres(Arc<postgres::PgStore>),
}

impl Store {
    /// Opens (or creates) the SQLite database at `path` (blocking: call it off the async
    /// threads).
    pub fn open(path: &Path, limits: StoreLimits) -> Result<Store, StoreError> {
        sqlite::Sqlite::open(path, limits).map(|s| Store::Sqlite(Arc::new(s)))
    }

    /// The chat's tables on `engine`; they are made (or brought up to date) by
    /// [`Store::prepare`], or by the first request if PostgreSQL was down then.
    pub fn postgres(engine: Arc<Postgres>, limits: StoreLimits) -> Store {
        Store::Postgres(Arc::new(postgres::PgStore::new(engine, limits)))
    }

    /// Makes the tables when the engine needs it (at start: PostgreSQL's migrations).
    pub async fn prepare(&self) -> Result<(), StoreError> {
        match self {
            Store::Sqlite(_) => Ok(()),
            Store::Postgres(pg) => pg.migrated().await,
        }
    }

    /// Where it is, as logs and `status` show it (a path, or a URL without its password).
    pub fn shown(&self) -> String {
        match self {
            Store::Sqlite(db) => db.path().display().to_string(),
            Store::Postgres(pg) => pg.shown().to_string(),
        }
    }

    /// Every conversation of `owner`, the most recently updated first.
    pub async fn list(&self, owner: Owner<'_>) -> Result<Vec<Summary>, StoreError> {
        match self {
            Store::Sqlite(db) => blocking(db, owner, move |db, owner| db.list(owner)).await,
            Store::Postgres(pg) => pg.list(owner).await,
        }
    }

    /// Ok while the database uses no more than its bound.
    pub async fn has_room(&self) -> Result<(), StoreError> {
        match self {
            Store::Sqlite(db) => blocking(db, None, |db, _| db.has_room()).await,
            Store::Postgres(pg) => pg.has_room().await,
        }
    }

    /// Adds a conversation; refused when `max_conversations` are kept, or the database uses
    /// more than its bound.
    pub async fn create(
        &self,
        id: &str,
        title: &str,
        conversation: &Conversation,
        owner: Owner<'_>,
    ) -> Result<Summary, StoreError> {
        match self {
            Store::Sqlite(db) => {
                let (id, title) = (id.to_string(), title.to_string());
                let conversation = conversation.clone();
                blocking(db, owner, move |db, owner| {
                    db.create(&id, &title, &conversation, owner)
                })
                .await
            }
            Store::Postgres(pg) => pg.create(id, title, conversation, owner).await,
        }
    }

    /// Whether `owner` has the conversation `id`.
    pub async fn owns(&self, id: &str, owner: Owner<'_>) -> Result<bool, StoreError> {
        match self {
            Store::Sqlite(db) => {
                let id = id.to_string();
                blocking(db, owner, move |db, owner| db.owns(&id, owner)).await
            }
            Store::Postgres(pg) => pg.owns(id, owner).await,
        }
    }

    /// The bytes a conversation of `owner` holds as stored: its messages (as JSON) and its
    /// log, or `None` when it has no such conversation.
    pub async fn sizes(
        &self,
        id: &str,
        owner: Owner<'_>,
    ) -> Result<Option<(u64, u64)>, StoreError> {
        match self {
            Store::Sqlite(db) => {
                let id = id.to_string();
                blocking(db, owner, move |db, owner| db.sizes(&id, owner)).await
            }
            Store::Postgres(pg) => pg.sizes(id, owner).await,
        }
    }

    /// One conversation of `owner`, or `None`.
    pub async fn get(&self, id: &str, owner: Owner<'_>) -> Result<Option<Stored>, StoreError> {
        match self {
            Store::Sqlite(db) => {
                let id = id.to_string();
                blocking(db, owner, move |db, owner| db.get(&id, owner)).await
            }
            Store::Postgres(pg) => pg.get(id, owner).await,
        }
    }

    /// Writes what a run changed: the conversation, its new log events after the old ones,
    /// the tools allowed for all, the question it ended with. False if it was deleted meanwhile.
    pub async fn save_run(&self, id: &str, run: RunRecord) -> Result<bool, StoreError> {
        match self {
            Store::Sqlite(db) => {
                let id = id.to_string();
                blocking(db, None, move |db, _| db.save_run(&id, &run)).await
            }
            Store::Postgres(pg) => pg.save_run(id, &run).await,
        }
    }

    /// Deletes a conversation of `owner` and its log; false if it had none.
    pub async fn delete(&self, id: &str, owner: Owner<'_>) -> Result<bool, StoreError> {
        match self {
            Store::Sqlite(db) => {
                let id = id.to_string();
                blocking(db, owner, move |db, owner| db.delete(&id, owner)).await
            }
            Store::Postgres(pg) => pg.delete(id, owner).await,
        }
    }
}

/// Runs `work` on the SQLite database on a blocking thread, with `owner` owned for it.
async fn blocking<T: Send + 'static>(
    db: &Arc<sqlite::Sqlite>,
    owner: Owner<'_>,
    work: impl FnOnce(&sqlite::Sqlite, Owner<'_>) -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    let (db, owner) = (Arc::clone(db), owner.map(str::to_string));
    tokio::task::spawn_blocking(move || work(&db, owner.as_deref()))
        .await
        .map_err(|e| StoreError::Stopped(e.to_string()))?
}

/// A number that grows with time, to order conversations by their last update.
fn order() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}
