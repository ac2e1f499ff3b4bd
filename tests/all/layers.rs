//! The crate layout (`crates/`, the map in `host/src/lib.rs`), checked: every layer depends
//! only on layers below it, the callers of tools (web, mcp, agent) never on the runtime or the
//! registry, the map lists the layers in order, and no source file (the tests' included) grows
//! past the size where it stops being one concern.

use std::path::{Path, PathBuf};

/// The layers, top first (the order of the map in `host/src/lib.rs`), by directory under
/// `crates/`. `toolhost` (host/) sits above them all.
const LAYERS: &[&str] = &[
    "http", "web", "mcp", "agent", "access", "import", "core", "state", "registry", "runtime",
    "config", "audit", "contract",
];

/// Past this many lines a file is split along its concerns.
const MAX_LINES: usize = 650;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ has a parent")
        .to_path_buf()
}

fn rust_files(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// The toolhost crates a manifest depends on (normal dependencies), by layer name.
fn toolhost_dependencies(manifest: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(manifest).expect("read Cargo.toml");
    let table: toml::Table = text.parse().expect("Cargo.toml parses");
    let Some(dependencies) = table.get("dependencies").and_then(|d| d.as_table()) else {
        return Vec::new();
    };
    dependencies
        .keys()
        .filter_map(|name| name.strip_prefix("toolhost-"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_crate_is_a_listed_layer() {
    let mut found: Vec<String> = std::fs::read_dir(workspace().join("crates"))
        .expect("read crates/")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    found.sort();
    let mut listed: Vec<String> = LAYERS.iter().map(|l| l.to_string()).collect();
    listed.sort();
    assert_eq!(found, listed, "crates/ and the list of layers differ");
}

#[test]
fn crates_depend_only_on_the_layers_below_them() {
    let rank = |m: &str| LAYERS.iter().position(|l| *l == m);
    let mut upward = Vec::new();
    for layer in LAYERS {
        let manifest = workspace().join("crates").join(layer).join("Cargo.toml");
        for dependency in toolhost_dependencies(&manifest) {
            match rank(&dependency) {
                Some(below) if below > rank(layer).expect("listed") => {}
                Some(_) => upward.push(format!("{layer} depends on {dependency}, not below it")),
                None => upward.push(format!(
                    "{layer} depends on toolhost-{dependency}, no layer"
                )),
            }
        }
    }
    assert!(upward.is_empty(), "{}", upward.join("\n"));
    // The bottom stays the bottom: the contract is what every layer shares, so it needs none.
    let contract = workspace().join("crates/contract/Cargo.toml");
    assert!(toolhost_dependencies(&contract).is_empty());
}

/// The layers a caller of tools sees are the contract and the core: the MCP server and the
/// agent loop reach tools only through `invoke`, never by running a component themselves.
#[test]
fn callers_of_tools_do_not_reach_for_the_runtime() {
    for caller in ["web", "mcp", "agent"] {
        let manifest = workspace().join("crates").join(caller).join("Cargo.toml");
        let dependencies = toolhost_dependencies(&manifest);
        for below_core in ["runtime", "registry"] {
            assert!(
                !dependencies.iter().any(|d| d == below_core),
                "{caller} depends on {below_core}: callers of tools go through core's invoke"
            );
        }
    }
}

/// Every package `package` depends on, however far down (normal and build dependencies),
/// read from `Cargo.lock`.
fn locked_dependencies(package: &str) -> std::collections::BTreeSet<String> {
    let text = std::fs::read_to_string(workspace().join("Cargo.lock")).expect("Cargo.lock");
    let lock: toml::Table = text.parse().expect("Cargo.lock parses");
    let packages = lock["package"].as_array().expect("[[package]]");
    let dependencies_of = |name: &str| -> Vec<String> {
        packages
            .iter()
            .filter(|p| p["name"].as_str() == Some(name))
            .flat_map(|p| p.get("dependencies").and_then(|d| d.as_array()).cloned())
            .flatten()
            .filter_map(|d| Some(d.as_str()?.split(' ').next()?.to_string()))
            .collect()
    };
    let mut seen = std::collections::BTreeSet::new();
    let mut next = vec![package.to_string()];
    while let Some(name) = next.pop() {
        for dependency in dependencies_of(&name) {
            if seen.insert(dependency.clone()) {
                next.push(dependency);
            }
        }
    }
    seen
}

/// The configuration (and with it every golden case of `tests/ui/config`) builds and runs
/// without an engine, an HTTP client or an async runtime.
#[test]
fn configuration_needs_no_engine() {
    let below = locked_dependencies("toolhost-config");
    assert!(
        below.contains("toml"),
        "the walk of Cargo.lock found nothing"
    );
    for heavy in ["wasmtime", "cranelift-codegen", "reqwest", "tokio", "rmcp"] {
        assert!(
            !below.contains(heavy),
            "toolhost-config depends on {heavy}: its checks need no engine"
        );
    }
}

#[test]
fn no_source_file_is_over_the_size_of_one_concern() {
    let mut files = Vec::new();
    rust_files(&workspace().join("host/src"), &mut files);
    // The tests live by the same rule: split by behaviour, not by count.
    rust_files(&workspace().join("tests/all"), &mut files);
    for layer in LAYERS {
        rust_files(
            &workspace().join("crates").join(layer).join("src"),
            &mut files,
        );
    }
    assert!(files.len() > 50, "the sources were not found");
    let long: Vec<String> = files
        .iter()
        .filter_map(|file| {
            let lines = std::fs::read_to_string(file).expect("read").lines().count();
            (lines > MAX_LINES).then(|| format!("{}: {lines} lines", file.display()))
        })
        .collect();
    assert!(long.is_empty(), "split these files:\n{}", long.join("\n"));
}

#[test]
fn the_layout_doc_lists_the_layers_in_this_order() {
    let lib = std::fs::read_to_string(workspace().join("host/src/lib.rs")).expect("lib.rs");
    let listed: Vec<&str> = lib
        .lines()
        .filter_map(|line| line.strip_prefix("//! "))
        .filter_map(|line| line.split_whitespace().next())
        .filter_map(|word| word.strip_prefix("toolhost-"))
        .collect();
    assert_eq!(
        listed, LAYERS,
        "host/src/lib.rs lists the layers in another order"
    );
}

/// The modules of toolhost-core, top first (its lib.rs draws them): a module takes nothing
/// from one above it, so the core reads from the bottom up and has no circle of files.
const CORE_LAYERS: &[&str] = &[
    "reload",
    "resolve",
    "invoke",
    "catalog",
    "prompts",
    "resources",
    "import",
    "backend",
    "content",
    "metrics",
];

#[test]
fn the_modules_of_core_import_only_from_those_below_them() {
    let src = workspace().join("crates/core/src");
    let rank = |m: &str| CORE_LAYERS.iter().position(|l| *l == m);
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut upward = Vec::new();
    for file in files {
        let relative = file.strip_prefix(&src).expect("under src");
        let module = relative
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .map(|m| m.trim_end_matches(".rs"))
            .expect("a module");
        let Some(own) = rank(module) else { continue };
        let text = std::fs::read_to_string(&file).expect("read");
        for (number, line) in text.lines().enumerate() {
            // Code only: documentation may point anywhere.
            if line.trim_start().starts_with("//") {
                continue;
            }
            if line.contains("crate::{") {
                upward.push(format!(
                    "{}:{}: one `crate::module` path per import, so that this test sees it",
                    relative.display(),
                    number + 1
                ));
            }
            for (at, _) in line.match_indices("crate::") {
                let named = line[at + "crate::".len()..]
                    .split(|c: char| !c.is_alphanumeric() && c != '_')
                    .next()
                    .unwrap_or_default();
                if rank(named).is_some_and(|other| other < own) {
                    upward.push(format!(
                        "{}:{}: {module} takes from {named}, above it",
                        relative.display(),
                        number + 1
                    ));
                }
            }
        }
    }
    assert!(upward.is_empty(), "{}", upward.join("\n"));
}

/// The top-level modules of the crate at `src` and those each takes from (by `crate::name`
/// anywhere in it, and `super::name` in its own top file), code only.
fn module_edges(
    src: &Path,
) -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let module_of = |file: &Path| -> Option<(String, bool)> {
        let relative = file.strip_prefix(src).ok()?;
        let mut parts = relative.components();
        let first = parts.next()?.as_os_str().to_str()?.to_string();
        let rest: Vec<_> = parts.collect();
        let top = rest.is_empty() || (rest.len() == 1 && rest[0].as_os_str() == "mod.rs");
        let name = first.trim_end_matches(".rs").to_string();
        (name != "lib" && name != "main").then_some((name, top))
    };
    let names: std::collections::BTreeSet<String> = files
        .iter()
        .filter_map(|f| module_of(f))
        .map(|(m, _)| m)
        .collect();
    let mut edges: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> = names
        .iter()
        .map(|m| (m.clone(), Default::default()))
        .collect();
    for file in &files {
        let Some((module, top)) = module_of(file) else {
            continue;
        };
        let text = std::fs::read_to_string(file).expect("read");
        // Tests may reach anywhere: the `#[cfg(test)]` module at the end is not counted.
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
            let mut prefixes = vec!["crate::"];
            if top {
                prefixes.push("super::");
            }
            for prefix in prefixes {
                for (at, _) in line.match_indices(prefix) {
                    let rest = &line[at + prefix.len()..];
                    // `crate::{a, b}` and `super::{a, b}` name several.
                    let named: Vec<&str> = match rest.strip_prefix('{') {
                        Some(list) => list
                            .split('}')
                            .next()
                            .unwrap_or_default()
                            .split(',')
                            .collect(),
                        None => vec![rest],
                    };
                    for name in named {
                        let name = name
                            .trim()
                            .split(|c: char| !c.is_alphanumeric() && c != '_')
                            .next()
                            .unwrap_or_default();
                        if name != module && names.contains(name) {
                            edges
                                .get_mut(&module)
                                .expect("a module")
                                .insert(name.into());
                        }
                    }
                }
            }
        }
    }
    edges
}

/// No crate has a circle of files: each crate's top-level modules import one another in one
/// direction only, so that each reads from the bottom up.
#[test]
fn no_crate_has_a_circle_of_files() {
    let mut circles = Vec::new();
    for layer in LAYERS {
        let edges = module_edges(&workspace().join("crates").join(layer).join("src"));
        // A depth-first walk; a module met again on the path closes a circle.
        fn walk(
            module: &str,
            edges: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
            path: &mut Vec<String>,
            done: &mut std::collections::BTreeSet<String>,
            circles: &mut Vec<String>,
        ) {
            if let Some(at) = path.iter().position(|m| m == module) {
                circles.push(format!("{} -> {module}", path[at..].join(" -> ")));
                return;
            }
            if !done.insert(module.to_string()) {
                return;
            }
            path.push(module.to_string());
            for next in &edges[module] {
                walk(next, edges, path, done, circles);
            }
            path.pop();
        }
        let mut done = std::collections::BTreeSet::new();
        let mut found = Vec::new();
        for module in edges.keys() {
            walk(module, &edges, &mut Vec::new(), &mut done, &mut found);
        }
        circles.extend(found.into_iter().map(|circle| format!("{layer}: {circle}")));
    }
    assert!(circles.is_empty(), "{}", circles.join("\n"));
}
