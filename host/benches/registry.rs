//! Components from an OCI registry, beside the same component from a path (BENCHMARKS.md):
//!
//! - `registry/first_call/cold_pull`: an empty cache: resolve the tag, pull, compile, call.
//! - `registry/first_call/warm_store`: a restarted host whose store and compile cache hold
//!   the component: resolve the tag, read the store, load the compiled code, call.
//! - `registry/first_call/path`: the same component from a file, compiled already: read,
//!   load, call. The baseline of the two above.
//! - `registry/reload/tag` and `registry/reload/path`: a reload of a loaded catalog that
//!   changes nothing; the difference is the tag's manifest request.
//!
//! Against Debian's `docker-registry` on 127.0.0.1 (`scripts/test-tools.sh` installs it).
//! Run: `cargo bench -p toolhost --bench registry`.

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use toolhost::catalog::LiveCatalog;
use toolhost::invoke::{Host, Session};
use toolhost::registry::{Fetch, Reference, Registry, RegistrySettings};
use toolhost::resolve::Resolver;
use toolhost::runtime::{Runtime, RuntimeSettings, Tiering};

fn ensemble(component: &str) -> String {
    format!(
        "schema-version = 1\n[ensemble]\nname = \"echo\"\ncomponent = \"{component}\"\n\n\
         [defaults]\ndedup = \"off\"\n\n[[invokers]]\ninvoker = {{ name = \"echo\" }}\n"
    )
}

fn resolver(cache: &Path) -> Resolver {
    let settings = RuntimeSettings {
        cache_dir: Some(cache.to_path_buf()),
        // Cranelift's code alone: what is measured or counted here is not the tiers.
        tiering: Tiering::Off,
        ..RuntimeSettings::default()
    };
    let runtime = Arc::new(Runtime::new(&settings).expect("runtime"));
    let registry = RegistrySettings {
        store: Some(cache.join("oci")),
        ..RegistrySettings::default()
    };
    Resolver::new(runtime).with_registry(Arc::new(Registry::new(registry)), Fetch::Missing)
}

/// Resolves `ensembles` on a host over `cache` and makes the first call.
async fn first_call(cache: &Path, ensembles: &Path) -> Duration {
    let started = Instant::now();
    let resolver = resolver(cache);
    let resolved = resolver.resolve_dir(ensembles).await;
    assert!(resolved.refused.is_empty(), "{:?}", resolved.refused);
    let host = Host::new(Arc::new(LiveCatalog::new(resolved.catalog)), None);
    let outcome = host
        .invoke(&Session::new("bench"), "echo", json!({"text": "hi"}))
        .await;
    assert!(outcome.result.is_ok(), "{:?}", outcome.result);
    started.elapsed()
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().expect("tokio");
    let temp = tempfile::tempdir().expect("temp");
    let registry = toolhost_testkit::registry::LocalRegistry::start(temp.path(), None);
    let reference = registry.reference("bench/echo:1");
    let echo = std::fs::read(toolhost_testkit::ECHO).expect("echo.wasm");
    rt.block_on(toolhost::registry::push(
        &RegistrySettings::default(),
        &Reference::parse(&reference).expect("reference"),
        echo.clone(),
        &[],
        &[],
        None,
    ))
    .expect("push");
    let by_tag = temp.path().join("by-tag");
    let by_path = temp.path().join("by-path");
    for dir in [&by_tag, &by_path] {
        std::fs::create_dir_all(dir).expect("dir");
    }
    std::fs::write(temp.path().join("echo.wasm"), &echo).expect("echo");
    std::fs::write(by_tag.join("echo.toml"), ensemble(&reference)).expect("toml");
    std::fs::write(by_path.join("echo.toml"), ensemble("../echo.wasm")).expect("toml");
    let warm = temp.path().join("warm-cache");
    rt.block_on(first_call(&warm, &by_tag));
    rt.block_on(first_call(&warm, &by_path));

    let mut group = c.benchmark_group("registry/first_call");
    group.sample_size(20);
    group.bench_function("cold_pull", |b| {
        b.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for i in 0..iterations {
                let cache: PathBuf = temp.path().join(format!("cold-{i}"));
                total += rt.block_on(first_call(&cache, &by_tag));
                let _ = std::fs::remove_dir_all(&cache);
            }
            total
        });
    });
    group.bench_function("warm_store", |b| {
        b.iter_custom(|iterations| {
            (0..iterations)
                .map(|_| rt.block_on(first_call(&warm, &by_tag)))
                .sum()
        });
    });
    group.bench_function("path", |b| {
        b.iter_custom(|iterations| {
            (0..iterations)
                .map(|_| rt.block_on(first_call(&warm, &by_path)))
                .sum()
        });
    });
    group.finish();

    let mut group = c.benchmark_group("registry/reload");
    for (name, dir) in [("tag", &by_tag), ("path", &by_path)] {
        let resolver = resolver(&warm);
        rt.block_on(resolver.resolve_dir(dir));
        group.bench_function(name, |b| {
            b.iter(|| rt.block_on(resolver.resolve_dir(dir)));
        });
    }
    group.finish();
    drop(registry);
}

criterion_group!(benches, bench);
criterion_main!(benches);
