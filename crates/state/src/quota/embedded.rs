//! Quotas kept in this process (no `[fleet] redis`). What each identity used is kept across
//! reloads, by the identity's key, for at most [`MAX_TRACKED`]
//! identities: past that, the one idle longest (no call running) is forgotten, which gives it
//! a full bucket again; a host tracking that many identities all running calls takes no call
//! of a new one until one ends.

use crate::Limited;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use toolhost_config::access::Quota;

/// Identities whose use is tracked at once.
pub const MAX_TRACKED: usize = 100_000;

/// One identity's use.
struct Bucket {
    /// Calls it may still start now (fractions refill continuously).
    tokens: f64,
    refilled: Instant,
    running: usize,
}

/// What every identity used, shared by the grants of one host.
#[derive(Default)]
pub struct Usage {
    buckets: Mutex<HashMap<[u8; 32], Bucket>>,
}

/// One call counted as running until it is dropped.
pub(crate) struct Counted {
    usage: Arc<Usage>,
    key: [u8; 32],
    /// The bucket's size, if it took a token.
    per_minute: Option<u32>,
    /// The call never ran: its token goes back when dropped.
    pub(crate) refund: bool,
}

impl Drop for Counted {
    fn drop(&mut self) {
        let mut buckets = self.usage.lock();
        if let Some(bucket) = buckets.get_mut(&self.key) {
            bucket.running = bucket.running.saturating_sub(1);
            if self.refund
                && let Some(limit) = self.per_minute
            {
                bucket.tokens = (bucket.tokens + 1.0).min(f64::from(limit));
            }
        }
    }
}

impl Usage {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Bucket>> {
        self.buckets.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A call of the identity `key` under `quota`: counted (a token taken, one more running)
    /// and held until the returned guard drops, or refused with when to try again.
    pub(crate) fn admit(
        self: &Arc<Self>,
        key: [u8; 32],
        quota: &Quota,
    ) -> Result<Counted, Limited> {
        let mut buckets = self.lock();
        let now = Instant::now();
        if !buckets.contains_key(&key) && buckets.len() >= MAX_TRACKED {
            forget_one_idle(&mut buckets);
            if buckets.len() >= MAX_TRACKED {
                return Err(Limited {
                    retry_after: Duration::from_secs(1),
                    message: format!(
                        "{MAX_TRACKED} identities are calling at once, the most this host \
                         tracks; try again in a moment"
                    ),
                    unavailable: false,
                });
            }
        }
        let bucket = buckets.entry(key).or_insert_with(|| Bucket {
            tokens: quota.calls_per_minute.map_or(0.0, f64::from),
            refilled: now,
            running: 0,
        });
        check(bucket, quota, now)?;
        if quota.calls_per_minute.is_some() {
            bucket.tokens -= 1.0;
        }
        bucket.running += 1;
        Ok(Counted {
            usage: Arc::clone(self),
            key,
            per_minute: quota.calls_per_minute,
            refund: false,
        })
    }
}

/// Refills `bucket` to `now`; refuses a call that would pass `quota`.
fn check(bucket: &mut Bucket, quota: &Quota, now: Instant) -> Result<(), Limited> {
    if let Some(limit) = quota.calls_per_minute {
        let per_second = f64::from(limit) / 60.0;
        let elapsed = now.duration_since(bucket.refilled).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * per_second).min(f64::from(limit));
        bucket.refilled = now;
        if bucket.tokens < 1.0 {
            let wait = ((1.0 - bucket.tokens) / per_second).ceil().max(1.0);
            return Err(super::per_minute_refusal(limit, wait as u64));
        }
    }
    if let Some(limit) = quota.concurrent_calls
        && bucket.running >= limit
    {
        return Err(super::at_once_refusal(limit));
    }
    Ok(())
}

/// Forgets the identity idle longest (no call running), if any is.
fn forget_one_idle(buckets: &mut HashMap<[u8; 32], Bucket>) {
    let oldest = (buckets.iter())
        .filter(|(_, b)| b.running == 0)
        .min_by_key(|(_, b)| b.refilled)
        .map(|(key, _)| *key);
    if let Some(key) = oldest {
        buckets.remove(&key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_allows_its_burst_then_refills_and_running_calls_are_counted() {
        let usage = Arc::new(Usage::default());
        let quota = Quota {
            calls_per_minute: Some(2),
            concurrent_calls: Some(1),
            ..Quota::default()
        };
        let key = [1; 32];
        let first = usage.admit(key, &quota).expect("first");
        let busy = usage.admit(key, &quota).err().expect("one at once");
        assert!(busy.message.contains("1 calls at once"), "{}", busy.message);
        drop(first);
        let second = usage.admit(key, &quota).expect("second");
        drop(second);
        let limited = usage.admit(key, &quota).err().expect("two a minute");
        assert!(limited.retry_after >= Duration::from_secs(1));
        assert!(limited.retry_after <= Duration::from_secs(30));
        // Another identity has its own bucket.
        assert!(usage.admit([2; 32], &quota).is_ok());
        // A minute later (as the bucket sees it) the burst is back.
        usage.lock().get_mut(&key).expect("tracked").refilled -= Duration::from_secs(60);
        let mut third = usage.admit(key, &quota).expect("a minute later");
        // A call that never ran gives its token back.
        third.refund = true;
        drop(third);
        drop(usage.admit(key, &quota).expect("one of the burst"));
        drop(usage.admit(key, &quota).expect("the token given back"));
        assert!(
            usage.admit(key, &quota).is_err(),
            "two a minute, those two ran"
        );
    }

    /// The key of the `n`th identity.
    fn identity(n: usize) -> [u8; 32] {
        let mut key = [0; 32];
        key[..8].copy_from_slice(&(n as u64).to_le_bytes());
        key
    }

    #[test]
    fn past_max_tracked_a_new_identity_forgets_the_one_idle_longest_which_starts_afresh() {
        let usage = Arc::new(Usage::default());
        let quota = Quota {
            calls_per_minute: Some(1),
            ..Quota::default()
        };
        for n in 0..MAX_TRACKED {
            drop(usage.admit(identity(n), &quota).expect("tracked"));
        }
        // Each has used its call of the minute.
        let spent = usage.admit(identity(MAX_TRACKED - 1), &quota).err();
        assert!(spent.expect("spent").message.contains("1 calls a minute"));
        {
            let mut buckets = usage.lock();
            buckets.get_mut(&identity(0)).expect("0").refilled -= Duration::from_secs(30);
            buckets.get_mut(&identity(1)).expect("1").refilled -= Duration::from_secs(20);
        }
        let tracked = |n| usage.lock().contains_key(&identity(n));
        let _new = usage.admit(identity(MAX_TRACKED), &quota).expect("room");
        assert!(!tracked(0), "the idle longest forgotten");
        assert!(tracked(1));
        assert_eq!(usage.lock().len(), MAX_TRACKED);
        drop(
            usage
                .admit(identity(MAX_TRACKED + 1), &quota)
                .expect("room"),
        );
        assert!(!tracked(1), "the idle next longest forgotten");
        assert_eq!(usage.lock().len(), MAX_TRACKED);
        // Tracked, identity 0 would wait half a minute more; forgotten, its bucket is full.
        drop(usage.admit(identity(0), &quota).expect("a full bucket"));
        assert_eq!(usage.lock().len(), MAX_TRACKED);
    }

    #[test]
    fn past_max_tracked_all_running_a_new_identity_waits_for_a_call_to_end() {
        let usage = Arc::new(Usage::default());
        let quota = Quota::default();
        let mut running: Vec<Counted> = (0..MAX_TRACKED)
            .map(|n| usage.admit(identity(n), &quota).expect("tracked"))
            .collect();
        let newcomer = identity(MAX_TRACKED);
        let refused = usage.admit(newcomer, &quota).err().expect("none idle");
        assert_eq!(refused.retry_after, Duration::from_secs(1));
        assert!(
            (refused.message).contains("100000 identities are calling at once"),
            "{}",
            refused.message
        );
        assert_eq!(usage.lock().len(), MAX_TRACKED);
        // Those tracked go on calling.
        drop(usage.admit(identity(7), &quota).expect("tracked already"));
        let refused = usage.admit(newcomer, &quota).err();
        assert!(refused.is_some(), "7 still runs a call");
        // One call ends: its identity, idle, makes room.
        drop(running.swap_remove(7));
        let _newcomer = usage.admit(newcomer, &quota).expect("room");
        assert!(!usage.lock().contains_key(&identity(7)));
        assert_eq!(usage.lock().len(), MAX_TRACKED);
        assert!(usage.admit(identity(MAX_TRACKED + 1), &quota).is_err());
    }
}
