//! A call as its caller describes it: one value for who calls which tool with what arguments,
//! and, beyond the defaults, when the caller stops wanting the result and where the tool's
//! progress reports and questions go.

use super::{Admitted, Arguments, Session};
use std::future::Future;
use std::sync::Arc;
use toolhost_contract::{BoxFuture, CallerLink, Unlinked};

/// One call of a tool: `session` calls `tool` with `arguments`. By default it runs to its
/// end and what the tool says back goes nowhere; [`Call::until`] and [`Call::linked`] change
/// that. Run it with [`super::Host::call`], or split it ([`super::Host::prepare`], then
/// [`super::Host::run`] with the call's [`Attached`]) to decide in between.
pub struct Call<'a> {
    pub session: &'a Session,
    pub tool: &'a str,
    pub arguments: Arguments,
    pub attached: Attached<'a>,
}

impl<'a> Call<'a> {
    pub fn new(session: &'a Session, tool: &'a str, arguments: impl Into<Arguments>) -> Self {
        Call {
            session,
            tool,
            arguments: arguments.into(),
            attached: Attached::default(),
        }
    }

    /// Ends the call as `cancelled` (and audited) when `cancel` resolves first: its caller no
    /// longer wants the result (an MCP client cancelled the request or the task).
    pub fn until(mut self, cancel: impl Future<Output = ()> + Send + 'a) -> Self {
        self.attached = self.attached.until(cancel);
        self
    }

    /// Sends the tool's progress reports and questions to `link`, and to no other caller.
    pub fn linked(mut self, link: &Arc<dyn CallerLink>) -> Self {
        self.attached = self.attached.linked(link);
        self
    }

    /// Runs under `admitted`, the quota's admission its request already holds, if any.
    pub fn admitted(mut self, admitted: Option<Admitted>) -> Self {
        self.attached = self.attached.admitted(admitted);
        self
    }
}

/// What a caller attaches to a call beyond its checks: when it stops wanting the result,
/// where the tool's progress reports and questions go, and the quota's admission its request
/// holds. The default is none of them.
#[derive(Default)]
pub struct Attached<'a> {
    cancel: Option<BoxFuture<'a, ()>>,
    link: Option<Arc<dyn CallerLink>>,
    admitted: Option<Admitted>,
}

impl<'a> Attached<'a> {
    /// See [`Call::until`].
    pub fn until(mut self, cancel: impl Future<Output = ()> + Send + 'a) -> Self {
        self.cancel = Some(Box::pin(cancel));
        self
    }

    /// See [`Call::linked`].
    pub fn linked(mut self, link: &Arc<dyn CallerLink>) -> Self {
        self.link = Some(Arc::clone(link));
        self
    }

    /// See [`Call::admitted`].
    pub fn admitted(mut self, admitted: Option<Admitted>) -> Self {
        self.admitted = admitted;
        self
    }

    /// The quota's admission attached, if any.
    pub(super) fn admission(&self) -> Option<&Admitted> {
        self.admitted.as_ref()
    }

    /// The call's end as its caller sees it: never, unless one was attached.
    pub(super) async fn cancelled(cancel: Option<BoxFuture<'a, ()>>) {
        match cancel {
            Some(cancel) => cancel.await,
            None => std::future::pending().await,
        }
    }

    /// Its parts: the cancellation, the link (nobody's, unless one was attached) and the
    /// admission.
    pub(super) fn into_parts(
        self,
    ) -> (
        Option<BoxFuture<'a, ()>>,
        Arc<dyn CallerLink>,
        Option<Admitted>,
    ) {
        (
            self.cancel,
            self.link.unwrap_or_else(unlinked),
            self.admitted,
        )
    }
}

/// The link of a caller that hears nothing back: one for the process.
fn unlinked() -> Arc<dyn CallerLink> {
    static UNLINKED: std::sync::LazyLock<Arc<dyn CallerLink>> =
        std::sync::LazyLock::new(|| Arc::new(Unlinked));
    Arc::clone(&UNLINKED)
}
