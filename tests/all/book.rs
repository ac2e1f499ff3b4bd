//! The book (docs/, built with mdBook) holds together: it builds without a warning, every link
//! between its pages (and from the README) reaches a file that exists and, for `#anchor`, a
//! heading of that page, and every `toolhost` command its examples show names a command that
//! exists and only flags that command's `--help` knows.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

fn repository() -> PathBuf {
    Path::new(toolhost_testkit::REPO_ROOT).to_path_buf()
}

/// The pages SUMMARY.md lists, the front page, and the files the book includes.
fn pages() -> Vec<PathBuf> {
    let docs = repository().join("docs");
    let summary = std::fs::read_to_string(docs.join("SUMMARY.md")).expect("SUMMARY.md");
    let mut pages: Vec<PathBuf> = links(&summary)
        .into_iter()
        .map(|target| docs.join(target))
        .collect();
    pages.push(docs.join("SUMMARY.md"));
    pages.push(repository().join("README.md"));
    pages.push(repository().join("SECURITY.md"));
    pages.push(repository().join("BENCHMARKS.md"));
    assert!(pages.len() > 25, "SUMMARY.md lists too few pages");
    pages
}

/// The targets of a page's Markdown links, outside code blocks and code spans.
fn links(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut in_code = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        // Code spans hold examples, not links.
        let prose: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            found.push(after[..end].to_string());
            rest = &after[end..];
        }
    }
    found
}

/// A heading's anchor as GitHub and mdBook make it: lowercase, letters, digits, `-` and `_`
/// kept, spaces to `-`, the rest dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    let mut in_code = false;
    let mut found = BTreeSet::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        } else if !in_code && line.starts_with('#') {
            found.insert(anchor(line.trim_start_matches('#')));
        }
    }
    found
}

#[test]
fn the_book_builds_without_a_warning() {
    let tools = crate::mcp_list::test_tools();
    let out = tempfile::tempdir().expect("temp");
    let output = Command::new(tools.join("mdbook/bin/mdbook"))
        .arg("build")
        .arg(repository().join("docs"))
        .arg("--dest-dir")
        .arg(out.path())
        .output()
        .expect("mdbook runs (scripts/test-tools.sh installs it)");
    let printed = String::from_utf8_lossy(&output.stderr).into_owned()
        + &String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{printed}");
    assert!(
        !printed.contains("WARN") && !printed.contains("ERROR"),
        "{printed}"
    );
    assert!(out.path().join("quickstart/python.html").is_file());
    assert!(out.path().join("security.html").is_file());
}

#[test]
fn every_link_reaches_a_page_and_a_heading_that_exist() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("a page");
        let dir = page.parent().expect("a folder");
        for target in links(&text) {
            if target.starts_with("http://")
                || target.starts_with("https://")
                || target.starts_with("mailto:")
            {
                continue;
            }
            let (path, fragment) = match target.split_once('#') {
                Some((path, fragment)) => (path, Some(fragment)),
                None => (target.as_str(), None),
            };
            checked += 1;
            let file = if path.is_empty() {
                page.clone()
            } else {
                dir.join(path)
            };
            if !file.exists() {
                broken.push(format!("{}: {target}: no such file", page.display()));
                continue;
            }
            if let Some(fragment) = fragment
                && file.extension().is_some_and(|e| e == "md")
            {
                let headings = anchors(&std::fs::read_to_string(&file).expect("read"));
                if !headings.contains(fragment) {
                    broken.push(format!("{}: {target}: no such heading", page.display()));
                }
            }
        }
    }
    assert!(checked > 100, "only {checked} links were found");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// `toolhost`'s help for a command path (`[]`, `["cache"]`, ...), asked once.
fn help(cache: &mut HashMap<Vec<String>, String>, path: &[String]) -> String {
    cache
        .entry(path.to_vec())
        .or_insert_with(|| {
            let output = Command::new(env!("CARGO_BIN_EXE_toolhost"))
                .args(path)
                .arg("--help")
                .output()
                .expect("toolhost runs");
            String::from_utf8_lossy(&output.stdout).into_owned()
        })
        .clone()
}

/// The subcommands a help text lists.
fn commands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

/// A shell line's words (quotes kept together), up to the first pipe, redirection, `;`,
/// `&&`, `&` or comment.
fn words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quote = None;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => quote = Some(c),
            (None, c) if c.is_whitespace() => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            (None, c) => word.push(c),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    let ends = ["|", "||", "&&", ";", "&", ">", "<", "2>&1", "#"];
    words
        .into_iter()
        .take_while(|w| !ends.contains(&w.as_str()) && !w.starts_with('>') && !w.starts_with('#'))
        .collect()
}

/// Checks one `toolhost ...` line: its commands exist and its flags are theirs.
fn check_command(line: &str, cache: &mut HashMap<Vec<String>, String>) -> Result<(), String> {
    let words = words(line);
    let mut path: Vec<String> = Vec::new();
    let mut known = commands(&help(cache, &path));
    let mut flags = Vec::new();
    let mut iter = words.iter().skip(1).peekable();
    while let Some(word) = iter.next() {
        if let Some(flag) = word.strip_prefix('-') {
            let name = format!("-{}", flag.split('=').next().unwrap_or(flag));
            let text = help(cache, &path);
            // A flag that takes a value (`--config <FILE>`) takes the next word too.
            if !word.contains('=') && text.contains(&format!("{name} <")) {
                iter.next();
            }
            flags.push(name);
        } else if known.contains(word) {
            path.push(word.clone());
            known = commands(&help(cache, &path));
        } else if path.is_empty() {
            return Err(format!("`{word}` is not a toolhost command"));
        }
    }
    if path.is_empty() && !flags.iter().any(|f| f == "--help" || f == "--version") {
        return Err("no command".into());
    }
    let text = help(cache, &path);
    for flag in flags {
        let known = text.match_indices(&flag).any(|(at, _)| {
            let next = text[at + flag.len()..].chars().next();
            !next.is_some_and(|c| c.is_alphanumeric() || c == '-')
        });
        if !known && flag != "--help" && flag != "-h" {
            return Err(format!(
                "`toolhost {} --help` does not know {flag}",
                path.join(" ")
            ));
        }
    }
    Ok(())
}

#[test]
fn every_command_the_book_shows_exists_with_its_flags() {
    let mut cache = HashMap::new();
    let mut wrong = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("a page");
        let mut block: Option<String> = None;
        let mut pending = String::new();
        for line in text.lines() {
            if let Some(info) = line.trim_start().strip_prefix("```") {
                block = match block {
                    None => Some(info.to_string()),
                    Some(_) => None,
                };
                continue;
            }
            let Some(info) = &block else { continue };
            if !matches!(info.as_str(), "sh" | "console" | "bash" | "") {
                continue;
            }
            // A console block's commands follow `$ `; the rest is output.
            let line = match (info.as_str(), line.trim_start().strip_prefix("$ ")) {
                ("console", Some(command)) => command,
                ("console", None) => continue,
                _ => line.trim_start(),
            };
            pending.push_str(line.trim_end_matches('\\'));
            pending.push(' ');
            if line.ends_with('\\') {
                continue;
            }
            let command = std::mem::take(&mut pending);
            let first = command.split_whitespace().next().unwrap_or_default();
            if first == "toolhost" || first.ends_with("/toolhost") {
                checked += 1;
                if let Err(e) = check_command(&command, &mut cache) {
                    wrong.push(format!("{}: `{}`: {e}", page.display(), command.trim()));
                }
            }
        }
    }
    assert!(checked > 30, "only {checked} commands were found");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_command_check_catches_a_wrong_command_or_flag() {
    let mut cache = HashMap::new();
    for good in [
        "toolhost --ensembles ensembles call hello '{\"name\": \"Ada\"}'",
        "toolhost cache prune --keep 2",
        "toolhost add-docs x.wasm --wit wit -o y.wasm | tee log",
    ] {
        assert_eq!(check_command(good, &mut cache), Ok(()), "{good}");
    }
    for bad in [
        "toolhost cal hello",
        "toolhost call hello --frobnicate",
        "toolhost cache prune --wit x",
        "toolhost --ensembles",
    ] {
        assert!(check_command(bad, &mut cache).is_err(), "{bad}");
    }
}
