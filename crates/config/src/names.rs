//! Newtypes for every name and bounded number in the descriptors. Each validates in
//! `TryFrom`, so serde rejects a bad value while deserializing and the toml crate points at it.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! string_newtype {
    ($(#[$doc:meta])* $name:ident, $check:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl TryFrom<String> for $name {
            type Error = String;
            fn try_from(value: String) -> Result<Self, String> {
                let check: fn(&str) -> Result<(), String> = $check;
                check(&value)?;
                Ok(Self(value))
            }
        }

        impl From<$name> for String {
            fn from(value: $name) -> String {
                value.0
            }
        }

        impl $name {
            /// The validated text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        // A string to editors; the host's own check says more (file:line:col).
        impl schemars::JsonSchema for $name {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }

            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({ "type": "string", "minLength": 1 })
            }
        }
    };
}

fn charset(value: &str, what: &str, allowed: &str, ok: fn(char) -> bool) -> Result<(), String> {
    if value.is_empty() || value.len() > 64 || !value.chars().all(ok) {
        return Err(format!(
            "{what} use {allowed}, 1 to 64 characters; got {value:?}"
        ));
    }
    Ok(())
}

string_newtype!(
    /// An ensemble's name: `[a-z0-9-]`, 1 to 64 characters.
    EnsembleName,
    |v| charset(v, "ensemble names", "[a-z0-9-]", |c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
);

string_newtype!(
    /// A tool's name as the model sees it (or inside a component): `[a-zA-Z0-9_-]`, 1 to 64.
    ToolName,
    |v| charset(v, "tool names", "[a-zA-Z0-9_-]", is_tool_char)
);

string_newtype!(
    /// A prompt argument's name, as its templates read it: a letter or `_`, then letters,
    /// digits and `_`; 1 to 64 characters.
    ArgumentName,
    |v| {
        let mut chars = v.chars();
        let starts = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
        if !starts || v.len() > 64 || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!(
                "argument names start with a letter or `_` and go on with `[A-Za-z0-9_]`, \
                 1 to 64 characters (templates read them as variables); got {v:?}"
            ));
        }
        Ok(())
    }
);

string_newtype!(
    /// What a resource set's URIs start with: a scheme, `:`, and more, without spaces,
    /// quotes, `{`, `}` or `\\`; 1 to 256 characters.
    UriPrefix,
    |v| {
        let scheme = v.split_once(':').map(|(s, _)| s).unwrap_or("");
        let scheme_ok = scheme.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
            && scheme.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
        let chars_ok = v.chars().all(|c| c.is_ascii_graphic() && !matches!(c, '"' | '{' | '}' | '\\' | '<' | '>'));
        if !scheme_ok || !chars_ok || v.len() > 256 || v.len() == scheme.len() + 1 {
            return Err(format!(
                "a URI prefix is a scheme, `:` and more (`docs://handbook/`), printable ASCII \
                 without spaces, quotes, braces or backslashes, at most 256 characters; got {v:?}"
            ));
        }
        Ok(())
    }
);

string_newtype!(
    /// A tool's name inside its component or server (an invoker's `tool`): a tool name, or a
    /// typed component's `interface/function`; `[a-zA-Z0-9_-]` and `/ . : @`, 1 to 128.
    BackendToolName,
    |v| {
        let ok = |c: char| is_tool_char(c) || matches!(c, '/' | '.' | ':' | '@');
        if v.is_empty() || v.len() > 128 || !v.chars().all(ok) {
            return Err(format!(
                "a `tool` uses [a-zA-Z0-9_-] and / . : @ (a typed component's \
                 `interface/function`), 1 to 128 characters; got {v:?}"
            ));
        }
        Ok(())
    }
);

string_newtype!(
    /// A `blake3` pin: 64 lowercase hexadecimal digits.
    Blake3Hex,
    |v| {
        if v.len() == 64 && v.chars().all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)) {
            Ok(())
        } else {
            Err(format!("blake3 pins are 64 lowercase hexadecimal digits; got {v:?}"))
        }
    }
);

string_newtype!(
    /// The name of an environment variable: `[A-Za-z_][A-Za-z0-9_]*`.
    EnvVarName,
    |v| {
        let mut chars = v.chars();
        let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
        if first_ok && chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
            Ok(())
        } else {
            Err(format!("environment variable names use [A-Za-z_][A-Za-z0-9_]*; got {v:?}"))
        }
    }
);

string_newtype!(
    /// A path inside the sandbox: absolute, `/`-separated, without `.` or `..` segments.
    GuestPath,
    |v| {
        let clean = v.starts_with('/')
            && v.split('/').skip(1).all(|s| s != "." && s != "..")
            && (v == "/" || !v.ends_with('/'))
            && !v.contains("//");
        if clean && v != "/" {
            Ok(())
        } else {
            Err(format!("guest paths are absolute, like \"/data\", with no \".\", \"..\" or trailing \"/\" (and not \"/\" itself); got {v:?}"))
        }
    }
);

string_newtype!(
    /// A name clients reach `serve --http` by, as the Host header carries it: a host name
    /// or IP address, with or without `:port`; `[A-Za-z0-9.-]`, `:`, `[`, `]`, 1 to 253.
    AllowedHost,
    |v| {
        let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']');
        if v.is_empty() || v.len() > 253 || !v.chars().all(ok) {
            return Err(format!(
                "allowed hosts are host names or addresses as the Host header carries them, \
                 with or without :port (\"toolhost.tools.svc\", \"10.0.0.7:8750\"); got {v:?}"
            ));
        }
        Ok(())
    }
);

/// True for the characters a tool name may contain.
fn is_tool_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// A number of a configuration file in the unit the code that uses it counts in: each
/// bounded setting says its unit once, where its range is declared (`bounded!`'s last
/// argument), and [`written_or`] is the one way a setting meets its default.
pub trait Setting: Copy {
    type Value;
    fn value(self) -> Self::Value;
}

/// The setting as written, in its user's unit, else `default`.
pub fn written_or<S: Setting>(written: Option<S>, default: S::Value) -> S::Value {
    written.map_or(default, S::value)
}

/// A bounded number; with a unit, a [`Setting`] too: `number T` (the number as written, as
/// a T), `kib T` and `mib T` (bytes, as a T), `seconds` and `millis` (a `Duration`).
macro_rules! bounded {
    ($(#[$doc:meta])* $name:ident, $key:literal, $min:expr, $max:expr $(, $unit:ident $($ty:ty)?)?) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(try_from = "i64", into = "u64")]
        pub struct $name(u64);

        impl TryFrom<i64> for $name {
            type Error = String;
            fn try_from(value: i64) -> Result<Self, String> {
                if ($min..=$max).contains(&value) {
                    Ok(Self(value as u64))
                } else {
                    Err(format!("{} must be from {} to {}; got {value}", $key, $min, $max))
                }
            }
        }

        impl From<$name> for u64 {
            fn from(value: $name) -> u64 {
                value.0
            }
        }

        impl $name {
            /// The validated number.
            pub fn get(self) -> u64 {
                self.0
            }
        }

        impl schemars::JsonSchema for $name {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }

            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({
                    "type": "integer",
                    "minimum": $min as i64,
                    "maximum": $max as i64,
                })
            }
        }

        $(unit!($name, $unit $($ty)?);)?
    };
}

/// The [`Setting`] of a bounded number in `unit`. Every range fits its unit's type (the
/// largest, 1 TiB in bytes, fits a 64-bit usize).
macro_rules! unit {
    ($name:ident, number $ty:ty) => { unit!(@as $name, $ty, |n| n as $ty); };
    ($name:ident, kib $ty:ty) => { unit!(@as $name, $ty, |n| (n as $ty) << 10); };
    ($name:ident, mib $ty:ty) => { unit!(@as $name, $ty, |n| (n as $ty) << 20); };
    ($name:ident, seconds) => {
        unit!(@as $name, std::time::Duration, |n| std::time::Duration::from_secs(n));
    };
    ($name:ident, millis) => {
        unit!(@as $name, std::time::Duration, |n| std::time::Duration::from_millis(n));
    };
    (@as $name:ident, $ty:ty, |$n:ident| $value:expr) => {
        impl Setting for $name {
            type Value = $ty;
            fn value(self) -> $ty {
                let $n = self.0;
                $value
            }
        }
    };
}

bounded!(
    /// `keep-resident-mib`: MiB of each linear memory kept resident between calls, 0 to 4096.
    KeepResidentMib, "keep-resident-mib", 0, 4096, mib usize
);
bounded!(
    /// `core-instances-per-call`: core instances one call's instance may have, 1 to 256.
    CoreInstancesPerCall, "core-instances-per-call", 1, 256, number u32
);
bounded!(
    /// `memories-per-call`: linear memories one call's instance may have, 1 to 16.
    MemoriesPerCall, "memories-per-call", 1, 16, number u32
);
bounded!(
    /// `tables-per-call`: tables one call's instance may have, 1 to 256.
    TablesPerCall, "tables-per-call", 1, 256, number u32
);
bounded!(
    /// `cache-keep`: compiled components no ensemble uses that the cache keeps, 0 to 100,000.
    CacheKeep, "cache-keep", 0, 100_000, number usize
);
bounded!(
    /// `timeout-ms`: 1 ms to 1 hour.
    TimeoutMs, "timeout-ms", 1, 3_600_000, millis
);
bounded!(
    /// `memory-mib`: 1 MiB to 4 GiB (the 32-bit address space of a core module).
    MemoryMib, "memory-mib", 1, 4096, mib usize
);
bounded!(
    /// `max-concurrency`: calls of one invoker that may run at once, 1 to 1024.
    MaxConcurrency, "max-concurrency", 1, 1024, number usize
);
bounded!(
    /// `max-queue`: calls of one invoker that may wait for a turn, 0 to 65536.
    MaxQueue, "max-queue", 0, 65536, number usize
);
bounded!(
    /// `max-response-bytes`: the largest HTTP response body a call may read, 1 byte to 1 GiB.
    MaxResponseBytes, "max-response-bytes", 1, 1 << 30, number u64
);
bounded!(
    /// `prepared`: instances of an invoker kept instantiated ahead of its calls, 0 to 64.
    Prepared, "prepared", 0, 64, number usize
);
bounded!(
    /// `max-tools` of an imported MCP server: 1 to 100,000 tools.
    MaxTools, "max-tools", 1, 100_000, number usize
);
bounded!(
    /// `max-output-bytes`: 1 byte to 64 MiB.
    MaxOutputBytes, "max-output-bytes", 1, 64 * 1024 * 1024, number usize
);

// `toolhost.toml`: the host's own bounds. Zero would turn each of them off or make the host
// refuse everything, so every one starts at 1; the tops keep a typo from overflowing a size.
bounded!(
    /// `[host] max-concurrent-calls`: instances running at once, 1 to 10,000.
    MaxConcurrentCalls, "max-concurrent-calls", 1, 10_000, number u32
);
bounded!(
    /// `[[resources]] max-file-kib`: the largest file a resource set serves, 1 KiB to 64 MiB.
    MaxFileKib, "max-file-kib", 1, 64 * 1024, kib usize
);
bounded!(
    /// `[[resources]] max-files`: files one resource set lists, 1 to 100,000.
    MaxResourceFiles, "max-files", 1, 100_000, number usize
);
bounded!(
    /// `[host] max-prepared`: prepared instances held at once, 0 (none) to 10,000.
    MaxPrepared, "max-prepared", 0, 10_000, number usize
);
bounded!(
    /// `[host] max-prepared-mib`: linear memory prepared instances hold at once, 0 to 1 TiB.
    MaxPreparedMib, "max-prepared-mib", 0, 1 << 20, mib usize
);
bounded!(
    /// `[host] compile-memory-mib`: the compile worker's address space, 1 MiB to 1 TiB.
    CompileMemoryMib, "compile-memory-mib", 1, 1 << 20, number u64
);
bounded!(
    /// `[host] compile-cpu-seconds`: the compile worker's CPU time, 1 s to a day.
    CompileCpuSeconds, "compile-cpu-seconds", 1, 86_400, number u64
);
bounded!(
    /// `[host] compile-timeout-s`: one compile on the clock, 1 s to a day.
    CompileTimeoutS, "compile-timeout-s", 1, 86_400, seconds
);
bounded!(
    /// `[host] max-parallel-compiles`: compiles at once, 1 to 256.
    MaxParallelCompiles, "max-parallel-compiles", 1, 256, number usize
);
bounded!(
    /// `[host] max-component-mib`: the largest component file accepted, 1 MiB to 4 GiB.
    MaxComponentMib, "max-component-mib", 1, 4096, mib u64
);
bounded!(
    /// `[host] describe-timeout-ms`: a component's `describe()` at load, 1 ms to 10 minutes.
    DescribeTimeoutMs, "describe-timeout-ms", 1, 600_000, millis
);
bounded!(
    /// `[host] dedup-session-mib` and `dedup-total-mib`: results remembered, 1 MiB to 64 GiB.
    DedupMib, "dedup-session-mib and dedup-total-mib", 1, 65_536, mib usize
);
bounded!(
    /// `[host] max-mcp-sessions`: MCP sessions over HTTP at once, 1 to 1,000,000.
    MaxMcpSessions, "max-mcp-sessions", 1, 1_000_000, number usize
);
bounded!(
    /// `[host] mcp-session-idle-s`: an idle MCP session's life, 1 s to a week.
    McpSessionIdleS, "mcp-session-idle-s", 1, 604_800, seconds
);
bounded!(
    /// `[host] max-http-connections`: HTTP connections at once, 1 to 1,000,000.
    MaxHttpConnections, "max-http-connections", 1, 1_000_000, number usize
);
bounded!(
    /// `[host] max-http-streams`: long-lived responses open at once (event streams), 1 to
    /// 500,000; at most half of `max-http-connections`.
    MaxHttpStreams, "max-http-streams", 1, 500_000, number usize
);
bounded!(
    /// `[host] http-header-timeout-ms`: the wait for a request's headers, 1 ms to 10 minutes.
    HttpHeaderTimeoutMs, "http-header-timeout-ms", 1, 600_000, millis
);
bounded!(
    /// `[host] http-body-timeout-s`: how long a request's body may take once its headers
    /// arrived, 1 s to an hour.
    HttpBodyTimeoutS, "http-body-timeout-s", 1, 3600, seconds
);
bounded!(
    /// `[host] drain-timeout-s`: how long a shutdown waits for calls in flight, 0 s to an hour.
    DrainTimeoutS, "drain-timeout-s", 0, 3600, seconds
);
bounded!(
    /// `[fleet] redis-timeout-ms`: the longest a call waits on Redis, 1 ms to a minute.
    RedisTimeoutMs, "redis-timeout-ms", 1, 60_000, millis
);
bounded!(
    /// `[chat] max-response-mib`: the most one model answer may bring, 1 MiB to 4 GiB.
    MaxResponseMib, "max-response-mib", 1, 4096, mib usize
);
bounded!(
    /// `[chat] max-tokens`: the most tokens the model may write in one answer, 1 to 10 million.
    MaxTokens, "max-tokens", 1, 10_000_000, number u32
);
bounded!(
    /// `[chat] max-iterations`: model turns in one run, 1 to 10,000.
    MaxIterations, "max-iterations", 1, 10_000, number u32
);
bounded!(
    /// `[chat] max-parallel-calls`: tool calls of one model turn run at once, 1 to 256.
    MaxParallelCalls, "max-parallel-calls", 1, 256, number usize
);
bounded!(
    /// `[chat] request-timeout-s`: one request to the model, 1 s to 1 hour.
    RequestTimeoutS, "request-timeout-s", 1, 3600, seconds
);
bounded!(
    /// `[chat] max-attempts`: tries of one request to the model, 1 to 100.
    MaxAttempts, "max-attempts", 1, 100, number u32
);
bounded!(
    /// `[chat] retry-delay-ms`: the first wait before a retry (it doubles), 0 to 10 minutes.
    RetryDelayMs, "retry-delay-ms", 0, 600_000, millis
);
bounded!(
    /// `[chat] max-calls-per-answer`: tool calls of one model answer that run, 1 to 10,000.
    MaxCallsPerAnswer, "max-calls-per-answer", 1, 10_000, number usize
);
bounded!(
    /// `[chat] max-run-result-mib`, `max-request-mib` and `max-conversation-mib`: 1 MiB to
    /// 4 GiB.
    ChatMib, "max-run-result-mib, max-request-mib and max-conversation-mib", 1, 4096, mib usize
);
bounded!(
    /// `[chat] max-runs`: runs of the HTTP chat API at once, 1 to 10,000.
    MaxRuns, "max-runs", 1, 10_000, number usize
);
bounded!(
    /// `[chat] max-conversations`: conversations the chat database keeps, 1 to 10 million.
    MaxConversations, "max-conversations", 1, 10_000_000, number usize
);
bounded!(
    /// `[chat] max-database-mib`: the chat database's size in use, 1 MiB to 1 TiB.
    MaxDatabaseMib, "max-database-mib", 1, 1 << 20, mib u64
);
bounded!(
    /// `[chat] approval-timeout-s`: how long a destructive call waits for a person's answer
    /// in the HTTP chat API, 1 s to a day.
    ApprovalTimeoutS, "approval-timeout-s", 1, 86_400, seconds
);

bounded!(
    /// `[registry] max-manifest-kib`: the largest manifest read, 1 KiB to 64 MiB.
    MaxManifestKib, "max-manifest-kib", 1, 65_536, kib u64
);
bounded!(
    /// `[registry] max-blob-mib`: the largest component pulled, 1 MiB to 4 GiB.
    MaxBlobMib, "max-blob-mib", 1, 4096, mib u64
);
bounded!(
    /// `[registry] resolve-timeout-ms`: how long resolving a tag may take, 100 ms to 1 min.
    ResolveTimeoutMs, "resolve-timeout-ms", 100, 60_000, millis
);
bounded!(
    /// `[registry] pull-timeout-s`: how long pulling one component may take, 1 s to 1 h.
    PullTimeoutS, "pull-timeout-s", 1, 3600, seconds
);

/// Whether identical calls are answered from the first result.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum DedupMode {
    /// Identical calls (same tool version, same canonical arguments) in one session run once.
    #[default]
    Exact,
    /// Every call runs.
    Off,
}

/// How a granted directory may be used.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Access {
    /// Files may be read, listed and stat'ed.
    Read,
    /// As `read`, plus create, write, rename and delete.
    ReadWrite,
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Access::Read => "read",
            Access::ReadWrite => "read-write",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_reject_what_they_should() {
        assert!(EnsembleName::try_from("web-2".to_string()).is_ok());
        assert!(EnsembleName::try_from("Web".to_string()).is_err());
        assert!(ToolName::try_from("fetch_Page-2".to_string()).is_ok());
        assert!(ToolName::try_from("a".repeat(65)).is_err());
        assert!(GuestPath::try_from("/data/x".to_string()).is_ok());
        for bad in ["data", "/data/../etc", "/", "/data/", "/a//b"] {
            assert!(GuestPath::try_from(bad.to_string()).is_err(), "{bad}");
        }
        assert!(TimeoutMs::try_from(0).is_err());
        assert!(EnvVarName::try_from("1X".to_string()).is_err());
    }

    #[test]
    fn a_setting_is_written_in_its_unit_and_only_then_replaces_the_default() {
        use std::time::Duration;
        let mib = ChatMib::try_from(3).expect("in range");
        assert_eq!(written_or(Some(mib), 7), 3 << 20);
        assert_eq!(written_or(None::<ChatMib>, 7), 7);
        let kib = MaxManifestKib::try_from(2).expect("in range");
        assert_eq!(kib.value(), 2048);
        let seconds = DrainTimeoutS::try_from(0).expect("in range");
        assert_eq!(written_or(Some(seconds), Duration::MAX), Duration::ZERO);
        let millis = RetryDelayMs::try_from(250).expect("in range");
        assert_eq!(millis.value(), Duration::from_millis(250));
        // The largest byte setting fits its type.
        let database = MaxDatabaseMib::try_from(1 << 20).expect("in range");
        assert_eq!(database.value(), 1 << 40);
        assert_eq!(
            MaxIterations::try_from(10_000).expect("in range").value(),
            10_000u32
        );
    }
}
