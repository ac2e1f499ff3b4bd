//! The rules of `[[access.rules]]`, applied: which tools an identity may list and call, who
//! may read `/metrics`, and which scope would let an access token call a tool it may not.
//!
//! Deny by default once one rule exists: an identity may use what some rule that matches it
//! grants, and nothing else. Without rules every identity that authenticated may use every
//! tool (one operator's set-up, as with `--token-env` alone). The local operator (stdio,
//! loopback without a token where that is allowed) is never bound by rules.

use toolhost_config::access::{Quota, Rule, Who};
use toolhost_contract::{Identity, IdentityKind};
use toolhost_core::catalog::Tool;

/// The rules and quotas in force.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    rules: Vec<Rule>,
    quotas: Vec<Quota>,
}

impl Policy {
    pub fn new(rules: Vec<Rule>, quotas: Vec<Quota>) -> Self {
        Policy { rules, quotas }
    }

    /// The quota that holds `identity`: the first that names it, one of its groups or (an
    /// access token's) scopes, or names nobody; none for the local operator.
    pub fn quota_for(&self, identity: &Identity) -> Option<&Quota> {
        if identity.kind == IdentityKind::Local {
            return None;
        }
        (self.quotas.iter()).find(|quota| quota.who.is_empty() || names(&quota.who, identity))
    }

    /// Whether any rule is written (then what none grants is denied).
    pub fn is_restrictive(&self) -> bool {
        !self.rules.is_empty()
    }

    /// Whether `identity` may list and call `tool`.
    pub fn may_call(&self, identity: &Identity, tool: &Tool) -> bool {
        self.may_use(identity, tool.ensemble(), tool.name())
    }

    /// Whether `identity` may list and use what `ensemble` offers as `name`: a tool, a
    /// prompt or a resource set (one rule language for all three).
    pub fn may_use(&self, identity: &Identity, ensemble: &str, name: &str) -> bool {
        self.unbound(identity)
            || self
                .matching(identity)
                .any(|rule| grants(rule, ensemble, name))
    }

    /// Whether `identity` may answer the approvals of any chat conversation: the local
    /// operator, and those a rule names for it (never everyone because no rule is written:
    /// a conversation's approvals are its owner's unless someone is named).
    pub fn may_approve(&self, identity: &Identity) -> bool {
        identity.kind == IdentityKind::Local || self.matching(identity).any(|rule| rule.approve)
    }

    /// Whether `identity` may answer the tools' questions of any chat conversation (as
    /// [`Policy::may_approve`], with `answer`).
    pub fn may_answer(&self, identity: &Identity) -> bool {
        identity.kind == IdentityKind::Local || self.matching(identity).any(|rule| rule.answer)
    }

    /// Whether `identity` may read `/metrics`.
    pub fn may_read_metrics(&self, identity: &Identity) -> bool {
        self.unbound(identity) || self.matching(identity).any(|rule| rule.metrics)
    }

    /// The scopes that would let `identity`, an access token's, call `tool` which it may not
    /// call now: those of the rules that grant the tool by scope alone (for the step-up
    /// challenge, `403 insufficient_scope`). Empty when no scope would.
    pub fn scopes_for(&self, identity: &Identity, tool: &Tool) -> Vec<&str> {
        if identity.kind != IdentityKind::Oauth || self.may_call(identity, tool) {
            return Vec::new();
        }
        let mut scopes: Vec<&str> = self
            .rules
            .iter()
            .filter(|rule| grants(rule, tool.ensemble(), tool.name()))
            .flat_map(|rule| rule.who.scopes.iter().map(String::as_str))
            .collect();
        scopes.sort_unstable();
        scopes.dedup();
        scopes
    }

    /// Every scope the rules name: what an access token may be asked for (the protected
    /// resource metadata's `scopes_supported`, a `401` challenge's `scope`).
    pub fn scopes(&self) -> Vec<&str> {
        let mut scopes: Vec<&str> = (self.rules.iter())
            .flat_map(|rule| rule.who.scopes.iter().map(String::as_str))
            .collect();
        scopes.sort_unstable();
        scopes.dedup();
        scopes
    }

    /// True for an identity no rule binds: the local operator, or anyone when no rule exists.
    fn unbound(&self, identity: &Identity) -> bool {
        identity.kind == IdentityKind::Local || self.rules.is_empty()
    }

    /// The rules that apply to `identity`: it is named, in one of the groups, or (an access
    /// token) holds one of the scopes.
    fn matching<'a>(&'a self, identity: &'a Identity) -> impl Iterator<Item = &'a Rule> {
        (self.rules.iter()).filter(move |rule| names(&rule.who, identity))
    }
}

/// Whether `who` names `identity`: by name, by one of its groups, or (an access token) by one
/// of its scopes.
fn names(who: &Who, identity: &Identity) -> bool {
    who.identities.contains(&identity.name)
        || who.groups.iter().any(|g| identity.groups.contains(g))
        || (identity.kind == IdentityKind::Oauth
            && who.scopes.iter().any(|s| identity.scopes.contains(s)))
}

/// Whether `rule` grants the tool `name` of `ensemble`.
fn grants(rule: &Rule, ensemble: &str, name: &str) -> bool {
    rule.tools.iter().any(|pattern| glob(pattern, name))
        || rule.ensembles.iter().any(|pattern| glob(pattern, ensemble))
}

pub use toolhost_config::glob;

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(kind: IdentityKind, name: &str, groups: &[&str], scopes: &[&str]) -> Identity {
        Identity {
            kind,
            name: name.into(),
            client: None,
            groups: groups.iter().map(|g| g.to_string()).collect(),
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn prompts_and_resource_sets_are_granted_by_name_and_ensemble_as_tools_are() {
        let policy = Policy::new(
            vec![Rule {
                who: Who {
                    groups: vec!["readers".into()],
                    ..Who::default()
                },
                tools: vec!["summarize_*".into()],
                ensembles: vec!["docs".into()],
                ..Rule::default()
            }],
            Vec::new(),
        );
        let reader = identity(IdentityKind::Token, "r", &["readers"], &[]);
        assert!(
            policy.may_use(&reader, "files", "summarize_sample"),
            "by name"
        );
        assert!(policy.may_use(&reader, "docs", "handbook"), "by ensemble");
        assert!(!policy.may_use(&reader, "files", "samples"), "neither");
        let other = identity(IdentityKind::Token, "o", &["others"], &[]);
        assert!(!policy.may_use(&other, "files", "summarize_sample"));
        assert!(
            Policy::default().may_use(&other, "files", "samples"),
            "no rules written"
        );
    }

    #[test]
    fn rules_match_names_groups_and_only_an_access_tokens_scopes() {
        let policy = Policy::new(
            vec![
                Rule {
                    who: Who {
                        scopes: vec!["tools:calculate".into()],
                        ..Who::default()
                    },
                    tools: vec!["calculate".into()],
                    ..Rule::default()
                },
                Rule {
                    who: Who {
                        groups: vec!["ops".into()],
                        ..Who::default()
                    },
                    ensembles: vec!["*".into()],
                    metrics: true,
                    approve: true,
                    ..Rule::default()
                },
            ],
            vec![
                Quota {
                    who: Who {
                        groups: vec!["ops".into()],
                        ..Who::default()
                    },
                    concurrent_calls: Some(64),
                    ..Quota::default()
                },
                Quota {
                    calls_per_minute: Some(10),
                    ..Quota::default()
                },
            ],
        );
        let oauth = identity(IdentityKind::Oauth, "alice", &[], &["tools:calculate"]);
        let matched: Vec<_> = policy.matching(&oauth).collect();
        assert_eq!(matched.len(), 1);
        assert!(!policy.may_read_metrics(&oauth));
        // A static token named like a scope is not a scope.
        let token = identity(IdentityKind::Token, "t", &[], &["tools:calculate"]);
        assert_eq!(policy.matching(&token).count(), 0);
        let ops = identity(IdentityKind::Token, "t", &["ops"], &[]);
        assert!(policy.may_read_metrics(&ops));
        // Approving destructive calls and answering tools' questions are granted apart.
        assert!(policy.may_approve(&ops) && !policy.may_answer(&ops));
        assert!(!policy.may_approve(&oauth));
        assert!(policy.may_read_metrics(&Identity::local()));
        assert_eq!(policy.scopes(), ["tools:calculate"]);
        assert!(Policy::default().may_read_metrics(&token));
        // Without rules everyone calls everything, but answers only in their own
        // conversations.
        assert!(!Policy::default().may_approve(&token) && !Policy::default().may_answer(&token));
        assert!(Policy::default().may_approve(&Identity::local()));
        // The first quota that applies holds; the local operator has none.
        assert_eq!(
            policy.quota_for(&ops).and_then(|q| q.concurrent_calls),
            Some(64)
        );
        assert_eq!(
            policy.quota_for(&oauth).and_then(|q| q.calls_per_minute),
            Some(10)
        );
        assert!(policy.quota_for(&Identity::local()).is_none());
    }
}
