//! Long calls as tasks (the MCP Tasks extension, `io.modelcontextprotocol/tasks`), for
//! clients that declare it: a `tools/call` still running after [`TASK_AFTER`] is answered
//! with a task the client polls (`tasks/get`) or cancels (`tasks/cancel`) instead of holding
//! its request open. A call that ends sooner is answered as usual.
//!
//! rmcp's `TaskManager` keeps the tasks (ids are random UUIDs; a finished task's result is
//! kept for [`TASK_TTL`] after its last change). On top of it, each task belongs to the
//! credentials of the request that made it, as conversations do ([`super::scope`]): a
//! request with other credentials is told the task does not exist. At most [`MAX_TASKS`]
//! are kept; past that, a long call holds its request open as if the client had not asked
//! for tasks. Cancelling a task cancels its call (audited as `cancelled`). A task lives in
//! one host's memory: its id as clients see it starts with this replica's name
//! (`<replica>.<uuid>`), by which the HTTP front of another replica of a fleet forwards its
//! polls here.

use rmcp::ErrorData;
use rmcp::model::{CallToolResult, GetTaskResult, Task};
use rmcp::task_manager::{TaskExit, TaskManager, TaskOptions};
use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How long a call runs before it becomes a task.
pub const TASK_AFTER: Duration = Duration::from_secs(1);
/// How long a task's state is kept after its last change.
pub const TASK_TTL: Duration = Duration::from_secs(300);
/// How often a client is asked to poll.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);
/// Tasks kept at once, running or finished (each holds at most its tool's max-output-bytes).
pub const MAX_TASKS: usize = 64;

/// The tasks of one transport's clients, and who made each.
#[derive(Default)]
pub struct Tasks {
    manager: TaskManager,
    owners: Mutex<HashMap<String, [u8; 32]>>,
}

impl Tasks {
    /// Makes `call` (running, cancelled through `cancel`) a task of `owner`, or gives it
    /// back when [`MAX_TASKS`] are kept.
    pub fn start(
        &self,
        owner: [u8; 32],
        call: JoinHandle<CallToolResult>,
        cancel: CancellationToken,
    ) -> Result<Task, JoinHandle<CallToolResult>> {
        let mut owners = self.owners.lock().unwrap_or_else(PoisonError::into_inner);
        if owners.len() >= MAX_TASKS {
            // Tasks past their TTL are gone from the manager: forget their owners.
            owners.retain(|id, _| self.manager.get_task(id).is_ok());
            if owners.len() >= MAX_TASKS {
                return Err(call);
            }
        }
        let options = TaskOptions::new()
            .with_ttl_ms(TASK_TTL.as_millis() as u64)
            .with_poll_interval_ms(POLL_INTERVAL.as_millis() as u64);
        let task = self.manager.spawn(options, move |context| {
            Box::pin(async move {
                let mut call = call;
                tokio::select! {
                    joined = &mut call => joined.map_err(|e| {
                        TaskExit::Error(ErrorData::internal_error(format!("the call failed: {e}"), None))
                    }),
                    () = context.cancelled() => {
                        // The call ends as `cancelled` (and is audited) before the task does.
                        cancel.cancel();
                        let _ = call.await;
                        Err(TaskExit::Cancelled)
                    }
                }
            })
        });
        owners.insert(task.task_id.clone(), owner);
        Ok(outward(task))
    }

    /// `tasks/get` for `owner`.
    pub fn get(&self, owner: [u8; 32], id: &str) -> Result<GetTaskResult, ErrorData> {
        let inner = self.check(owner, id)?;
        (self.manager.get_task(inner)).map(|mut detailed| {
            detailed.task = outward(detailed.task);
            GetTaskResult::new(detailed)
        })
    }

    /// `tasks/cancel` for `owner`.
    pub fn cancel(&self, owner: [u8; 32], id: &str) -> Result<(), ErrorData> {
        let inner = self.check(owner, id)?;
        self.manager.cancel_task(inner)
    }

    /// rmcp's id of the task `id` names, if it is one of `owner`'s: a task of another owner,
    /// or of another replica, is answered as one that does not exist.
    fn check<'a>(&self, owner: [u8; 32], id: &'a str) -> Result<&'a str, ErrorData> {
        let owners = self.owners.lock().unwrap_or_else(PoisonError::into_inner);
        let inner =
            (id.strip_prefix(toolhost_state::replica())).and_then(|rest| rest.strip_prefix('.'));
        match inner.map(|inner| (inner, owners.get(inner))) {
            Some((inner, Some(made_by))) if *made_by == owner => Ok(inner),
            _ => Err(ErrorData::invalid_params(
                format!("unknown task: {id}"),
                None,
            )),
        }
    }
}

/// A task as clients see it: its id prefixed with this replica's name
/// (`<replica>.<rmcp's id>`), so that a poll reaching another replica of a fleet is
/// forwarded here.
fn outward(mut task: Task) -> Task {
    task.task_id = format!("{}.{}", toolhost_state::replica(), task.task_id);
    task
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn past_the_cap_a_long_call_is_given_back_to_hold_its_request() {
        let tasks = Tasks::default();
        let pending = || tokio::spawn(std::future::pending::<CallToolResult>());
        for _ in 0..MAX_TASKS {
            assert!(
                tasks
                    .start([1; 32], pending(), CancellationToken::new())
                    .is_ok()
            );
        }
        let given_back = tasks.start([1; 32], pending(), CancellationToken::new());
        assert!(given_back.is_err(), "a task past the cap of {MAX_TASKS}");
        assert_eq!(
            tasks
                .owners
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .len(),
            MAX_TASKS
        );
    }
}
