//! Exact-match dedup, scoped to one session: the key is blake3 over the tool name, the
//! invoker's version and the canonical JSON of the arguments. Identical calls in flight at
//! once run once (single-flight); only successes are remembered afterwards.
//!
//! Memory is bounded in bytes, per session and for the whole host ([`DedupBudget`]): a session
//! forgets its oldest results to stay within its share, a result larger than a session's
//! share is not remembered at all, and when the host's total is reached a session forgets its
//! own oldest results before it remembers a new one (or does not remember it).
//!
//! In a fleet (`[fleet] redis`) a conversation's session also asks the fleet
//! ([`DedupCache::share`]): a result another replica stored answers the call, a call another
//! replica runs now is waited for (at most the call's timeout, then run here), and a result
//! this replica gets is stored for the others. With Redis unreachable, the session's own
//! memory answers as it would on one host.

use super::CallError;
use crate::backend::VersionHash;
use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::OnceCell;
use toolhost_contract::ToolResult;
use toolhost_state::dedup::{Begin, SharedDedup};
use toolhost_state::engine::Down;
use toolhost_state::quota::Running;

/// What a call's admission holds while it runs, its result, and whether it was deduplicated.
pub(crate) type Ran<R> = (Option<Running>, R, bool);

/// A session remembers at most this many results; the oldest go first.
const MAX_ENTRIES: usize = 4096;
/// What one remembered result costs besides its items: key, slot, bookkeeping.
const ENTRY_OVERHEAD: usize = 160;
/// Defaults of `[host] dedup-session-mib` and `dedup-total-mib`.
pub const DEFAULT_DEDUP_SESSION_MIB: usize = 64;
pub const DEFAULT_DEDUP_TOTAL_MIB: usize = 256;

/// How many bytes of results sessions may remember: each, and all together.
#[derive(Debug)]
pub struct DedupBudget {
    session_limit: usize,
    total_limit: usize,
    used: AtomicUsize,
}

impl Default for DedupBudget {
    fn default() -> Self {
        DedupBudget::new(
            DEFAULT_DEDUP_SESSION_MIB << 20,
            DEFAULT_DEDUP_TOTAL_MIB << 20,
        )
    }
}

impl DedupBudget {
    pub fn new(session_limit: usize, total_limit: usize) -> Self {
        DedupBudget {
            session_limit,
            total_limit,
            used: AtomicUsize::new(0),
        }
    }

    /// Bytes remembered by every session of this budget now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }
}

/// The identity of a call for dedup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DedupKey([u8; 32]);

impl DedupKey {
    /// The key of calling `tool` (at `version`) with `arguments`.
    pub fn new(tool: &str, version: &VersionHash, arguments: &Value) -> Self {
        let mut hasher = blake3::Hasher::new();
        hasher.update(tool.as_bytes());
        hasher.update(&[0]);
        hasher.update(&version.0);
        hasher.update(&canonical_json(arguments));
        DedupKey(*hasher.finalize().as_bytes())
    }
}

/// `value` as JSON with object keys sorted at every depth: the bytes dedup keys hash.
pub fn canonical_json(value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    write_canonical(value, &mut out);
    out
}

/// [`canonical_json`] of the object with `entries` (an object's fields, without making a
/// `Value` of them).
pub fn canonical_object<'a>(entries: impl IntoIterator<Item = (&'a String, &'a Value)>) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    write_object(entries, &mut out);
    out
}

/// Writes `value` as JSON with object keys sorted, so `{"a":1,"b":2}` and `{"b":2,"a":1}`
/// give the same bytes.
pub(crate) fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => write_object(map, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        scalar => write_scalar(scalar, out),
    }
}

/// [`write_canonical`] of an object with `entries`.
fn write_object<'a>(entries: impl IntoIterator<Item = (&'a String, &'a Value)>, out: &mut Vec<u8>) {
    let mut entries: Vec<(&String, &Value)> = entries.into_iter().collect();
    entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
    out.push(b'{');
    for (i, (key, value)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        // A key is written as the JSON string it is (as a `Value::String`), without a copy.
        let _ = serde_json::to_writer(&mut *out, key);
        out.push(b':');
        write_canonical(value, out);
    }
    out.push(b'}');
}

fn write_scalar(value: &Value, out: &mut Vec<u8>) {
    // Serializing a scalar Value into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, value);
}

type Slot = Arc<OnceCell<Result<Arc<ToolResult>, CallError>>>;

#[derive(Default)]
struct Entries {
    /// Each slot with the bytes its result counts for (0 while in flight).
    slots: HashMap<DedupKey, (Slot, usize)>,
    order: VecDeque<DedupKey>,
    bytes: usize,
}

/// Forgets `key` and gives its bytes back.
fn remove(entries: &mut Entries, budget: &DedupBudget, key: DedupKey) {
    if let Some((_, size)) = entries.slots.remove(&key) {
        entries.bytes -= size;
        budget.used.fetch_sub(size, Ordering::Relaxed);
    }
    if entries.order.front() == Some(&key) {
        entries.order.pop_front();
    } else {
        entries.order.retain(|k| *k != key);
    }
}

/// The results one session remembers.
pub struct DedupCache {
    entries: Mutex<Entries>,
    budget: Arc<DedupBudget>,
    /// The fleet's results, and this session's scope among them (a conversation's).
    shared: Option<(Arc<SharedDedup>, [u8; 32])>,
}

impl Default for DedupCache {
    /// A cache with a budget of its own.
    fn default() -> Self {
        DedupCache::new(Arc::default())
    }
}

impl Drop for DedupCache {
    fn drop(&mut self) {
        let bytes = self
            .entries
            .get_mut()
            .map_or_else(|e| e.get_ref().bytes, |e| e.bytes);
        self.budget.used.fetch_sub(bytes, Ordering::Relaxed);
    }
}

impl DedupCache {
    /// A cache that counts against `budget`.
    pub fn new(budget: Arc<DedupBudget>) -> Self {
        DedupCache {
            entries: Mutex::default(),
            budget,
            shared: None,
        }
    }

    /// Shares this session's results with the fleet under `scope`, a secret of the
    /// conversation (a hash of its identity and id): only sessions with the same scope meet.
    pub(crate) fn share(&mut self, shared: Arc<SharedDedup>, scope: [u8; 32]) {
        self.shared = Some((shared, scope));
    }

    /// Runs `call` unless an identical call already succeeded or is in flight, in which case
    /// its result is shared, once `admission` (the caller's quota) lets it: returns what the
    /// admission holds while the call runs, the result and whether it was deduplicated, or
    /// the admission's refusal. In a fleet the admission and the fleet's first answer are
    /// asked together (one round trip for both). `hold`: how long the call may take (the
    /// fleet waits for it at most that long).
    pub(crate) async fn run<A, E, F>(
        &self,
        key: DedupKey,
        hold: Duration,
        admission: A,
        call: F,
    ) -> Result<Ran<Result<Arc<ToolResult>, CallError>>, E>
    where
        A: Future<Output = Result<Option<Running>, E>>,
        F: Future<Output = Result<Arc<ToolResult>, CallError>>,
    {
        let slot = self.slot(key);
        // The claim outlives the call by a margin: its result is stored before it lapses.
        let claim_for = hold + Duration::from_secs(1);
        let shared = (self.shared.as_ref())
            .filter(|_| !slot.initialized())
            .map(|(shared, scope)| (shared, shared_name(scope, key)));
        let (quota, mut first) = match &shared {
            Some((shared, name)) => {
                let (admitted, first) = tokio::join!(admission, shared.begin(name, claim_for));
                (admitted?, Some(first))
            }
            None => (admission.await?, None),
        };
        let mut ran = false;
        let elsewhere = AtomicBool::new(false);
        let result = slot
            .get_or_init(|| {
                ran = true;
                let elsewhere = &elsewhere;
                let first = first.take();
                async move {
                    match shared {
                        None => call.await,
                        Some((shared, name)) => {
                            let (result, hit) =
                                run_shared(shared, name, claim_for, first, call).await;
                            elsewhere.store(hit, Ordering::Relaxed);
                            result
                        }
                    }
                }
            })
            .await
            .clone();
        match (&result, ran) {
            (Err(_), true) => self.forget(key, &slot),
            (Ok(result), true) => self.account(key, &slot, result.bytes() + ENTRY_OVERHEAD),
            _ => {}
        }
        Ok((quota, result, !ran || elsewhere.load(Ordering::Relaxed)))
    }

    /// Counts a new result's `size`, forgetting the oldest results (or this one) to stay
    /// within the session's share and the host's total.
    fn account(&self, key: DedupKey, slot: &Slot, size: usize) {
        let budget = &self.budget;
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let current = entries
            .slots
            .get(&key)
            .is_some_and(|(s, _)| Arc::ptr_eq(s, slot));
        if !current {
            return;
        }
        if size > budget.session_limit {
            remove(&mut entries, budget, key);
            return;
        }
        if let Some(entry) = entries.slots.get_mut(&key) {
            entry.1 = size;
        }
        entries.bytes += size;
        budget.used.fetch_add(size, Ordering::Relaxed);
        while entries.bytes > budget.session_limit || budget.used() > budget.total_limit {
            let Some(oldest) = entries.order.front().copied() else {
                break;
            };
            remove(&mut entries, budget, oldest);
            if oldest == key {
                break;
            }
        }
    }

    fn slot(&self, key: DedupKey) -> Slot {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((slot, _)) = entries.slots.get(&key) {
            return slot.clone();
        }
        let slot = Slot::default();
        entries.slots.insert(key, (slot.clone(), 0));
        entries.order.push_back(key);
        while entries.order.len() > MAX_ENTRIES {
            let Some(oldest) = entries.order.front().copied() else {
                break;
            };
            remove(&mut entries, &self.budget, oldest);
        }
        slot
    }

    fn forget(&self, key: DedupKey, slot: &Slot) {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if entries
            .slots
            .get(&key)
            .is_some_and(|(s, _)| Arc::ptr_eq(s, slot))
        {
            remove(&mut entries, &self.budget, key);
        }
    }

    /// Bytes this session remembers.
    pub fn bytes(&self) -> usize {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .bytes
    }

    /// How many results are remembered.
    pub fn len(&self) -> usize {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .slots
            .len()
    }

    /// True when nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The name a call goes by among the fleet's results: the conversation's scope and the
/// call's key, hashed again (neither is stored as it is).
fn shared_name(scope: &[u8; 32], key: DedupKey) -> [u8; 32] {
    let mut hasher = blake3::Hasher::new_derive_key("toolhost shared dedup v1");
    hasher.update(scope);
    hasher.update(&key.0);
    *hasher.finalize().as_bytes()
}

/// The longest pause between two looks at a call another replica runs.
const LOOK_AT_MOST_EVERY: Duration = Duration::from_millis(200);

/// `call` through the fleet's results: answered from one another replica stored (true), or
/// run here (false), waiting first while another replica runs it, at most the claim's time
/// less its margin. `first`: the fleet's first answer, when it was asked already. Whatever
/// the fleet cannot answer (Redis down or slow, a result it cannot read) runs here.
async fn run_shared<F>(
    shared: &Arc<SharedDedup>,
    name: [u8; 32],
    claim_for: Duration,
    mut first: Option<Result<Begin, Down>>,
    call: F,
) -> (Result<Arc<ToolResult>, CallError>, bool)
where
    F: Future<Output = Result<Arc<ToolResult>, CallError>>,
{
    let deadline = Instant::now() + claim_for.saturating_sub(Duration::from_secs(1));
    let mut pause = Duration::from_millis(10);
    let claim = loop {
        let answer = match first.take() {
            Some(answer) => answer,
            None => shared.begin(&name, claim_for).await,
        };
        match answer {
            Ok(Begin::Hit(bytes)) => match serde_json::from_slice::<ToolResult>(&bytes) {
                Ok(result) => return (Ok(Arc::new(result)), true),
                Err(_) => break None,
            },
            Ok(Begin::Run(claim)) => break Some(claim),
            Ok(Begin::Elsewhere) if Instant::now() + pause < deadline => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(LOOK_AT_MOST_EVERY);
            }
            Ok(Begin::Elsewhere | Begin::TooLarge) | Err(_) => break None,
        }
    };
    let result = call.await;
    if let (Some(claim), Ok(value)) = (claim, &result)
        && let Ok(bytes) = serde_json::to_vec(value.as_ref())
    {
        claim.store(bytes);
    }
    (result, false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_json_sorts_keys_at_every_depth() {
        let mut a = Vec::new();
        write_canonical(&json!({"b": [1, {"y": 2, "x": "é"}], "a": null}), &mut a);
        assert_eq!(
            String::from_utf8(a).unwrap(),
            r#"{"a":null,"b":[1,{"x":"é","y":2}]}"#
        );
        let v = VersionHash([7; 32]);
        assert_eq!(
            DedupKey::new("t", &v, &json!({"a": 1, "b": 2})),
            DedupKey::new("t", &v, &json!({"b": 2, "a": 1}))
        );
        assert_ne!(
            DedupKey::new("t", &v, &json!({"a": 1})),
            DedupKey::new("u", &v, &json!({"a": 1}))
        );
        assert_ne!(
            DedupKey::new("t", &v, &json!({"a": 1})),
            DedupKey::new("t", &VersionHash([8; 32]), &json!({"a": 1}))
        );
    }
}
