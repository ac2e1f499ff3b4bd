//! sqlite: the chat database of one host, the default: conversations kept in SQLite
//! (`rusqlite`, the library bundled), so that a restart keeps them. One connection behind a
//! mutex, used from blocking threads; WAL, so a reader elsewhere (the `sqlite3` shell) does
//! not stop the host writing.

use super::{Owner, RunRecord, StoreError, StoreLimits, Stored, Summary, order};
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;
use toolhost_agent::provider::conversation::Conversation;

/// How long a statement waits for a lock another program holds before it fails.
const BUSY_TIMEOUT: Duration = Duration::from_secs(2);

/// The open database.
pub struct Sqlite {
    path: PathBuf,
    connection: Mutex<Connection>,
    max_conversations: usize,
    max_bytes: u64,
    /// The file opened (device and inode): the path must still name it.
    identity: (u64, u64),
    /// Set while the path names another file or none, so that it is logged once.
    detached: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Sqlite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sqlite").field("path", &self.path).finish()
    }
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS conversations (
    id TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    created TEXT NOT NULL,
    updated TEXT NOT NULL,
    updated_order INTEGER NOT NULL,
    conversation TEXT NOT NULL,
    allowed_tools TEXT NOT NULL DEFAULT '[]',
    pending_question TEXT
);
CREATE INDEX IF NOT EXISTS conversations_by_update ON conversations (updated_order DESC);
CREATE TABLE IF NOT EXISTS log (
    conversation TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    event TEXT NOT NULL,
    PRIMARY KEY (conversation, seq)
);
";

/// The `owner` column, added to a database made before conversations had owners (their
/// conversations are the local operator's), and its index.
fn add_owners(connection: &Connection) -> rusqlite::Result<()> {
    let has: i64 = connection.query_row(
        "SELECT count(*) FROM pragma_table_info('conversations') WHERE name = 'owner'",
        [],
        |row| row.get(0),
    )?;
    if has == 0 {
        connection.execute_batch("ALTER TABLE conversations ADD COLUMN owner TEXT")?;
    }
    connection.execute_batch(
        "CREATE INDEX IF NOT EXISTS conversations_by_owner ON conversations \
         (owner, updated_order DESC)",
    )
}

impl Sqlite {
    /// Opens (or creates) the database at `path`, its directory too (0700: conversations are
    /// the operator's). A file that is not a database, or one locked by another program past
    /// the busy timeout, is an error naming the path.
    pub fn open(path: &Path, limits: StoreLimits) -> Result<Sqlite, StoreError> {
        let fail = |message: String| StoreError::Open {
            path: path.to_path_buf(),
            message,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
            && !dir.exists()
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| fail(format!("cannot create its directory: {e}")))?;
        }
        let connection = Connection::open(path).map_err(|e| fail(e.to_string()))?;
        connection
            .busy_timeout(BUSY_TIMEOUT)
            .map_err(|e| fail(e.to_string()))?;
        // The first statement that reads the file: a corrupt one fails here.
        let mode: String = connection
            .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
            .map_err(|e| fail(e.to_string()))?;
        tracing::debug!("chat database {} in {mode} mode", path.display());
        connection
            // The write-ahead log is truncated back to 64 MiB after each checkpoint.
            .execute_batch(
                "PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL; \
                 PRAGMA journal_size_limit = 67108864;",
            )
            .and_then(|()| connection.execute_batch(SCHEMA))
            .and_then(|()| add_owners(&connection))
            .map_err(|e| fail(e.to_string()))?;
        let identity = identity(path).map_err(|e| fail(e.to_string()))?;
        Ok(Sqlite {
            path: path.to_path_buf(),
            connection: Mutex::new(connection),
            max_conversations: limits.max_conversations,
            max_bytes: limits.max_bytes,
            identity,
            detached: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Ok while the path names the file that was opened. A database deleted, moved away or
    /// replaced (by another file, a directory) while the host runs would take writes that no
    /// restart finds: refused instead, logged once when it happens and once when the file is
    /// back.
    fn check_attached(&self) -> Result<(), StoreError> {
        use std::sync::atomic::Ordering;
        let what = match identity(&self.path) {
            Ok(found) if found == self.identity => None,
            Ok(_) => Some("it was replaced by another file".to_string()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Some("it was deleted or moved away".to_string())
            }
            Err(e) => Some(format!("it cannot be looked at ({e})")),
        };
        match what {
            None => {
                if self.detached.swap(false, Ordering::SeqCst) {
                    tracing::warn!(
                        "the chat database {} is back; the chat keeps conversations again",
                        self.path.display()
                    );
                }
                Ok(())
            }
            Some(what) => {
                let error = StoreError::Detached {
                    path: self.path.clone(),
                    what,
                };
                if !self.detached.swap(true, Ordering::SeqCst) {
                    tracing::error!("{error}; the chat answers 503 until then");
                }
                Err(error)
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn with<T>(
        &self,
        work: impl FnOnce(&mut Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.check_attached()?;
        // A panic while the lock was held cannot leave SQLite half-written (transactions roll
        // back when dropped): the connection is still good.
        let mut connection = self
            .connection
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        work(&mut connection)
    }

    /// Every conversation of `owner`, the most recently updated first.
    pub fn list(&self, owner: Owner<'_>) -> Result<Vec<Summary>, StoreError> {
        self.with(|c| {
            let mut statement = c.prepare(
                "SELECT id, title, created, updated FROM conversations WHERE owner IS ?1 \
                 ORDER BY updated_order DESC, rowid DESC",
            )?;
            let rows = statement.query_map(params![owner], |row| {
                Ok(Summary {
                    id: row.get(0)?,
                    title: row.get(1)?,
                    created: row.get(2)?,
                    updated: row.get(3)?,
                })
            })?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// Ok while the database uses no more than its bound (pages in use, freed ones not
    /// counted: a deletion makes room at once, without a VACUUM).
    pub fn has_room(&self) -> Result<(), StoreError> {
        self.with(|c| self.room(c))
    }

    fn room(&self, connection: &Connection) -> Result<(), StoreError> {
        let used: i64 = connection.query_row(
            "SELECT (SELECT page_count FROM pragma_page_count()) - \
             (SELECT freelist_count FROM pragma_freelist_count())",
            [],
            |r| r.get(0),
        )?;
        let page: i64 = connection.query_row("PRAGMA page_size", [], |r| r.get(0))?;
        let used = (used.max(0) as u64).saturating_mul(page.max(0) as u64);
        if used > self.max_bytes {
            return Err(StoreError::DatabaseFull {
                used,
                max: self.max_bytes,
            });
        }
        Ok(())
    }

    /// Adds a conversation; refused when `max_conversations` are kept, or the database uses
    /// more than its bound.
    pub fn create(
        &self,
        id: &str,
        title: &str,
        conversation: &Conversation,
        owner: Owner<'_>,
    ) -> Result<Summary, StoreError> {
        let text = serde_json::to_string(conversation)?;
        self.with(|c| {
            self.room(c)?;
            let transaction = c.transaction()?;
            let count: i64 =
                transaction.query_row("SELECT count(*) FROM conversations", [], |r| r.get(0))?;
            if count as usize >= self.max_conversations {
                return Err(StoreError::Full(self.max_conversations));
            }
            let now = toolhost_audit::now_rfc3339();
            transaction.execute(
                "INSERT INTO conversations \
                 (id, title, created, updated, updated_order, conversation, owner) \
                 VALUES (?1, ?2, ?3, ?3, ?4, ?5, ?6)",
                params![id, title, now, order(), text, owner],
            )?;
            transaction.commit()?;
            Ok(Summary {
                id: id.to_string(),
                title: title.to_string(),
                created: now.clone(),
                updated: now,
            })
        })
    }

    /// Whether `owner` has the conversation `id`.
    pub fn owns(&self, id: &str, owner: Owner<'_>) -> Result<bool, StoreError> {
        self.with(|c| {
            Ok(c.query_row(
                "SELECT count(*) FROM conversations WHERE id = ?1 AND owner IS ?2",
                params![id, owner],
                |row| row.get::<_, i64>(0),
            )? > 0)
        })
    }

    /// The bytes a conversation of `owner` holds as stored: its messages (as JSON) and its
    /// log, or `None` when it has no such conversation. Read without reading either.
    pub fn sizes(&self, id: &str, owner: Owner<'_>) -> Result<Option<(u64, u64)>, StoreError> {
        self.with(|c| {
            Ok(c.query_row(
                "SELECT octet_length(conversation), \
                 (SELECT coalesce(sum(octet_length(event)), 0) FROM log WHERE conversation = ?1) \
                 FROM conversations WHERE id = ?1 AND owner IS ?2",
                params![id, owner],
                |row| Ok((row.get::<_, i64>(0)? as u64, row.get::<_, i64>(1)? as u64)),
            )
            .optional()?)
        })
    }

    /// One conversation of `owner`, or `None`.
    pub fn get(&self, id: &str, owner: Owner<'_>) -> Result<Option<Stored>, StoreError> {
        self.with(|c| {
            let row = c
                .query_row(
                    "SELECT title, created, updated, conversation, allowed_tools, pending_question \
                     FROM conversations WHERE id = ?1 AND owner IS ?2",
                    params![id, owner],
                    |row| {
                        Ok((
                            row.get::<_, String>(0)?,
                            row.get::<_, String>(1)?,
                            row.get::<_, String>(2)?,
                            row.get::<_, String>(3)?,
                            row.get::<_, String>(4)?,
                            row.get::<_, Option<String>>(5)?,
                        ))
                    },
                )
                .optional()?;
            let Some((title, created, updated, conversation, allowed, pending)) = row else {
                return Ok(None);
            };
            let mut statement =
                c.prepare("SELECT event FROM log WHERE conversation = ?1 ORDER BY seq")?;
            let log = statement
                .query_map(params![id], |row| row.get::<_, String>(0))?
                .map(|text| Ok(serde_json::from_str(&text?)?))
                .collect::<Result<Vec<Value>, StoreError>>()?;
            Ok(Some(Stored {
                summary: Summary {
                    id: id.to_string(),
                    title,
                    created,
                    updated,
                },
                conversation: serde_json::from_str(&conversation)?,
                log,
                allowed_tools: serde_json::from_str(&allowed)?,
                pending_question: pending,
            }))
        })
    }

    /// Writes what a run changed: the conversation, its new log events after the old ones,
    /// the tools allowed for all, the question it ended with. False if it was deleted meanwhile.
    pub fn save_run(&self, id: &str, run: &RunRecord) -> Result<bool, StoreError> {
        let conversation = serde_json::to_string(&run.conversation)?;
        let allowed = serde_json::to_string(&run.allowed_tools)?;
        let events = run
            .log
            .iter()
            .map(serde_json::to_string)
            .collect::<Result<Vec<_>, _>>()?;
        self.with(|c| {
            // Past the size bound (runs that started before it was reached), the conversation
            // is kept and its log is not: the overshoot is at most one conversation a run.
            let full = self.room(c).err();
            let transaction = c.transaction()?;
            let changed = transaction.execute(
                "UPDATE conversations SET updated = ?2, updated_order = ?3, conversation = ?4, \
                 allowed_tools = ?5, pending_question = ?6 WHERE id = ?1",
                params![
                    id,
                    toolhost_audit::now_rfc3339(),
                    order(),
                    conversation,
                    allowed,
                    run.pending_question
                ],
            )?;
            if changed == 0 {
                return Ok(false);
            }
            let next: i64 = transaction.query_row(
                "SELECT coalesce(max(seq), -1) + 1 FROM log WHERE conversation = ?1",
                params![id],
                |r| r.get(0),
            )?;
            {
                let mut insert = transaction
                    .prepare("INSERT INTO log (conversation, seq, event) VALUES (?1, ?2, ?3)")?;
                if let Some(full) = &full {
                    let note = serde_json::json!({
                        "type": "error",
                        "message": format!("this run's log was not kept: {full}"),
                    });
                    insert.execute(params![id, next, note.to_string()])?;
                } else {
                    for (offset, event) in events.iter().enumerate() {
                        insert.execute(params![id, next + offset as i64, event])?;
                    }
                }
            }
            transaction.commit()?;
            Ok(true)
        })
    }

    /// Deletes a conversation of `owner` and its log; false if it had none.
    pub fn delete(&self, id: &str, owner: Owner<'_>) -> Result<bool, StoreError> {
        self.with(|c| {
            let transaction = c.transaction()?;
            let deleted = transaction.execute(
                "DELETE FROM conversations WHERE id = ?1 AND owner IS ?2",
                params![id, owner],
            )?;
            if deleted > 0 {
                transaction.execute("DELETE FROM log WHERE conversation = ?1", params![id])?;
            }
            transaction.commit()?;
            Ok(deleted > 0)
        })
    }
}

/// The device and inode `path` names (links followed, as SQLite opens it); a directory is
/// not a database.
fn identity(path: &Path) -> std::io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let metadata = std::fs::metadata(path)?;
    if !metadata.is_file() {
        return Ok((u64::MAX, u64::MAX));
    }
    Ok((metadata.dev(), metadata.ino()))
}
