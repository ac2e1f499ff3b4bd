//! The search: every refusal found, what follows from one not said, lists narrowed to the
//! element refused, and the bounds (windows, the budget, the errors looked for).

use super::*;
use crate::v1::EnsembleFile;
use crate::{FileKind, MAX_ERRORS_PER_FILE, SourceFile, in_file_order};
use std::path::PathBuf;

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    head: Head,
    #[serde(default)]
    items: Vec<Entry>,
}

// Their fields are read by serde only.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct Head {
    name: crate::EnsembleName,
    size: Option<u8>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct Entry {
    name: crate::ToolName,
}

fn search(text: &str) -> Found<File> {
    deserialize(text, DeTable::parse(text).unwrap())
}

#[test]
fn every_refusal_is_found_and_what_only_follows_from_one_is_not() {
    let text = "[head]\nname = \"ok\"\nsize = 300\ncolour = 1\n\
                [[items]]\nname = \"a b\"\n[[items]]\nname = \"fine\"\n[[items]]\nnom = \"x\"\n";
    let found = search(text);
    let messages: Vec<&str> = found.errors.iter().map(|(_, m)| m.as_str()).collect();
    // serde's order (keys sorted), each once; the items whose name was refused are left
    // out without "missing field `name`", the one that never had a name is said to lack it.
    assert_eq!(messages.len(), 5, "{messages:?}");
    assert!(
        messages[0].starts_with("unknown field `colour`"),
        "{messages:?}"
    );
    assert!(messages[1].contains("300"), "{messages:?}");
    assert!(messages[2].contains("\"a b\""), "{messages:?}");
    assert!(
        messages[3].starts_with("unknown field `nom`"),
        "{messages:?}"
    );
    assert_eq!(messages[4], "missing field `name`");
    let file = found.value.expect("what is left deserializes");
    assert_eq!(file.items.len(), 1);
    assert_eq!(file.head.size, None);
    assert!(found.refused.touches(&["head", "size"]));
    assert!(found.refused.touches(&["items"]));
    assert!(!found.refused.touches(&["head", "name"]));
    assert!(found.complete);
}

#[test]
fn a_refused_element_of_a_list_is_left_out_alone() {
    #[derive(Debug, serde::Deserialize)]
    struct Lists {
        env: Vec<Spanned<crate::EnvVarName>>,
    }
    let text = "env = [\"TZ\", \"lower case\", \"HOME\", \"a b\"]\n";
    let found: Found<Lists> = deserialize(text, DeTable::parse(text).unwrap());
    assert_eq!(found.errors.len(), 2, "{:?}", found.errors);
    let kept: Vec<String> = (found.value.expect("the rest").env.iter())
        .map(|v| v.get_ref().to_string())
        .collect();
    assert_eq!(kept, ["TZ", "HOME"]);
    let refused: Vec<&toml::Value> = found
        .refused
        .values_under(&["env"])
        .map(|(_, v)| v)
        .collect();
    assert_eq!(
        refused,
        [&toml::Value::from("lower case"), &toml::Value::from("a b")]
    );
}

#[test]
fn a_file_of_ten_thousand_errors_is_searched_in_windows_and_said_in_a_hundred() {
    let mut text = String::from("schema-version = 1\n[ensemble]\nname = \"big\"\n");
    for n in 0..10_000 {
        text.push_str(&format!("[[invokers]]\nname = \"t{n}\"\ncolour = {n}\n"));
    }
    let source = SourceFile::new(PathBuf::from("big.toml"), text);
    let parsed = source.parse_all::<EnsembleFile>(FileKind::Ensemble);
    // The search stops at MAX_FOUND errors, the first in file order among them, within
    // its budget: windows of the array keep each step small (a step through the whole
    // file for each error would have spent the budget many times over).
    assert_eq!(parsed.errors.len(), MAX_FOUND + 1);
    assert!(parsed.value.is_none());
    let said = in_file_order(parsed.errors, &source.path);
    assert_eq!(said.len(), MAX_ERRORS_PER_FILE + 2);
    assert_eq!(said[0].position(), "big.toml:6:1");
    assert_eq!(said[MAX_ERRORS_PER_FILE - 1].position(), "big.toml:303:1");
    assert_eq!(
        said[MAX_ERRORS_PER_FILE].message,
        "and 900 more errors in this file, not shown: fix these first"
    );
    assert!(
        said[MAX_ERRORS_PER_FILE + 1]
            .message
            .starts_with("toolhost stopped looking")
    );
}

#[test]
fn a_search_that_would_cost_too_much_stops_and_says_so() {
    // Ten thousand unknown keys in one table: each search deserializes the table again,
    // so the budget ends the search long before the last.
    let mut text = String::from("schema-version = 1\n[ensemble]\nname = \"big\"\n");
    for n in 0..10_000 {
        text.push_str(&format!("colour{n} = {n}\n"));
    }
    let source = SourceFile::new(PathBuf::from("big.toml"), text);
    let parsed = source.parse_all::<EnsembleFile>(FileKind::Ensemble);
    assert!(parsed.value.is_none());
    let budget = 10_004 * WORK_FACTOR + WORK_BASE;
    assert!(
        parsed.errors.len() <= 2 + budget / 10_000,
        "{}",
        parsed.errors.len()
    );
    let last = parsed.errors.last().expect("errors");
    assert!(
        last.message.starts_with("toolhost stopped looking"),
        "{}",
        last.message
    );
}
