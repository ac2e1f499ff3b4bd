//! Quotas per identity (`[[access.quotas]]`): calls a minute (a token bucket: a burst of
//! `calls-per-minute`, refilled at that rate) and calls running at once, kept in this process
//! ([`embedded`]) or in Redis for the whole fleet ([`shared`]).
//!
//! A call is admitted once, by one atomic step on its engine, and holds a [`Running`] until it
//! ends. An HTTP request without a session is admitted ahead, by the guard, which answers a
//! refusal with a `429` once the request is done (in a fleet the request goes on while Redis
//! answers, and its call waits for the admission beside its dedup: one round trip for both);
//! a call admitted ahead that never runs (its arguments were refused, a follow-up) gives its
//! token back when its [`Running`] drops, as if it had never been asked, so that both engines
//! count exactly the calls that ran.

pub mod embedded;
pub mod shared;

use crate::Limited;
use crate::engine::Redis;
use std::sync::Arc;
use toolhost_config::access::Quota;

/// The quotas of one host, on its engine.
pub enum Quotas {
    Embedded(Arc<embedded::Usage>),
    Shared(Arc<shared::SharedQuotas>),
}

/// One call counted as running until it is dropped.
pub struct Running(Held);

enum Held {
    Embedded(embedded::Counted),
    Shared(shared::Lease),
}

impl Running {
    /// The call ended: given up now, and in a fleet before the call's answer is sent (a drop
    /// gives it up too, in the background, for a call that was cancelled).
    pub async fn end(self) {
        match self.0 {
            Held::Embedded(counted) => drop(counted),
            Held::Shared(lease) => lease.end().await,
        }
    }

    /// The call runs: its token is spent whatever happens next.
    pub fn runs(mut self) -> Self {
        match &mut self.0 {
            Held::Embedded(counted) => counted.refund = false,
            Held::Shared(lease) => lease.refund = false,
        }
        self
    }
}

impl Quotas {
    pub fn embedded() -> Self {
        Quotas::Embedded(Arc::default())
    }

    pub(crate) fn shared(redis: Arc<Redis>) -> Self {
        Quotas::Shared(shared::SharedQuotas::new(redis))
    }

    /// Whether the quotas are the fleet's (kept in Redis).
    pub fn is_shared(&self) -> bool {
        matches!(self, Quotas::Shared(_))
    }

    /// A call of the identity `key` under `quota`: counted (a token taken, one more running)
    /// and held until the returned guard drops, or refused with when to try again. `ahead`:
    /// admitted before the call is known to run, see [`Running::runs`].
    pub async fn admit(
        &self,
        key: [u8; 32],
        quota: &Quota,
        ahead: bool,
    ) -> Result<Running, Limited> {
        Ok(Running(match self {
            Quotas::Embedded(usage) => return embedded_admit(usage, key, quota, ahead),
            Quotas::Shared(shared) => {
                let mut lease = shared.admit(key, quota).await?;
                lease.refund = ahead;
                Held::Shared(lease)
            }
        }))
    }

    /// [`Quotas::admit`] for quotas counted in this process, which decide at once; `None`
    /// for the fleet's (a round trip to Redis).
    pub fn admit_now(
        &self,
        key: [u8; 32],
        quota: &Quota,
        ahead: bool,
    ) -> Option<Result<Running, Limited>> {
        let Quotas::Embedded(usage) = self else {
            return None;
        };
        Some(embedded_admit(usage, key, quota, ahead))
    }

    /// Renews the leases of this host's running calls (shared quotas; called every
    /// [`crate::UPKEEP_EVERY`]).
    pub(crate) async fn renew(&self) {
        if let Quotas::Shared(shared) = self {
            shared.renew().await;
        }
    }
}

/// A call counted in this process, see [`Quotas::admit`].
fn embedded_admit(
    usage: &Arc<embedded::Usage>,
    key: [u8; 32],
    quota: &Quota,
    ahead: bool,
) -> Result<Running, Limited> {
    let mut counted = usage.admit(key, quota)?;
    counted.refund = ahead;
    Ok(Running(Held::Embedded(counted)))
}

/// The message of a refusal by calls a minute.
fn per_minute_refusal(limit: u32, wait_s: u64) -> Limited {
    Limited {
        retry_after: std::time::Duration::from_secs(wait_s.max(1)),
        message: format!(
            "this identity's quota is {limit} calls a minute; try again in {} s",
            wait_s.max(1)
        ),
        unavailable: false,
    }
}

/// The message of a refusal by calls at once.
fn at_once_refusal(limit: usize) -> Limited {
    Limited {
        retry_after: std::time::Duration::from_secs(1),
        message: format!(
            "this identity's quota is {limit} calls at once, and {limit} are running; try again \
             when one ends"
        ),
        unavailable: false,
    }
}
