//! The on-disk cache of compiled components: `<blake3 of the .wasm>-<engine hash>.cwasm`.
//! Files are written to a temporary name and renamed, so a reader never sees half a file.

use super::ComponentHash;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use wasmtime::Engine;
use wasmtime::component::Component;

pub(crate) struct ComponentCache {
    dir: PathBuf,
    /// Differs when the wasmtime version or any setting that affects code generation does.
    engine_hash: u64,
}

impl ComponentCache {
    pub(crate) fn new(dir: &Path, engine: &Engine) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let mut hasher = std::hash::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        Ok(ComponentCache {
            dir: dir.to_path_buf(),
            engine_hash: hasher.finish(),
        })
    }

    fn path(&self, hash: &ComponentHash) -> PathBuf {
        self.dir
            .join(format!("{hash}-{:016x}.cwasm", self.engine_hash))
    }

    /// The cached compilation of `hash`, if there is a usable one.
    pub(crate) fn get(&self, engine: &Engine, hash: &ComponentHash) -> Option<Component> {
        let path = self.path(hash);
        if !path.is_file() {
            return None;
        }
        // SAFETY: `deserialize_file` trusts the file to be native code that this wasmtime
        // produced. It is: the cache directory is the host's own (documented as writable only
        // by the host's user), each file is written whole by `put` below and renamed into place,
        // and its name carries the blake3 of the source and the engine's compatibility hash.
        // wasmtime still checks the header and refuses a file from another version or config.
        match unsafe { Component::deserialize_file(engine, &path) } {
            Ok(component) => Some(component),
            Err(e) => {
                tracing::warn!(path = %path.display(), "ignoring unusable cache entry: {e}");
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    /// Stores the compilation of `hash`. Failure is logged, not fatal: the cache is an
    /// optimisation.
    pub(crate) fn put(&self, hash: &ComponentHash, component: &Component) {
        let result = component
            .serialize()
            .map_err(|e| e.to_string())
            .and_then(|bytes| {
                let temp = self.dir.join(format!(".{hash}-{}.tmp", std::process::id()));
                std::fs::write(&temp, bytes)
                    .and_then(|()| std::fs::rename(&temp, self.path(hash)))
                    .map_err(|e| {
                        let _ = std::fs::remove_file(&temp);
                        e.to_string()
                    })
            });
        if let Err(e) = result {
            tracing::warn!(dir = %self.dir.display(), "could not write the component cache: {e}");
        }
    }
}
