//! `toolhost login ENSEMBLE` and `toolhost logout ENSEMBLE`: a person signs this host in to
//! an imported server that asks for it (`[ensemble.mcp] oauth = { sign-in = true }`), or
//! forgets its tokens. The flow is toolhost's core's (`import::sign_in`, rmcp's OAuth
//! client); here are the person's side of it: the authorization URL printed (and opened where
//! a browser is), and a loopback listener on a random port that takes the one redirect back.
//! It runs where the person is or on the host itself (a headless host prints the URL; the
//! browser that opens it must reach the loopback address, through `ssh -L` for instance).
//! A running `serve` takes the tokens at once: its watch sees the token file change (a
//! SIGHUP does the same with `--no-watch`), and a new sign-in ends the failed import's
//! backoff.

use super::settings::Settings;
use anyhow::{Context, bail};
use std::process::ExitCode;
use std::time::Duration;
use toolhost::config::draft::{McpCredential, McpOauth, McpTarget};
use toolhost::config::schema::SchemaCache;
use toolhost::import::sign_in::{self, SignIn};

/// How long the person has to sign in.
const SIGN_IN_TIMEOUT: Duration = Duration::from_secs(600);
/// The most of a request to the loopback listener read: its request line and headers.
const MAX_REDIRECT_BYTES: usize = 16 << 10;
/// How long one connection to the listener may take to send its request.
const REDIRECT_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections to the listener read at once; more wait in the kernel's queue.
const REDIRECT_CONNECTIONS: usize = 16;

/// The URL and OAuth settings of ensemble `name`'s import, if it signs in.
fn import_of(settings: &Settings, name: &str) -> anyhow::Result<(String, McpOauth)> {
    let schemas = SchemaCache::default();
    let files = toolhost::config::draft::ensemble_files(&settings.ensembles)
        .map_err(|d| anyhow::anyhow!("{}", d.message))?;
    for file in files {
        let Ok(draft) = toolhost::config::draft::read(&file, &schemas, |_| Ok(())) else {
            continue;
        };
        if draft.name != name {
            continue;
        }
        let spec = draft.mcp.and_then(|mcp| mcp.spec).with_context(|| {
            format!(
                "ensemble `{name}` ({}) imports no MCP server, or its [ensemble.mcp] has an \
                 error (`toolhost check` says which)",
                file.display()
            )
        })?;
        let (McpTarget::Url(url), Some(oauth)) = (spec.target, spec.oauth) else {
            bail!("ensemble `{name}` imports no server reached at a `url` with `oauth`");
        };
        if !matches!(oauth.credential, McpCredential::SignIn { .. }) {
            bail!(
                "ensemble `{name}`'s server takes client credentials: nobody signs in to it \
                 (`oauth = {{ sign-in = true }}` is for a server a person signs in to)"
            );
        }
        return Ok((url, oauth));
    }
    bail!(
        "no ensemble named `{name}` in {}",
        settings.ensembles.display()
    )
}

/// `toolhost login ENSEMBLE`.
pub(crate) async fn login(settings: &Settings, name: &str) -> anyhow::Result<ExitCode> {
    let dir = settings
        .sign_in_dir
        .clone()
        .context("no folder to keep the tokens in: set XDG_STATE_HOME or HOME")?;
    let (url, oauth) = import_of(settings, name)?;
    // The port of the client an earlier sign-in registered, if it is free: that client may
    // then sign in again (its redirect is registered with the port); else any port, and a
    // new client.
    let earlier = (sign_in::registered(&dir, &url))
        .and_then(|client| url::Url::parse(&client.redirect_uri).ok()?.port());
    let listener = match earlier {
        Some(port) => tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .ok(),
        None => None,
    };
    let listener = match listener {
        Some(listener) => listener,
        None => tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .context("cannot listen on a loopback port for the redirect")?,
    };
    let redirect = format!(
        "http://127.0.0.1:{}/callback",
        listener.local_addr()?.port()
    );
    let sign_in = SignIn::begin(&url, &oauth, &dir, &redirect)
        .await
        .map_err(|e| anyhow::anyhow!("{url}: {e}"))?;
    outln!(
        "Sign in to {url} for ensemble `{name}` at:\n\n  {}\n",
        sign_in.url()
    );
    outln!(
        "(waiting up to {} minutes for the redirect to {redirect})",
        SIGN_IN_TIMEOUT.as_secs() / 60
    );
    if let Some(client) = sign_in.reused_client() {
        outln!("(signing in with the client registered at the last sign-in, {client})");
    }
    open_browser(sign_in.url());
    let state = url::Url::parse(sign_in.url())
        .ok()
        .and_then(|u| query_value(&u, "state"))
        .context("the authorization URL carries no state")?;
    let (callback, mut browser) =
        tokio::time::timeout(SIGN_IN_TIMEOUT, redirected(&listener, &state))
            .await
            .context("nobody signed in in time")??;
    let finished = sign_in.finish(&format!("http://127.0.0.1{callback}")).await;
    // The browser is told how it ended, in plain text (nothing of the request echoed as markup).
    let (status, said) = match &finished {
        Ok(()) => ("200 OK", "Signed in: you may close this page.".to_string()),
        Err(e) => ("400 Bad Request", format!("Sign-in failed: {e}")),
    };
    answer(&mut browser, status, &said).await;
    finished.map_err(|e| anyhow::anyhow!("{url}: {e}"))?;
    outln!(
        "Signed in: the tokens are kept in {} (readable by this user alone). A running \
         `toolhost serve` takes them at once (its watch sees them; with --no-watch, send it \
         SIGHUP).",
        sign_in::store_path(&dir, &url).display()
    );
    Ok(ExitCode::SUCCESS)
}

/// `toolhost logout ENSEMBLE`: the grant revoked at the authorization server where it offers
/// revocation, and the tokens forgotten here in any case.
pub(crate) async fn logout(settings: &Settings, name: &str) -> anyhow::Result<ExitCode> {
    let dir = settings
        .sign_in_dir
        .clone()
        .context("no folder of tokens: set XDG_STATE_HOME or HOME")?;
    let (url, oauth) = import_of(settings, name)?;
    let revoked = sign_in::revoke(&url, &oauth, &dir)
        .await
        .context("cannot remove the tokens")?;
    match revoked {
        sign_in::Revoked::NobodySignedIn => outln!("Nobody was signed in to {url}."),
        sign_in::Revoked::Revoked => outln!(
            "Signed out of {url}: the sign-in is revoked at its authorization server, and its \
             tokens are gone from here."
        ),
        sign_in::Revoked::ForgottenOnly(why) => outln!(
            "Signed out of {url}: its tokens are gone from here, but not revoked there ({why}); \
             they lapse when they expire."
        ),
    }
    Ok(ExitCode::SUCCESS)
}

/// The path and query of the first request to `/callback` that carries this sign-in's
/// `state`, and the connection to answer it on. Each connection is read on its own task
/// within bounds ([`REDIRECT_CONNECTIONS`] at once); anything else is answered and the
/// listener goes on, so that another local process knocking on the port cannot end the
/// sign-in.
async fn redirected(
    listener: &tokio::net::TcpListener,
    state: &str,
) -> anyhow::Result<(String, tokio::net::TcpStream)> {
    let (found, mut arrived) = tokio::sync::mpsc::channel(1);
    let open = std::sync::Arc::new(tokio::sync::Semaphore::new(REDIRECT_CONNECTIONS));
    loop {
        tokio::select! {
            Some(redirect) = arrived.recv() => return Ok(redirect),
            accepted = listener.accept() => {
                let (stream, _) = accepted?;
                let Ok(permit) = std::sync::Arc::clone(&open).try_acquire_owned() else {
                    continue;
                };
                let (found, state) = (found.clone(), state.to_string());
                tokio::spawn(async move {
                    if let Some(redirect) = redirect_on(stream, &state).await {
                        let _ = found.send(redirect).await;
                    }
                    drop(permit);
                });
            }
        }
    }
}

/// The redirect that `stream` carries, if it is this sign-in's (`state`); anything else is
/// answered (404 off `/callback`, 400 with another state) or dropped (a head too large or too
/// slow).
async fn redirect_on(
    mut stream: tokio::net::TcpStream,
    state: &str,
) -> Option<(String, tokio::net::TcpStream)> {
    use tokio::io::AsyncReadExt;
    let mut head = Vec::with_capacity(1024);
    let read = tokio::time::timeout(REDIRECT_READ_TIMEOUT, async {
        let mut buffer = [0u8; 1024];
        while head.len() < MAX_REDIRECT_BYTES && !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = stream.read(&mut buffer).await?;
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buffer[..n]);
        }
        std::io::Result::Ok(())
    })
    .await;
    if !matches!(read, Ok(Ok(()))) || !head.windows(4).any(|w| w == b"\r\n\r\n") {
        return None;
    }
    let line = String::from_utf8_lossy(&head);
    let target = line
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("GET "))
        .and_then(|l| l.split(' ').next())
        .unwrap_or_default()
        .to_string();
    if !target.starts_with("/callback?") {
        answer(&mut stream, "404 Not Found", "").await;
        return None;
    }
    let carried = url::Url::parse(&format!("http://127.0.0.1{target}"))
        .ok()
        .and_then(|u| query_value(&u, "state"));
    if carried.as_deref() != Some(state) {
        let said = "This is not the redirect of the sign-in under way (its state is another): \
                    it is refused, and the sign-in goes on waiting for its own.";
        answer(&mut stream, "400 Bad Request", said).await;
        eprintln!("refused a redirect that is not this sign-in's (another state)");
        return None;
    }
    Some((target, stream))
}

/// The value of the query parameter `name` of `url`.
fn query_value(url: &url::Url, name: &str) -> Option<String> {
    url.query_pairs()
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.into_owned())
}

/// Answers the browser's request on `stream` with `status` and `text`, as plain text.
async fn answer(stream: &mut tokio::net::TcpStream, status: &str, text: &str) {
    use tokio::io::AsyncWriteExt;
    let answer = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\n\
         x-content-type-options: nosniff\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
        text.len()
    );
    let _ = stream.write_all(answer.as_bytes()).await;
    // Closed gracefully, what the browser sent after its head read and dropped: a close with
    // unread bytes would reset the connection before the answer is read.
    let _ = stream.shutdown().await;
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), async {
        use tokio::io::AsyncReadExt;
        let mut sink = [0u8; 1024];
        while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
}

/// Opens `url` in a browser where there is one to open (a desktop session); else the printed
/// URL is all.
fn open_browser(url: &str) {
    let desktop =
        std::env::var_os("DISPLAY").is_some() || std::env::var_os("WAYLAND_DISPLAY").is_some();
    if desktop {
        let _ = std::process::Command::new("xdg-open")
            .arg(url)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
    }
}
