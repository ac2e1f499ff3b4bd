//! tls: the process's rustls crypto provider. reqwest (for LLM providers and MCP servers
//! over HTTP) is built without a bundled provider; this installs ring, the provider the rest
//! of the host (wasi:http) uses, before any such client is built.

/// Installs ring as the process-wide rustls provider, unless one is installed already.
pub fn install_provider() {
    // An error means another provider won the race or was installed first: just as good.
    let _ = rustls::crypto::ring::default_provider().install_default();
}
