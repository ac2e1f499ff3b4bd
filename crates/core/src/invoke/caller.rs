//! Who a session calls on behalf of, and what the access rules let them call: set on the
//! sessions of `serve --http` (toolhost-access decides both), absent elsewhere (stdio, the
//! CLI, `toolhost chat`: the local operator, bound only by the session's [`super::CallPolicy`]).

use crate::catalog::Tool;
use std::pin::Pin;
use std::sync::Arc;
use toolhost_contract::Identity;
pub use toolhost_state::Limited;
pub use toolhost_state::quota::Running;

/// A call admitted under its identity's quota before it was known to run (the HTTP guard
/// admits a request without a session, so that a refusal is a `429`), carried by the request
/// to its call: [`super::Call::admitted`] takes it instead of asking the quota again. A
/// request that ends without running a call drops it, which gives its token back.
///
/// In a fleet the admission is a Redis round trip, so it may still be on its way
/// ([`Admitted::pending`]): the call waits for it at the same time as it asks the fleet's
/// dedup, so that the two cost one round trip. The guard answers a refusal (`429`) once the
/// request is done, so a follow-up (which runs no call) can [`Admitted::waive`] it first.
#[derive(Clone)]
pub struct Admitted(Arc<Ahead>);

struct Ahead {
    verdict: std::sync::Mutex<Verdict>,
    decided: tokio::sync::Notify,
}

enum Verdict {
    Waiting,
    /// Admitted; `None` once its call took it.
    Admitted(Option<Running>),
    Refused(Limited),
    /// Not needed: the request runs no call (a 2026-07-28 follow-up continues one that was
    /// admitted when it began). Whatever the quota decides is given back.
    Waived,
}

impl Admitted {
    /// An admission decided already: admitted, or refused.
    pub fn known(decided: Result<Running, Limited>) -> Self {
        let verdict = match decided {
            Ok(running) => Verdict::Admitted(Some(running)),
            Err(limited) => Verdict::Refused(limited),
        };
        Admitted(Arc::new(Ahead {
            verdict: std::sync::Mutex::new(verdict),
            decided: tokio::sync::Notify::new(),
        }))
    }

    /// The request needs no admission (it runs no call): what was taken is given back, and
    /// it is not refused.
    pub fn waive(&self) {
        let given_back = std::mem::replace(&mut *self.0.lock(), Verdict::Waived);
        drop(given_back);
        self.0.decided.notify_waiters();
    }

    /// An admission being decided by `admission`, which runs on its own from now on (the
    /// request goes on meanwhile). Without a runtime it is refused as unavailable.
    pub fn pending<F>(admission: F) -> Self
    where
        F: Future<Output = Result<Running, Limited>> + Send + 'static,
    {
        let ahead = Arc::new(Ahead {
            verdict: std::sync::Mutex::new(Verdict::Waiting),
            decided: tokio::sync::Notify::new(),
        });
        let deciding = Arc::clone(&ahead);
        let decide = async move {
            let verdict = match admission.await {
                Ok(running) => Verdict::Admitted(Some(running)),
                Err(limited) => Verdict::Refused(limited),
            };
            let mut decided = deciding.lock();
            if !matches!(*decided, Verdict::Waived) {
                *decided = verdict;
            }
            drop(decided);
            deciding.decided.notify_waiters();
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(decide)),
            Err(_) => {
                *ahead.lock() = Verdict::Refused(Limited {
                    retry_after: std::time::Duration::from_secs(1),
                    message: "the quota could not be asked".into(),
                    unavailable: true,
                });
            }
        }
        Admitted(ahead)
    }

    /// The admission once decided: for the call that runs (once: later callers get
    /// `Ok(None)`), or the refusal.
    pub(super) async fn take(&self) -> Result<Option<Running>, Limited> {
        self.decided().await;
        match &mut *self.0.lock() {
            Verdict::Admitted(running) => Ok(running.take().map(Running::runs)),
            Verdict::Refused(limited) => Err(limited.clone()),
            Verdict::Waiting | Verdict::Waived => Ok(None),
        }
    }

    /// Gives back what the request's call did not take (it never ran: an unknown tool, a
    /// refusal before it started), once the admission is decided: in a fleet its lease is
    /// released before the request's answer, so that the identity's next call, on any
    /// replica, finds it gone. A call that took it ends it itself.
    pub(super) async fn give_back(&self) {
        self.decided().await;
        let untaken = match &mut *self.0.lock() {
            Verdict::Admitted(running) => running.take(),
            Verdict::Refused(_) | Verdict::Waiting | Verdict::Waived => None,
        };
        if let Some(running) = untaken {
            running.end().await;
        }
    }

    /// The refusal, once decided (`None`: admitted).
    pub async fn refusal(&self) -> Option<Limited> {
        self.decided().await;
        match &*self.0.lock() {
            Verdict::Refused(limited) => Some(limited.clone()),
            Verdict::Admitted(_) | Verdict::Waiting | Verdict::Waived => None,
        }
    }

    async fn decided(&self) {
        loop {
            let notified = self.0.decided.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before the look, so that a decision in between is not missed.
            notified.as_mut().enable();
            if !matches!(*self.0.lock(), Verdict::Waiting) {
                return;
            }
            notified.await;
        }
    }
}

impl Ahead {
    fn lock(&self) -> std::sync::MutexGuard<'_, Verdict> {
        (self.verdict.lock()).unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// What [`Permits::admit`] answers: the call counted as running (held while it runs, ended
/// before its answer), or the refusal.
pub type Admission<'a> =
    Pin<Box<dyn Future<Output = Result<Option<Running>, Limited>> + Send + 'a>>;

/// Whether an identity may list and call a tool. Implemented by toolhost-access over the
/// rules in force at the moment it is asked, so that a reload's rules apply to the next call
/// of a session opened before it.
pub trait Permits: Send + Sync {
    fn permits(&self, tool: &Tool) -> bool;

    /// Whether the identity may list and use a prompt or resource set called `name` of
    /// `ensemble` (granted as a tool of that name would be).
    fn permits_named(&self, ensemble: &str, name: &str) -> bool;

    /// Whether the identity may answer the approvals of destructive calls in conversations
    /// it did not start (an approver).
    fn may_approve(&self) -> bool {
        false
    }

    /// Whether the identity may answer tools' questions in conversations it did not start.
    fn may_answer(&self) -> bool {
        false
    }

    /// A call of the identity admitted under its quota: whatever is returned is held while
    /// the call runs (counting it as running), or the call is refused with when to try again.
    /// Asynchronous: a fleet's quotas are counted in Redis.
    fn admit(&self) -> Admission<'_> {
        Box::pin(std::future::ready(Ok(None)))
    }

    /// Whether a quota applies to the identity under the rules in force (its calls are
    /// counted by [`Permits::admit`]): only then has a traced call a `quota` span.
    fn has_quota(&self) -> bool {
        false
    }
}

/// An identity, and what it may call. Cloned for each session and call it reaches, so both
/// are shared.
#[derive(Clone)]
pub struct Caller {
    pub identity: Arc<Identity>,
    pub access: Arc<dyn Permits>,
}

impl Caller {
    /// A caller the rules let call everything (the local operator, or no rules written).
    pub fn unrestricted(identity: impl Into<Arc<Identity>>) -> Self {
        struct Everything;
        impl Permits for Everything {
            fn permits(&self, _: &Tool) -> bool {
                true
            }

            fn permits_named(&self, _: &str, _: &str) -> bool {
                true
            }

            fn may_approve(&self) -> bool {
                true
            }

            fn may_answer(&self) -> bool {
                true
            }
        }
        Caller {
            identity: identity.into(),
            access: Arc::new(Everything),
        }
    }

    /// The local operator (stdio, or loopback without a token), unrestricted: one value
    /// shared by every such request.
    pub fn local() -> Self {
        static LOCAL: std::sync::LazyLock<Caller> =
            std::sync::LazyLock::new(|| Caller::unrestricted(Identity::local()));
        LOCAL.clone()
    }

    pub fn permits(&self, tool: &Tool) -> bool {
        self.access.permits(tool)
    }

    pub fn may_approve(&self) -> bool {
        self.access.may_approve()
    }

    pub fn may_answer(&self) -> bool {
        self.access.may_answer()
    }

    pub fn admit(&self) -> Admission<'_> {
        self.access.admit()
    }

    pub fn has_quota(&self) -> bool {
        self.access.has_quota()
    }
}

/// A session's caller as of its latest request: always the same identity (the HTTP guard
/// binds a session to the identity that opened it), with the grant of the token it presented
/// last, so a client that stepped up its scopes keeps its session. See
/// [`super::Session::follow`].
pub(super) struct Latest(arc_swap::ArcSwap<Caller>);

impl Latest {
    pub(super) fn new(caller: Caller) -> Self {
        Latest(arc_swap::ArcSwap::from_pointee(caller))
    }

    /// Follows `caller` if it is the same identity.
    pub(super) fn follow(&self, caller: &Caller) {
        if self.0.load().identity.is_same(&caller.identity) {
            self.0.store(Arc::new(caller.clone()));
        }
    }
}

impl Permits for Latest {
    fn permits(&self, tool: &Tool) -> bool {
        self.0.load().permits(tool)
    }

    fn permits_named(&self, ensemble: &str, name: &str) -> bool {
        self.0.load().access.permits_named(ensemble, name)
    }

    fn may_approve(&self) -> bool {
        self.0.load().may_approve()
    }

    fn may_answer(&self) -> bool {
        self.0.load().may_answer()
    }

    fn admit(&self) -> Admission<'_> {
        let caller = self.0.load_full();
        Box::pin(async move { caller.admit().await })
    }
}

impl std::fmt::Debug for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caller")
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}
