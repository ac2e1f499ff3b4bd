//! Registry credentials: where they come from (the environment, or the Docker `config.json`
//! that `docker login` writes; never the TOML), and which ones a registry gets.

use base64::Engine as _;
use std::collections::HashMap;

/// Registry credentials: `TOOLHOST_REGISTRY_USERNAME` and `TOOLHOST_REGISTRY_PASSWORD` for
/// every registry, else the registry's entry in the Docker `config.json`
/// (`$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`), else anonymous.
#[derive(Clone, Default)]
pub struct Credentials {
    everywhere: Option<(String, String)>,
    by_registry: HashMap<String, (String, String)>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("everywhere", &self.everywhere.is_some())
            .field("registries", &self.by_registry.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Credentials {
    /// Reads the environment and the Docker config. A config that cannot be read is named
    /// in the error; one that does not exist is no credentials.
    pub fn from_environment() -> Result<Self, String> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let everywhere = match (
            var("TOOLHOST_REGISTRY_USERNAME"),
            var("TOOLHOST_REGISTRY_PASSWORD"),
        ) {
            (Some(user), Some(password)) => Some((user, password)),
            (None, None) => None,
            _ => {
                return Err("set both TOOLHOST_REGISTRY_USERNAME and \
                            TOOLHOST_REGISTRY_PASSWORD, or neither"
                    .into());
            }
        };
        let config = var("DOCKER_CONFIG")
            .map(|dir| std::path::PathBuf::from(dir).join("config.json"))
            .or_else(|| var("HOME").map(|home| format!("{home}/.docker/config.json").into()));
        let by_registry = match config.filter(|path| path.exists()) {
            Some(path) => docker_auths(&path)?,
            None => HashMap::new(),
        };
        Ok(Credentials {
            everywhere,
            by_registry,
        })
    }

    /// Credentials for every registry (tests, and `push --username`).
    pub fn everywhere(user: &str, password: &str) -> Self {
        Credentials {
            everywhere: Some((user.to_string(), password.to_string())),
            by_registry: HashMap::new(),
        }
    }

    /// The user and password for `registry`, if any.
    pub(super) fn basic(&self, registry: &str) -> Option<&(String, String)> {
        self.everywhere
            .as_ref()
            .or_else(|| self.by_registry.get(registry))
    }
}

/// The `auths` of a Docker config: `{"auths": {"<registry>": {"auth": base64(user:pass)}}}`
/// (keys may be written as URLs).
fn docker_auths(path: &std::path::Path) -> Result<HashMap<String, (String, String)>, String> {
    let fail = |e: String| {
        format!(
            "cannot read registry credentials from {}: {e}",
            path.display()
        )
    };
    let bytes = toolhost_config::read_limited(path, 1 << 20).map_err(fail)?;
    let config: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| fail(e.to_string()))?;
    let mut auths = HashMap::new();
    let Some(entries) = config.get("auths").and_then(|a| a.as_object()) else {
        return Ok(auths);
    };
    for (key, entry) in entries {
        let registry = key
            .trim_start_matches("https://")
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap_or_default()
            .to_string();
        let pair = match entry.get("auth").and_then(|a| a.as_str()) {
            Some(auth) => {
                let decoded = base64::engine::general_purpose::STANDARD
                    .decode(auth)
                    .map_err(|e| fail(format!("`auth` of {key}: {e}")))?;
                let text = String::from_utf8(decoded)
                    .map_err(|_| fail(format!("`auth` of {key} is not UTF-8")))?;
                let (user, password) = text
                    .split_once(':')
                    .ok_or_else(|| fail(format!("`auth` of {key} is not user:password")))?;
                (user.to_string(), password.to_string())
            }
            None => match (
                entry.get("username").and_then(|u| u.as_str()),
                entry.get("password").and_then(|p| p.as_str()),
            ) {
                (Some(user), Some(password)) => (user.to_string(), password.to_string()),
                _ => continue,
            },
        };
        auths.insert(registry, pair);
    }
    Ok(auths)
}
