//! The chat database's own tests: what it keeps across reopening, its caps, whose
//! conversations are whose, and a file deleted or replaced while it is open.

use super::sqlite::Sqlite as Store;
use super::*;
use serde_json::json;

fn store(dir: &tempfile::TempDir, max: usize) -> Store {
    let limits = StoreLimits {
        max_conversations: max,
        ..StoreLimits::default()
    };
    Store::open(&dir.path().join("state/chat.sqlite3"), limits).expect("open")
}

#[test]
fn conversations_survive_reopening() {
    let dir = tempfile::tempdir().expect("dir");
    let mut conversation = Conversation::new(Some("terse".into()));
    conversation.push_user("hi");
    {
        let store = store(&dir, 10);
        store
            .create("a", "hi", &conversation, None)
            .expect("create");
        conversation.push_user("again");
        let log = [json!({"type": "user", "text": "hi"})];
        let record = RunRecord {
            conversation: conversation.clone(),
            log: log.to_vec(),
            allowed_tools: vec!["say".to_string()],
            pending_question: Some("q1".into()),
        };
        assert!(store.save_run("a", &record).expect("save"));
        let record = RunRecord {
            log: vec![json!({"type": "user", "text": "again"})],
            ..record
        };
        assert!(store.save_run("a", &record).expect("save"));
    }
    let store = store(&dir, 10);
    let stored = store.get("a", None).expect("get").expect("kept");
    assert_eq!(stored.conversation, conversation);
    assert_eq!(stored.log.len(), 2);
    assert_eq!(stored.log[1]["text"], "again");
    assert_eq!(stored.allowed_tools, ["say"]);
    assert_eq!(stored.pending_question.as_deref(), Some("q1"));
    assert_eq!(store.list(None).expect("list").len(), 1);
    assert!(store.delete("a", None).expect("delete"));
    assert!(store.get("a", None).expect("get").is_none());
    assert!(!store.delete("a", None).expect("delete"));
}

#[test]
fn a_conversation_is_its_owners_alone() {
    let dir = tempfile::tempdir().expect("dir");
    let store = store(&dir, 10);
    let conversation = Conversation::default();
    store
        .create("a", "ann's", &conversation, Some("ann"))
        .expect("a");
    store.create("l", "local", &conversation, None).expect("l");
    let ids = |owner| -> Vec<String> {
        store
            .list(owner)
            .expect("list")
            .into_iter()
            .map(|s| s.id)
            .collect()
    };
    assert_eq!(ids(Some("ann")), ["a"]);
    assert_eq!(ids(Some("bob")), Vec::<String>::new());
    assert_eq!(ids(None), ["l"]);
    assert!(store.get("a", Some("bob")).expect("get").is_none());
    assert!(store.sizes("a", None).expect("sizes").is_none());
    assert!(!store.owns("a", Some("bob")).expect("owns"));
    assert!(store.owns("a", Some("ann")).expect("owns"));
    assert!(!store.delete("a", Some("bob")).expect("delete"));
    assert!(store.get("a", Some("ann")).expect("get").is_some());
}

#[test]
fn the_most_recently_updated_comes_first_and_the_cap_holds() {
    let dir = tempfile::tempdir().expect("dir");
    let store = store(&dir, 2);
    let conversation = Conversation::default();
    store.create("a", "first", &conversation, None).expect("a");
    store.create("b", "second", &conversation, None).expect("b");
    let full = store
        .create("c", "third", &conversation, None)
        .expect_err("full");
    assert!(full.to_string().contains("max-conversations"), "{full}");
    let record = RunRecord {
        conversation: conversation.clone(),
        log: Vec::new(),
        allowed_tools: Vec::new(),
        pending_question: None,
    };
    store.save_run("a", &record).expect("save");
    let ids: Vec<String> = store
        .list(None)
        .expect("list")
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(ids, ["a", "b"]);
}

#[test]
fn a_file_that_is_not_a_database_is_refused_with_its_path() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("chat.sqlite3");
    std::fs::write(&path, vec![b'x'; 8192]).expect("write");
    let error = Store::open(&path, StoreLimits::default()).expect_err("corrupt");
    let text = error.to_string();
    assert!(text.contains("chat.sqlite3"), "{text}");
    assert!(text.contains("not a database"), "{text}");
}

#[test]
fn a_database_deleted_or_replaced_while_open_is_refused_until_it_is_back() {
    let dir = tempfile::tempdir().expect("dir");
    let store = store(&dir, 10);
    let conversation = Conversation::default();
    store.create("a", "first", &conversation, None).expect("a");
    let path = store.path().to_path_buf();
    let aside = dir.path().join("aside.sqlite3");
    std::fs::rename(&path, &aside).expect("move away");
    let refused = store
        .create("b", "second", &conversation, None)
        .expect_err("gone");
    assert!(matches!(refused, StoreError::Detached { .. }), "{refused}");
    assert!(
        refused.to_string().contains("deleted or moved away"),
        "{refused}"
    );
    assert!(store.list(None).is_err(), "a read is refused too");
    std::fs::create_dir(&path).expect("a directory where it was");
    let refused = store.get("a", None).expect_err("a directory");
    assert!(refused.to_string().contains("replaced"), "{refused}");
    std::fs::remove_dir(&path).expect("rmdir");
    std::fs::rename(&aside, &path).expect("back");
    assert_eq!(store.list(None).expect("back").len(), 1);
}

#[test]
fn a_database_past_its_size_bound_takes_no_new_conversation_until_some_are_deleted() {
    let dir = tempfile::tempdir().expect("dir");
    let limits = StoreLimits {
        max_conversations: 100,
        max_bytes: 1 << 20,
    };
    let store = Store::open(&dir.path().join("chat.sqlite3"), limits).expect("open");
    let mut big = Conversation::default();
    big.push_user("x".repeat(600_000));
    store.create("a", "a", &big, None).expect("a");
    store
        .create("b", "b", &big, None)
        .expect("b: 600 KB in use");
    let full = store.create("c", "c", &big, None).expect_err("past 1 MiB");
    assert!(matches!(full, StoreError::DatabaseFull { .. }), "{full}");
    assert!(full.to_string().contains("max-database-mib"), "{full}");
    assert!(store.has_room().is_err());
    // A run that was going when the bound was reached keeps its conversation, not its log.
    let record = RunRecord {
        conversation: big.clone(),
        log: vec![json!({"type": "text", "text": "w".repeat(500_000)})],
        allowed_tools: Vec::new(),
        pending_question: None,
    };
    assert!(store.save_run("b", &record).expect("saved"));
    let kept = store.get("b", None).expect("get").expect("b");
    assert_eq!(kept.log.len(), 1);
    assert!(
        kept.log[0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("not kept"))
    );
    assert!(store.delete("a", None).expect("delete"));
    store.has_room().expect("room again after a deletion");
    store.create("c", "c", &big, None).expect("c");
}
