//! How the host's cost grows with the size of the catalog: N = 100, 1,000, 10,000 and 100,000
//! invokers of the shipped calculator, in one ensemble file and spread over many files, with a
//! warm compile cache. For each N, in a fresh process (so memory figures are not mixed):
//!
//! - `check`: resolving the ensembles directory (what `toolhost check` does);
//! - `first call`: a new runtime, the first load and one answered call (start-up);
//! - `reload`: the whole reload after one invoker changed among the N;
//! - `tools/list`: every page of `tools/list` for a new catalog version (the listing is built
//!   once), and again for the same version (what each later client pays);
//! - memory: resident memory grown by the loaded catalog, per invoker.
//!
//! It prints a table and, for each measure, the growth factor per 10x invokers (linear is
//! about 10).
//!
//! Run: `cargo bench -p toolhost --bench scale` (about 3 minutes), or with a list of sizes:
//! `cargo bench -p toolhost --bench scale -- 1000 10000`.

use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};
use toolhost::invoke::{Host, Session};
use toolhost::mcp::tools::ToolList;
use toolhost::reload::Reloader;
use toolhost::resolve::Resolver;
use toolhost::runtime::{Runtime, RuntimeSettings, Tiering};

const SIZES: &[usize] = &[100, 1_000, 10_000, 100_000];
/// Invokers per ensemble file in the spread-out layout.
const PER_FILE: usize = 100;

#[derive(Clone, Copy)]
enum Layout {
    /// One ensemble file with N inline invokers.
    OneFile,
    /// N/100 ensemble files, each with 100 invokers, each invoker in its own file.
    ManyFiles,
}

impl Layout {
    fn parse(text: &str) -> Self {
        if text == "many" {
            Layout::ManyFiles
        } else {
            Layout::OneFile
        }
    }

    fn arg(self) -> &'static str {
        match self {
            Layout::OneFile => "one",
            Layout::ManyFiles => "many",
        }
    }
}

/// Writes N invokers of the calculator in `layout` under `root/ensembles`.
fn write_catalog(root: &Path, n: usize, layout: Layout, description: &str) -> PathBuf {
    let dir = root.join("ensembles");
    std::fs::create_dir_all(&dir).expect("ensembles dir");
    let head = |name: &str| {
        format!(
            "schema-version = 1\n\n[ensemble]\nname = \"{name}\"\ncomponent = \"{}\"\n\n",
            toolhost_testkit::CALCULATOR
        )
    };
    match layout {
        Layout::OneFile => {
            let mut text = head("calc");
            for i in 0..n {
                let extra = if i == 0 {
                    format!(", description = \"{description}\"")
                } else {
                    String::new()
                };
                text.push_str(&format!(
                    "[[invokers]]\ninvoker = {{ name = \"calc_{i}\", tool = \"calculate\"{extra} }}\n\n"
                ));
            }
            std::fs::write(dir.join("calc.toml"), text).expect("write");
        }
        Layout::ManyFiles => {
            for file in 0..n.div_ceil(PER_FILE) {
                let name = format!("calc-{file}");
                let mut text = head(&name);
                let invokers = dir.join(&name);
                std::fs::create_dir_all(&invokers).expect("invoker dir");
                for i in file * PER_FILE..((file + 1) * PER_FILE).min(n) {
                    let description = if i == 0 { description } else { "" };
                    let extra = if description.is_empty() {
                        String::new()
                    } else {
                        format!("description = \"{description}\"\n")
                    };
                    std::fs::write(
                        invokers.join(format!("calc_{i}.toml")),
                        format!(
                            "schema-version = 1\n\n[invoker]\nname = \"calc_{i}\"\ntool = \"calculate\"\n{extra}"
                        ),
                    )
                    .expect("write invoker");
                    text.push_str(&format!(
                        "[[invokers]]\nsource = \"{name}/calc_{i}.toml\"\n\n"
                    ));
                }
                std::fs::write(dir.join(format!("{name}.toml")), text).expect("write");
            }
        }
    }
    dir
}

/// Rewrites the one invoker that carries a description, with another description.
fn change_one(root: &Path, n: usize, layout: Layout) {
    match layout {
        // In one file, the whole file is the change.
        Layout::OneFile => {
            write_catalog(root, n, layout, "changed");
        }
        Layout::ManyFiles => {
            std::fs::write(
                root.join("ensembles/calc-0/calc_0.toml"),
                "schema-version = 1\n\n[invoker]\nname = \"calc_0\"\ntool = \"calculate\"\ndescription = \"changed\"\n",
            )
            .expect("rewrite");
        }
    }
}

/// Resident memory of this process, in bytes.
fn rss() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn runtime(cache: &Path) -> Arc<Runtime> {
    Arc::new(
        Runtime::new(&RuntimeSettings {
            cache_dir: Some(cache.to_path_buf()),
            max_instances: 16,
            // Cranelift's code alone: what is measured or counted here is not the tiers.
            tiering: Tiering::Off,
            ..RuntimeSettings::default()
        })
        .expect("runtime"),
    )
}

/// The best of `runs` timings of `f` (the figure least disturbed by the machine).
fn best<T>(runs: usize, mut f: impl FnMut() -> T) -> Duration {
    (0..runs)
        .map(|_| {
            let started = Instant::now();
            std::hint::black_box(f());
            started.elapsed()
        })
        .min()
        .unwrap_or_default()
}

/// Measures one N in this process and prints one JSON line.
fn measure(n: usize, layout: Layout, cache: &Path) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio");
    let temp = tempfile::tempdir().expect("temp");
    let dir = write_catalog(temp.path(), n, layout, "first");
    let runs = if n >= 100_000 { 1 } else { 3 };

    // Warm the compile cache, so no measure compiles.
    rt.block_on(Resolver::new(runtime(cache)).resolve_dir(&dir));

    let check = best(runs, || {
        let resolved = rt.block_on(Resolver::new(runtime(cache)).resolve_dir(&dir));
        assert!(resolved.refused.is_empty(), "{:?}", resolved.refused);
        assert_eq!(resolved.catalog.tools().count(), n);
    });

    let first_call = best(runs, || {
        rt.block_on(async {
            let reloader = Reloader::start(runtime(cache), dir.clone()).await;
            let host = Host::new(reloader.catalog().clone(), None);
            let outcome = host
                .invoke(
                    &Session::new("bench"),
                    "calc_0",
                    json!({"expression": "1 + 1"}),
                )
                .await;
            assert!(outcome.result.is_ok(), "{:?}", outcome.result);
        })
    });

    let reloader = rt.block_on(Reloader::start(runtime(cache), dir.clone()));

    let mut reload = Duration::MAX;
    for round in 0..runs {
        change_one(temp.path(), n, layout);
        let started = Instant::now();
        let change = rt.block_on(reloader.reload());
        reload = reload.min(started.elapsed());
        assert_eq!(change.changed, ["calc_0"], "round {round}");
        assert!(change.refused.is_empty());
        // Back to the first description, for the next round.
        write_catalog(temp.path(), n, layout, "first");
        if let Layout::ManyFiles = layout {
            std::fs::write(
                temp.path().join("ensembles/calc-0/calc_0.toml"),
                "schema-version = 1\n\n[invoker]\nname = \"calc_0\"\ntool = \"calculate\"\ndescription = \"first\"\n",
            )
            .expect("restore");
        }
        rt.block_on(reloader.reload());
    }

    let catalog = reloader.catalog().snapshot();
    let session = Session::new("list");
    let list_all = |list: &ToolList| {
        let (mut cursor, mut count) = (None::<String>, 0);
        loop {
            let (page, next) = list.page(&catalog, &session, cursor.as_deref());
            count += page.len();
            match next {
                Some(next) => cursor = Some(next),
                None => break count,
            }
        }
    };
    let list_new = best(runs, || assert_eq!(list_all(&ToolList::default()), n));
    let shared = ToolList::default();
    list_all(&shared);
    let list_again = best(runs, || assert_eq!(list_all(&shared), n));

    println!(
        "{}",
        json!({
            "n": n,
            "check_ms": check.as_secs_f64() * 1e3,
            "first_call_ms": first_call.as_secs_f64() * 1e3,
            "reload_ms": reload.as_secs_f64() * 1e3,
            "list_new_ms": list_new.as_secs_f64() * 1e3,
            "list_again_ms": list_again.as_secs_f64() * 1e3,
        })
    );
}

/// Measures, in a process that has done nothing else, how much resident memory a loaded
/// catalog of N invokers holds, per invoker (the compile cache is warm by then).
fn memory(n: usize, layout: Layout, cache: &Path) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio");
    let temp = tempfile::tempdir().expect("temp");
    let dir = write_catalog(temp.path(), n, layout, "first");
    let runtime = runtime(cache);
    let before = rss();
    let reloader = rt.block_on(Reloader::start(runtime, dir));
    let after = rss();
    assert_eq!(reloader.catalog().snapshot().tools().count(), n);
    println!(
        "{}",
        json!({ "bytes_per_invoker": after.saturating_sub(before) / n })
    );
}

const MEASURES: &[(&str, &str)] = &[
    ("check_ms", "check (ms)"),
    ("first_call_ms", "start-up to first call (ms)"),
    ("reload_ms", "reload after one change (ms)"),
    ("list_new_ms", "tools/list, new version (ms)"),
    ("list_again_ms", "tools/list, same version (ms)"),
    ("bytes_per_invoker", "memory per invoker (bytes)"),
];

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let cache = std::env::temp_dir().join("toolhost-scale-bench-cache");
    if let [flag, n, layout] = args.as_slice() {
        let n = n.parse().expect("N");
        match flag.as_str() {
            "--one" => measure(n, Layout::parse(layout), &cache),
            "--memory" => memory(n, Layout::parse(layout), &cache),
            other => panic!("unknown flag {other}"),
        }
        return;
    }
    let sizes: Vec<usize> = if args.is_empty() {
        SIZES.to_vec()
    } else {
        args.iter().filter_map(|a| a.parse().ok()).collect()
    };
    let me = std::env::current_exe().expect("this benchmark");
    for layout in [Layout::OneFile, Layout::ManyFiles] {
        let run = |flag: &str, n: usize| -> serde_json::Value {
            let output = Command::new(&me)
                .args([flag, &n.to_string(), layout.arg()])
                .output()
                .expect("run one size");
            assert!(
                output.status.success(),
                "N = {n}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            serde_json::from_slice(&output.stdout).expect("a JSON line")
        };
        let rows: Vec<serde_json::Value> = sizes
            .iter()
            .map(|&n| {
                let mut row = run("--one", n);
                row["bytes_per_invoker"] = run("--memory", n)["bytes_per_invoker"].clone();
                row
            })
            .collect();
        match layout {
            Layout::OneFile => println!("\none file"),
            Layout::ManyFiles => println!("\nmany files ({PER_FILE} invokers per ensemble file)"),
        }
        print!("{:32}", "invokers");
        for n in &sizes {
            print!("{n:>12}");
        }
        println!("  growth per 10x");
        for (key, label) in MEASURES {
            print!("{label:32}");
            let values: Vec<f64> = rows
                .iter()
                .map(|r| r[key].as_f64().unwrap_or(0.0))
                .collect();
            for value in &values {
                print!("{value:>12.1}");
            }
            let growth: Vec<String> = values
                .windows(2)
                .zip(sizes.windows(2))
                .map(|(v, n)| {
                    let tenfold = (n[1] as f64 / n[0] as f64).log10();
                    format!("{:.1}x", (v[1] / v[0]).powf(1.0 / tenfold))
                })
                .collect();
            println!("  {}", growth.join(" "));
        }
    }
}
