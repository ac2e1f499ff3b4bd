//! A session: one caller's scope. Its id names it in audit records; its [`CallPolicy`] (the
//! allow and deny lists of an agent run or of `[chat]`) and its [`Caller`] (over HTTP, the
//! identity and what the access rules grant it) decide which tools it may list and call; its
//! dedup memory answers its repeated calls.

use super::caller::{self, Caller, Permits};
use super::dedup::{DedupBudget, DedupCache};
use crate::catalog::Tool;
use std::sync::Arc;

/// Which tools a caller (an agent run, an MCP session) may use. Patterns are tool names, or
/// a prefix ending in `*`. Deny wins over allow; no allow list allows everything.
#[derive(Debug, Clone, Default)]
pub struct CallPolicy {
    pub allow: Option<Vec<String>>,
    pub deny: Vec<String>,
}

impl CallPolicy {
    fn matches(pattern: &str, name: &str) -> bool {
        match pattern.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => pattern == name,
        }
    }

    /// Whether `tool` may be called.
    pub fn permits(&self, tool: &str) -> bool {
        let allowed = self
            .allow
            .as_ref()
            .is_none_or(|allow| allow.iter().any(|p| Self::matches(p, tool)));
        allowed && !self.deny.iter().any(|p| Self::matches(p, tool))
    }
}

/// One caller's scope: its id (in audit records), its policy, whom it calls for (over HTTP)
/// and its dedup memory.
pub struct Session {
    pub id: String,
    pub policy: CallPolicy,
    /// Whom it calls for, and the grant of its latest request.
    caller: Option<(Caller, Arc<caller::Latest>)>,
    dedup: DedupCache,
}

impl Session {
    /// A session whose dedup memory has a budget of its own; [`Host::session`] makes one that
    /// shares the host's.
    pub fn new(id: impl Into<String>) -> Self {
        Session::with_policy(id, CallPolicy::default())
    }

    pub fn with_policy(id: impl Into<String>, policy: CallPolicy) -> Self {
        Session::with_budget(id, policy, Arc::default())
    }

    /// A session whose remembered results count against `budget`.
    pub fn with_budget(
        id: impl Into<String>,
        policy: CallPolicy,
        budget: Arc<DedupBudget>,
    ) -> Self {
        Session {
            id: id.into(),
            policy,
            caller: None,
            dedup: DedupCache::new(budget),
        }
    }

    /// The session of `caller`: it calls only what the caller may, and its calls are
    /// audited with the caller's identity.
    pub fn for_caller(mut self, caller: Caller) -> Self {
        let latest = Arc::new(caller::Latest::new(caller.clone()));
        let following = Caller {
            identity: caller.identity,
            access: Arc::clone(&latest) as Arc<dyn Permits>,
        };
        self.caller = Some((following, latest));
        self
    }

    /// Whom the session calls for, if anyone in particular.
    pub fn caller(&self) -> Option<&Caller> {
        self.caller.as_ref().map(|(caller, _)| caller)
    }

    /// From now on, the grant of `caller` (a later request of the session's identity, with
    /// the scopes of the token it presents now); another identity changes nothing.
    pub fn follow(&self, caller: &Caller) {
        if let Some((_, latest)) = &self.caller {
            latest.follow(caller);
        }
    }

    /// Whether the session may list and call `tool`: its policy, and its caller's rules.
    pub fn permits(&self, tool: &Tool) -> bool {
        self.policy.permits(&tool.name) && self.caller().is_none_or(|c| c.permits(tool))
    }

    /// Whether the session may see a prompt or resource set called `name` of `ensemble`: its
    /// policy's lists, and its caller's rules, as for a tool of that name.
    pub fn permits_offer(&self, ensemble: &str, name: &str) -> bool {
        self.policy.permits(name)
            && self
                .caller()
                .is_none_or(|c| c.access.permits_named(ensemble, name))
    }

    /// Shares this session's dedup results with the fleet's replicas under `scope` (a
    /// conversation's secret key: only sessions of the same scope meet).
    pub fn share_dedup(
        mut self,
        shared: Arc<toolhost_state::dedup::SharedDedup>,
        scope: [u8; 32],
    ) -> Self {
        self.dedup.share(shared, scope);
        self
    }

    /// The results this session remembers.
    pub fn dedup(&self) -> &DedupCache {
        &self.dedup
    }
}

impl crate::resources::Reader for Session {
    fn id(&self) -> &str {
        &self.id
    }

    fn may_see(&self, ensemble: &str, name: &str) -> bool {
        self.permits_offer(ensemble, name)
    }
}
