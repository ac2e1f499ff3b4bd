//! postgres: the PostgreSQL a fleet keeps its chat conversations in (`[chat] database =
//! "postgres://..."`), reached through a pool of at most [`MAX_CONNECTIONS`] connections.
//! Every wait is bounded: a connection is made within [`CONNECT_TIMEOUT`] or not at all, a
//! request waits for a free one as long, and each statement runs for at most
//! [`STATEMENT_TIMEOUT`] (the server cancels it; the caller stops waiting a little after).
//! Nothing is reached at start: the first request connects, and a PostgreSQL that does not
//! answer is said in that request's error, on `/metrics` and in `toolhost status`, never with
//! the URL's password.
//!
//! The tables are the chat's (`toolhost-web` makes them, under [`Postgres::migrate`]).

use crate::watch::Watch;
use crate::{EngineHealth, InvalidUrl, shown};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres::NoTls;

pub use deadpool_postgres::{Client, GenericClient};
pub use tokio_postgres::Error;

/// Connections one host keeps to PostgreSQL, at most.
pub const MAX_CONNECTIONS: usize = 16;
/// How long a connection may take to be made, and a request may wait for a free one.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one statement may run on the server.
pub const STATEMENT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a transaction may sit idle on the server (a host that stalled mid-transaction
/// does not hold its locks past it).
const IDLE_IN_TRANSACTION: Duration = Duration::from_secs(10);

/// A PostgreSQL to keep the chat's conversations in.
#[derive(Clone)]
pub struct PostgresSettings {
    /// As written (it may carry a password: never logged, see [`Self::shown`]).
    url: String,
    config: tokio_postgres::Config,
    /// How a connection is made secure (libpq's `sslmode`), when it is.
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl PostgresSettings {
    /// `url` checked: `postgres://[user[:password]@]host[:port]/database[?options]` (or
    /// `postgresql://`), TLS as libpq's `sslmode` and its files say ([`crate::sslmode`]).
    pub fn new(url: &str) -> Result<Self, InvalidUrl> {
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(InvalidUrl(format!(
                "`{}` is not a PostgreSQL URL: write postgres://user@host:port/database",
                shown(url)
            )));
        }
        let (without_tls, tls) = crate::sslmode::split(url)?;
        let mut config: tokio_postgres::Config = without_tls.parse().map_err(|e| {
            InvalidUrl(format!(
                "`{}` is not a PostgreSQL URL ({}): write postgres://user@host:port/database",
                shown(url),
                without_secrets(&e)
            ))
        })?;
        config.ssl_mode(tls.mode);
        if config.get_dbname().is_none() {
            return Err(InvalidUrl(format!(
                "`{}` names no database: write postgres://user@host:port/database",
                shown(url)
            )));
        }
        let options = format!(
            "{} -c statement_timeout={} -c idle_in_transaction_session_timeout={}",
            config.get_options().unwrap_or_default(),
            STATEMENT_TIMEOUT.as_millis(),
            IDLE_IN_TRANSACTION.as_millis()
        );
        config
            .options(options.trim_start())
            .connect_timeout(CONNECT_TIMEOUT)
            .application_name("toolhost");
        Ok(PostgresSettings {
            url: url.to_string(),
            config,
            tls: tls.config,
        })
    }

    /// The URL with any password replaced by `***`, as logs and `status` show it.
    pub fn shown(&self) -> String {
        shown(&self.url)
    }
}

impl std::fmt::Debug for PostgresSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresSettings")
            .field("url", &self.shown())
            .finish()
    }
}

/// PostgreSQL did not answer, or failed: what to say (no password in it).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct Unavailable(pub String);

/// The PostgreSQL of one host.
pub struct Postgres {
    pool: Pool,
    shown: String,
    watch: Watch,
}

impl Postgres {
    pub(crate) fn new(settings: &PostgresSettings) -> Result<Arc<Self>, InvalidUrl> {
        let manager_config = || ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        };
        let manager = match &settings.tls {
            Some(tls) => Manager::from_config(
                settings.config.clone(),
                tokio_postgres_rustls::MakeRustlsConnect::new((**tls).clone()),
                manager_config(),
            ),
            None => Manager::from_config(settings.config.clone(), NoTls, manager_config()),
        };
        let pool = Pool::builder(manager)
            .max_size(MAX_CONNECTIONS)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(CONNECT_TIMEOUT))
            .create_timeout(Some(CONNECT_TIMEOUT))
            .recycle_timeout(Some(CONNECT_TIMEOUT))
            .build()
            .map_err(|e| InvalidUrl(format!("a pool for PostgreSQL: {e}")))?;
        Ok(Arc::new(Postgres {
            pool,
            shown: settings.shown(),
            // The chat keeps its conversations in it; tools do not need it.
            watch: Watch::new(
                "postgres",
                settings.shown(),
                "the chat answers 503; tools, MCP and the page's catalog serve",
            ),
        }))
    }

    /// A connection of the pool, within [`CONNECT_TIMEOUT`].
    pub async fn client(&self) -> Result<Client, Unavailable> {
        // The pool's own timeouts bound each step; this bounds them all together.
        match tokio::time::timeout(CONNECT_TIMEOUT * 2, self.pool.get()).await {
            Ok(Ok(client)) => Ok(client),
            Ok(Err(e)) => Err(self.failed(format!(
                "PostgreSQL at {} cannot be reached: {}",
                self.shown,
                pool_error(&e)
            ))),
            Err(_) => Err(self.failed(format!(
                "PostgreSQL at {} did not give a connection within {} s",
                self.shown,
                (CONNECT_TIMEOUT * 2).as_secs()
            ))),
        }
    }

    /// Runs `work` on a connection, within [`STATEMENT_TIMEOUT`] and a second, and notes how
    /// it went. An error of `work` that is the server's answer (a constraint, a statement it
    /// refused) leaves the engine up; one of the connection marks it down.
    pub async fn run<T, E>(
        &self,
        what: &str,
        work: impl AsyncFnOnce(&mut Client) -> Result<T, E>,
    ) -> Result<T, Failed<E>>
    where
        E: AsPostgresError,
    {
        let mut client = self.client().await.map_err(Failed::Unavailable)?;
        let bound = STATEMENT_TIMEOUT + Duration::from_secs(1);
        match tokio::time::timeout(bound, work(&mut client)).await {
            Ok(Ok(value)) => {
                self.watch.answered();
                Ok(value)
            }
            Ok(Err(e)) => match e.as_postgres() {
                Some(failure) if failure.as_db_error().is_none() => {
                    Err(Failed::Unavailable(self.failed(format!(
                        "PostgreSQL at {} failed to {what}: {}",
                        self.shown,
                        without_secrets(failure)
                    ))))
                }
                _ => {
                    self.watch.answered();
                    Err(Failed::Work(e))
                }
            },
            Err(_) => Err(Failed::Unavailable(self.failed(format!(
                "PostgreSQL at {} did not answer within {} s ({what})",
                self.shown,
                bound.as_secs()
            )))),
        }
    }

    /// Runs `steps` once per database, in order, each in its own transaction under an
    /// advisory lock (replicas starting together make them once), and notes which ran in
    /// `toolhost_migrations`. A step is never changed once shipped: a new one is added.
    pub async fn migrate(&self, steps: &[&str]) -> Result<(), Unavailable> {
        let outcome = self
            .run("make its tables", async |client: &mut Client| {
                let transaction = client.transaction().await?;
                // The lock ends with the transaction; the number is "toolhost" in ASCII.
                transaction
                    .execute("SELECT pg_advisory_xact_lock(8390042924530413940)", &[])
                    .await?;
                transaction
                    .batch_execute(
                        "CREATE TABLE IF NOT EXISTS toolhost_migrations \
                         (version INTEGER PRIMARY KEY, applied TIMESTAMPTZ NOT NULL DEFAULT now())",
                    )
                    .await?;
                let done: i32 = transaction
                    .query_one(
                        "SELECT coalesce(max(version), 0) FROM toolhost_migrations",
                        &[],
                    )
                    .await?
                    .get(0);
                for (version, step) in steps.iter().enumerate().skip(done.max(0) as usize) {
                    transaction.batch_execute(step).await?;
                    transaction
                        .execute(
                            "INSERT INTO toolhost_migrations (version) VALUES ($1)",
                            &[&(version as i32 + 1)],
                        )
                        .await?;
                }
                transaction.commit().await
            })
            .await;
        outcome.map_err(|failed| match failed {
            Failed::Unavailable(why) => why,
            Failed::Work(e) => Unavailable(format!(
                "PostgreSQL at {} refused the chat's tables: {}",
                self.shown,
                without_secrets(&e)
            )),
        })
    }

    /// Asks PostgreSQL a trivial question (the upkeep, every second).
    pub(crate) async fn ping(&self) {
        let _ = self
            .run("answer a ping", async |client: &mut Client| {
                client.simple_query("SELECT 1").await.map(|_| ())
            })
            .await;
    }

    fn failed(&self, why: String) -> Unavailable {
        Unavailable(self.watch.failed(why))
    }

    pub(crate) fn health(&self) -> EngineHealth {
        self.watch.health()
    }

    /// The URL as shown (no password).
    pub fn shown(&self) -> &str {
        &self.shown
    }
}

impl std::fmt::Debug for Postgres {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Postgres")
            .field("url", &self.shown)
            .finish()
    }
}

/// A step on PostgreSQL that did not end well: the engine could not be used, or the work
/// itself failed (its own error).
#[derive(Debug)]
pub enum Failed<E> {
    Unavailable(Unavailable),
    Work(E),
}

/// An error that may be PostgreSQL's, to tell a connection lost from a refused statement.
pub trait AsPostgresError {
    fn as_postgres(&self) -> Option<&Error>;
}

impl AsPostgresError for Error {
    fn as_postgres(&self) -> Option<&Error> {
        Some(self)
    }
}

/// A driver error as said to clients and logs: the server's message, or the kind of failure,
/// never a URL.
pub fn without_secrets(error: &Error) -> String {
    let text = match error.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => {
            // With its causes (a TLS handshake's says why the certificate was refused).
            let mut text = error.to_string();
            let mut source = std::error::Error::source(error);
            while let Some(cause) = source {
                text = format!("{text}: {cause}");
                source = cause.source();
            }
            // The driver's messages do not carry the URL; a source that did is cut at it.
            text.split("postgres")
                .next()
                .unwrap_or_default()
                .to_string()
        }
    };
    toolhost_contract::cut(text.trim(), 300, |_| "...".into()).into_owned()
}

fn pool_error(error: &deadpool_postgres::PoolError) -> String {
    use deadpool_postgres::PoolError;
    match error {
        PoolError::Backend(e) => without_secrets(e),
        PoolError::Timeout(_) => "no connection was made in time".into(),
        other => toolhost_contract::cut(&other.to_string(), 300, |_| "...".into()).into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked_and_passwords_never_shown() {
        let settings =
            PostgresSettings::new("postgres://chat:s3cret@db:5432/toolhost").expect("a URL");
        assert_eq!(settings.shown(), "postgres://chat:***@db:5432/toolhost");
        assert!(!format!("{settings:?}").contains("s3cret"));
        assert!(crate::has_password("postgresql://chat:s3cret@db/toolhost"));
        assert!(crate::has_password(
            "postgres://db/toolhost?password=s3cret"
        ));
        assert!(!crate::has_password("postgres://chat@db/toolhost"));
        for (url, says) in [
            ("mysql://db/x", "not a PostgreSQL URL"),
            ("postgres://db/x?sslmode=sometimes", "sslmode `sometimes`"),
            ("postgres://a:b@db:notaport/x", "not a PostgreSQL URL"),
            ("postgres://db", "names no database"),
        ] {
            let error = PostgresSettings::new(url).expect_err(url).to_string();
            assert!(error.contains(says), "{url}: {error}");
            assert!(!error.contains(":b@"), "{error}");
        }
    }
}
