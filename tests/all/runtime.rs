//! The runtime: the compiled-component cache and component sharing.

use crate::support::{Fixture, ensemble};
use std::sync::Arc;
use toolhost::resolve::Resolver;
use toolhost::runtime::{Runtime, RuntimeSettings, Tiering};

fn runtime_with_cache(dir: &std::path::Path) -> Arc<Runtime> {
    Arc::new(
        Runtime::new(&RuntimeSettings {
            cache_dir: Some(dir.to_path_buf()),
            max_instances: 8,
            // Cranelift's code alone: what is measured or counted here is not the tiers.
            tiering: Tiering::Off,
            ..RuntimeSettings::default()
        })
        .expect("runtime"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_is_reused_on_the_second_start() {
    let fixture = Fixture::new();
    fixture.write_echo();
    let cache = fixture.mkdir("cache");

    let first = runtime_with_cache(&cache);
    let resolved = Resolver::new(first.clone())
        .resolve_dir(&fixture.ensembles())
        .await;
    assert!(resolved.refused.is_empty());
    assert_eq!(
        (
            first.compile_stats().compiled,
            first.compile_stats().cache_hits
        ),
        (1, 0)
    );
    drop(resolved);
    drop(first);

    let second = runtime_with_cache(&cache);
    let resolved = Resolver::new(second.clone())
        .resolve_dir(&fixture.ensembles())
        .await;
    assert!(resolved.catalog.get("echo").is_some());
    assert_eq!(
        (
            second.compile_stats().compiled,
            second.compile_stats().cache_hits
        ),
        (0, 1),
        "recompiled"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_cache_entry_is_replaced_not_trusted() {
    let fixture = Fixture::new();
    fixture.write_echo();
    let cache = fixture.mkdir("cache");
    drop(
        Resolver::new(runtime_with_cache(&cache))
            .resolve_dir(&fixture.ensembles())
            .await,
    );
    for entry in std::fs::read_dir(&cache).expect("cache dir") {
        std::fs::write(entry.expect("entry").path(), b"garbage").expect("damage the entry");
    }
    let runtime = runtime_with_cache(&cache);
    let resolved = Resolver::new(runtime.clone())
        .resolve_dir(&fixture.ensembles())
        .await;
    assert!(resolved.catalog.get("echo").is_some());
    assert_eq!(runtime.compile_stats().compiled, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_component_used_by_several_ensembles_loads_once() {
    let fixture = Fixture::new();
    for name in ["a", "b", "c"] {
        let rest =
            format!("[[invokers]]\ninvoker = {{ name = \"{name}_echo\", tool = \"echo\" }}\n");
        fixture.write(&format!("{name}.toml"), &ensemble(name, "echo", &rest));
    }
    let cache = fixture.mkdir("cache");
    let runtime = runtime_with_cache(&cache);
    let resolved = Resolver::new(runtime.clone())
        .resolve_dir(&fixture.ensembles())
        .await;
    assert_eq!(resolved.catalog.tools().count(), 3);
    let stats = runtime.compile_stats();
    assert_eq!(stats.compiled + stats.cache_hits, 1);
}
