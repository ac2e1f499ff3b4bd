//! settings: `wasi:config/store@0.2.0-draft` (the bindings' `wasi_config_draft`), answered
//! from each call's [`CallState`]: the settings its invoker was granted, nothing else.

use crate::bindings::wasi_config_draft::wasi::config::store::{Error, Host, add_to_linker};
use crate::state::CallState;

impl Host for CallState {
    fn get(&mut self, key: String) -> wasmtime::Result<Result<Option<String>, Error>> {
        Ok(Ok(self.settings.get(&key).cloned()))
    }

    fn get_all(&mut self) -> wasmtime::Result<Result<Vec<(String, String)>, Error>> {
        let mut all: Vec<(String, String)> = (self.settings.iter())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        all.sort();
        Ok(Ok(all))
    }
}

/// Links the interface, answered by each call's [`CallState`].
pub(crate) fn link(linker: &mut wasmtime::component::Linker<CallState>) -> wasmtime::Result<()> {
    add_to_linker::<_, wasmtime::component::HasSelf<CallState>>(linker, |state| state)
}
