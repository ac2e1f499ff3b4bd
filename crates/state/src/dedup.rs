//! dedup: the results of a conversation's calls, shared by the fleet in Redis, so that an
//! identical call reaching another replica is answered from the first one's result, and two
//! identical calls in flight on two replicas run once.
//!
//! What is shared is opaque bytes under a 32-byte name that the caller derives from the
//! conversation's key (the identity and the secret conversation id, hashed) and the call's
//! dedup key: nothing in Redis names a token, an identity or a conversation. One script per
//! call ([`SharedDedup::begin`], which takes nothing if it reaches Redis after its caller
//! stopped waiting) answers with the result, or gives this replica the claim to
//! run it, or says another replica runs it; a claimant stores the result (at most
//! [`MAX_SHARED_BYTES`], kept [`SHARED_TTL`]) and drops its claim in one more step, off the
//! call's path. A claim expires by itself after the call's own timeout, so a replica that
//! dies mid-call holds no one up for longer.

use crate::engine::{Down, Redis};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The largest result shared (its encoded bytes); a larger one is remembered by its replica
/// only, and a larger value found in Redis is not read.
pub const MAX_SHARED_BYTES: usize = 1 << 20;

/// How long a shared result is kept.
pub const SHARED_TTL: Duration = Duration::from_secs(600);

const PREFIX: &str = "toolhost:dedup:";

const BEGIN: &str = r"
-- KEYS[1]: the result; KEYS[2]: the claim to run it. ARGV: claim token, claim ms, max bytes,
-- deadline (ms of Redis's clock after which the caller no longer waits; 0: none)
local deadline = tonumber(ARGV[4])
if deadline > 0 then
  local t = redis.call('TIME')
  if tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) > deadline then
    return {5, ''}
  end
end
local size = redis.call('STRLEN', KEYS[1])
if size > tonumber(ARGV[3]) then
  return {4, ''}
end
if size > 0 then
  return {1, redis.call('GET', KEYS[1])}
end
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {2, ''}
end
return {3, ''}
";

const STORE: &str = r"
-- KEYS[1]: the result; KEYS[2]: the claim. ARGV: claim token, result, ttl ms (0: none)
if tonumber(ARGV[3]) > 0 then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
end
if redis.call('GET', KEYS[2]) == ARGV[1] then
  redis.call('DEL', KEYS[2])
end
return 1
";

/// Results shared by the fleet, in its Redis.
pub struct SharedDedup {
    redis: Arc<Redis>,
    begin: redis::Script,
    store: redis::Script,
    next: AtomicU64,
}

/// What the fleet knows of a call.
pub enum Begin {
    /// Its result, as stored.
    Hit(Vec<u8>),
    /// Nobody has it and nobody runs it: this replica runs it and stores what it gets.
    Run(Claim),
    /// Another replica runs it now.
    Elsewhere,
    /// A result is stored that is larger than this host reads: run it here.
    TooLarge,
}

/// This replica's claim to run a call: given up when dropped, unless its result was stored.
pub struct Claim {
    dedup: Arc<SharedDedup>,
    name: [u8; 32],
    token: String,
    settled: bool,
}

impl Claim {
    /// Stores `result` for the fleet (in the background) and gives the claim up; a result past
    /// [`MAX_SHARED_BYTES`] is not stored (the claim is given up all the same).
    pub fn store(mut self, result: Vec<u8>) {
        self.settled = true;
        let keep = result.len() <= MAX_SHARED_BYTES;
        self.finish(if keep { Some(result) } else { None });
    }

    fn finish(&self, result: Option<Vec<u8>>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (dedup, name, token) = (Arc::clone(&self.dedup), self.name, self.token.clone());
        runtime.spawn(async move { dedup.finish(name, token, result).await });
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if !self.settled {
            self.finish(None);
        }
    }
}

impl SharedDedup {
    pub(crate) fn new(redis: Arc<Redis>) -> Arc<Self> {
        Arc::new(SharedDedup {
            redis,
            begin: redis::Script::new(BEGIN),
            store: redis::Script::new(STORE),
            next: AtomicU64::new(0),
        })
    }

    /// What the fleet knows of the call `name`; a claim to run it lasts `hold` (the call's
    /// timeout and a margin) unless given up before.
    pub async fn begin(self: &Arc<Self>, name: &[u8; 32], hold: Duration) -> Result<Begin, Down> {
        let (result, claim) = keys(name);
        let token = format!(
            "{}:{}",
            self.redis.replica(),
            self.next.fetch_add(1, Ordering::Relaxed)
        );
        let script = &self.begin;
        let deadline = self.redis.deadline();
        let (answer, value): (i64, Vec<u8>) = self
            .redis
            .run("look up a result", |mut connection| {
                let mut invocation = script.key(&result);
                invocation
                    .key(&claim)
                    .arg(&token)
                    .arg(hold.as_millis().max(1) as u64)
                    .arg(MAX_SHARED_BYTES)
                    .arg(deadline);
                async move { invocation.invoke_async(&mut connection).await }
            })
            .await?;
        Ok(match answer {
            1 => Begin::Hit(value),
            2 => Begin::Run(Claim {
                dedup: Arc::clone(self),
                name: *name,
                token,
                settled: false,
            }),
            4 => Begin::TooLarge,
            // Run past its deadline: it claimed nothing, and the call goes on without the fleet.
            5 => {
                return Err(Down(format!(
                    "Redis at {} answered after the call stopped waiting",
                    self.redis.shown()
                )));
            }
            _ => Begin::Elsewhere,
        })
    }

    async fn finish(&self, name: [u8; 32], token: String, result: Option<Vec<u8>>) {
        let (result_key, claim) = keys(&name);
        let ttl = if result.is_some() {
            SHARED_TTL.as_millis() as u64
        } else {
            0
        };
        let value = result.unwrap_or_default();
        let script = &self.store;
        let _ = self
            .redis
            .run("store a result", |mut connection| {
                let mut invocation = script.key(&result_key);
                invocation.key(&claim).arg(&token).arg(&value).arg(ttl);
                async move { invocation.invoke_async::<i64>(&mut connection).await }
            })
            .await;
    }
}

/// The result's and the claim's keys of `name`: one hash tag, one node.
fn keys(name: &[u8; 32]) -> (String, String) {
    let hex: String = name.iter().map(|b| format!("{b:02x}")).collect();
    (
        format!("{PREFIX}{{{hex}}}:result"),
        format!("{PREFIX}{{{hex}}}:claim"),
    )
}
