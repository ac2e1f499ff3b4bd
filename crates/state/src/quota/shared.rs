//! Quotas kept in Redis, exact across the fleet: each call is one Lua script (one round trip)
//! that refills the identity's bucket by Redis's own clock, checks both limits and counts the
//! call, or refuses it with when to try again.
//!
//! A script carries the moment its caller stops waiting, in Redis's clock
//! ([`Redis::deadline`]): one that reaches Redis after it (queued behind a stall, a network
//! that held it) takes no token and adds no lease. A script that ran in time but whose answer
//! came too late (Redis stalled between the two) spends its token: at most one per call in
//! flight at that instant.
//!
//! Calls at once are a sorted set of leases (member: this replica's id and a counter; score:
//! when the lease expires). A call that ends removes its lease; the replica renews the leases
//! of its running calls every [`RENEW_EVERY`], so the running calls of a replica that died are
//! forgotten within [`LEASE`]. Keys name the identity by its key (a hash of its kind and
//! name), never by a token, and every key expires: a bucket a minute after its last call
//! (it is full by then), a set of leases [`LEASE`] after its last renewal.

use super::{at_once_refusal, per_minute_refusal};
use crate::Limited;
use crate::engine::{Down, Redis};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use toolhost_config::access::Quota;

/// How long a running call's lease lasts unless renewed.
pub const LEASE: Duration = Duration::from_secs(15);

/// How often a replica renews the leases of its running calls.
pub const RENEW_EVERY: Duration = Duration::from_secs(5);

/// Leases renewed by one script (the rest in the next ones, same round of renewal).
const RENEW_CHUNK: usize = 256;

/// Where the keys start (every key of toolhost's starts with `toolhost:`).
const PREFIX: &str = "toolhost:quota:";

const ADMIT: &str = r"
-- KEYS[1]: the identity's bucket (tokens, at); KEYS[2]: its running calls (member -> expiry)
-- ARGV: calls a minute (0: none), calls at once (0: none), lease ms, member, deadline (ms of
-- Redis's clock after which the caller no longer waits; 0: none)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local deadline = tonumber(ARGV[5])
if deadline > 0 and now > deadline then
  return {2, 0}
end
local per_minute = tonumber(ARGV[1])
local at_once = tonumber(ARGV[2])
local lease = tonumber(ARGV[3])
local tokens = per_minute
if per_minute > 0 then
  local bucket = redis.call('HMGET', KEYS[1], 'tokens', 'at')
  if bucket[1] and bucket[2] then
    local elapsed = math.max(0, now - tonumber(bucket[2]))
    tokens = math.min(per_minute, tonumber(bucket[1]) + elapsed * per_minute / 60000)
  end
  if tokens < 1 then
    return {0, math.ceil((1 - tokens) * 60000 / per_minute)}
  end
end
if at_once > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  if redis.call('ZCARD', KEYS[2]) >= at_once then
    return {0, -1}
  end
  redis.call('ZADD', KEYS[2], now + lease, ARGV[4])
  redis.call('PEXPIRE', KEYS[2], lease + 1000)
end
if per_minute > 0 then
  redis.call('HSET', KEYS[1], 'tokens', tostring(tokens - 1), 'at', now)
  redis.call('PEXPIRE', KEYS[1], 61000)
end
return {1, 0}
";

const RELEASE: &str = r"
-- KEYS[1]: the bucket; KEYS[2]: the running calls. ARGV: member, calls a minute to give a
-- token back under (0: none)
redis.call('ZREM', KEYS[2], ARGV[1])
local per_minute = tonumber(ARGV[2])
if per_minute > 0 then
  local tokens = redis.call('HGET', KEYS[1], 'tokens')
  if tokens then
    redis.call('HSET', KEYS[1], 'tokens', tostring(math.min(per_minute, tonumber(tokens) + 1)))
  end
end
return 1
";

const RENEW: &str = r"
-- KEYS: sets of running calls; ARGV[1]: lease ms; ARGV[i + 1]: this replica's member in KEYS[i]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[1])
for i = 1, #KEYS do
  redis.call('ZADD', KEYS[i], 'XX', now + lease, ARGV[i + 1])
  redis.call('PEXPIRE', KEYS[i], lease + 1000)
end
return #KEYS
";

/// The quotas of a fleet, in its Redis.
pub struct SharedQuotas {
    redis: Arc<Redis>,
    admit: redis::Script,
    release: redis::Script,
    renew: redis::Script,
    /// This host's leases of running calls: member -> identity key.
    live: Mutex<HashMap<String, [u8; 32]>>,
    next: AtomicU64,
    renewed: Mutex<Instant>,
}

/// A call admitted by the fleet's quota: its lease is given up when dropped.
pub(crate) struct Lease {
    quotas: Arc<SharedQuotas>,
    key: [u8; 32],
    member: String,
    per_minute: u32,
    /// Counted among the calls at once (it has a lease to give up).
    at_once: bool,
    /// The call never ran: its token goes back when dropped.
    pub(crate) refund: bool,
}

impl Lease {
    /// The call ended: its lease is given up before the call's answer is sent, so that the
    /// identity's next call (on any replica) finds it gone. Bounded by `redis-timeout-ms`; a
    /// release Redis misses expires with its lease.
    pub(crate) async fn end(mut self) {
        if self.at_once {
            self.quotas.lock_live().remove(&self.member);
        }
        let refund = if self.refund { self.per_minute } else { 0 };
        if self.at_once || refund > 0 {
            let member = std::mem::take(&mut self.member);
            self.quotas.release(self.key, member, refund).await;
        }
        // Given up: nothing is left for the drop to do.
        self.at_once = false;
        self.refund = false;
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.at_once {
            self.quotas.lock_live().remove(&self.member);
        }
        let refund = if self.refund { self.per_minute } else { 0 };
        if !self.at_once && refund == 0 {
            return;
        }
        // Given up in the background: a release Redis misses expires with its lease.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let quotas = Arc::clone(&self.quotas);
        let (key, member) = (self.key, std::mem::take(&mut self.member));
        runtime.spawn(async move { quotas.release(key, member, refund).await });
    }
}

impl SharedQuotas {
    pub(crate) fn new(redis: Arc<Redis>) -> Arc<Self> {
        Arc::new(SharedQuotas {
            redis,
            admit: redis::Script::new(ADMIT),
            release: redis::Script::new(RELEASE),
            renew: redis::Script::new(RENEW),
            live: Mutex::default(),
            next: AtomicU64::new(0),
            renewed: Mutex::new(Instant::now()),
        })
    }

    fn lock_live(&self) -> std::sync::MutexGuard<'_, HashMap<String, [u8; 32]>> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One call of the identity `key` under `quota`, counted in one round trip.
    pub(crate) async fn admit(
        self: &Arc<Self>,
        key: [u8; 32],
        quota: &Quota,
    ) -> Result<Lease, Limited> {
        let per_minute = quota.calls_per_minute.unwrap_or(0);
        let at_once = quota.concurrent_calls.unwrap_or(0);
        let member = format!(
            "{}:{}",
            self.redis.replica(),
            self.next.fetch_add(1, Ordering::Relaxed)
        );
        if at_once > 0 {
            // Renewed from now on, even while the answer is on its way.
            self.lock_live().insert(member.clone(), key);
        }
        let lease = Lease {
            quotas: Arc::clone(self),
            key,
            member,
            per_minute,
            at_once: at_once > 0,
            refund: false,
        };
        let (bucket, running) = keys(&key);
        let script = &self.admit;
        let deadline = self.redis.deadline();
        let answer: Result<(i64, i64), Down> = self
            .redis
            .run("count a call", |mut connection| {
                let mut invocation = script.key(&bucket);
                invocation
                    .key(&running)
                    .arg(per_minute)
                    .arg(at_once)
                    .arg(LEASE.as_millis() as u64)
                    .arg(&lease.member)
                    .arg(deadline);
                async move { invocation.invoke_async(&mut connection).await }
            })
            .await;
        match answer {
            Ok((1, _)) => Ok(lease),
            // Redis ran it past its deadline (and took nothing): as if it had not answered.
            Ok((2, _)) => Err(unavailable(format!(
                "Redis at {} answered after the call stopped waiting",
                self.redis.shown()
            ))),
            Ok((_, wait_ms)) => {
                let mut lease = lease;
                lease.at_once = false;
                self.lock_live().remove(&lease.member);
                Err(if wait_ms < 0 {
                    at_once_refusal(at_once)
                } else {
                    per_minute_refusal(per_minute, (wait_ms as u64).div_ceil(1000))
                })
            }
            // Taken nothing if it reaches Redis later (its deadline); the lease is given up.
            Err(Down(why)) => Err(unavailable(why)),
        }
    }

    /// Gives up the lease `member` of the identity `key`, and a token under `refund` calls a
    /// minute (0: none).
    async fn release(&self, key: [u8; 32], member: String, refund: u32) {
        let (bucket, running) = keys(&key);
        let script = &self.release;
        let _ = self
            .redis
            .run("end a call", |mut connection| {
                let mut invocation = script.key(&bucket);
                invocation.key(&running).arg(&member).arg(refund);
                async move { invocation.invoke_async::<i64>(&mut connection).await }
            })
            .await;
    }

    /// Renews this host's leases if [`RENEW_EVERY`] has passed since the last time.
    pub(crate) async fn renew(&self) {
        {
            let mut renewed = self.renewed.lock().unwrap_or_else(PoisonError::into_inner);
            if renewed.elapsed() < RENEW_EVERY {
                return;
            }
            *renewed = Instant::now();
        }
        let leases: Vec<(String, [u8; 32])> = (self.lock_live().iter())
            .map(|(member, key)| (member.clone(), *key))
            .collect();
        // A cluster runs a script's keys on one node: each chunk holds one slot's leases.
        let by_slot: Vec<Vec<(String, [u8; 32])>> = if self.redis.is_cluster() {
            let mut slots: HashMap<_, Vec<_>> = HashMap::new();
            for lease in leases {
                (slots
                    .entry(crate::cluster::slot(&keys(&lease.1).1))
                    .or_default())
                .push(lease);
            }
            slots.into_values().collect()
        } else {
            vec![leases]
        };
        let chunks = (by_slot.iter()).flat_map(|same| same.chunks(RENEW_CHUNK));
        for chunk in chunks {
            let script = &self.renew;
            let renewed = self
                .redis
                .run("renew leases", |mut connection| {
                    let mut invocation = script.arg(LEASE.as_millis() as u64);
                    for (member, key) in chunk {
                        invocation.key(keys(key).1).arg(member);
                    }
                    async move { invocation.invoke_async::<i64>(&mut connection).await }
                })
                .await;
            if renewed.is_err() {
                return;
            }
        }
    }
}

/// A call refused because the fleet's Redis did not answer in time: `503`.
fn unavailable(why: String) -> Limited {
    Limited {
        retry_after: Duration::from_secs(1),
        message: format!(
            "{why}; calls under a quota wait for the fleet's Redis, which keeps the quotas of \
             every replica"
        ),
        unavailable: true,
    }
}

/// The bucket's and the running set's keys of the identity `key`: one hash tag, so that both
/// land on one node.
fn keys(key: &[u8; 32]) -> (String, String) {
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    (
        format!("{PREFIX}{{{hex}}}:bucket"),
        format!("{PREFIX}{{{hex}}}:running"),
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn keys_carry_the_identitys_key_in_one_hash_tag() {
        let (bucket, running) = super::keys(&[0xab; 32]);
        assert_eq!(
            bucket,
            format!("toolhost:quota:{{{}}}:bucket", "ab".repeat(32))
        );
        assert!(running.ends_with("}:running"));
    }
}
