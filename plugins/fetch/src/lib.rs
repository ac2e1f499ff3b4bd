//! `fetch`: GET a URL through `wasi:http` and return its status, content type and text.
//!
//! The plugin can reach only what the operator grants (`network = ["host:port"]`); the host
//! checks every request, including each redirect this plugin follows (up to 5).

wit_bindgen::generate!({
    path: "../../wit/toolhost-plugin-0.1.0",
    world: "plugin",
});

use exports::toolhost::plugin::tool::{Guest, ToolError, ToolSpec};
use serde::Deserialize;
use serde_json::json;
use wasip2::http::outgoing_handler;
use wasip2::http::types::{Fields, Method, OutgoingRequest, Scheme};
use wasip2::io::streams::StreamError;

struct Fetch;

const DEFAULT_MAX_BYTES: usize = 100_000;
const MAX_REDIRECTS: usize = 5;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    url: String,
    #[serde(default = "default_max_bytes")]
    max_bytes: usize,
}

fn default_max_bytes() -> usize {
    DEFAULT_MAX_BYTES
}

/// A URL split into what a request needs.
#[derive(Debug, Clone, PartialEq)]
struct Url {
    https: bool,
    authority: String,
    path: String,
}

impl Url {
    fn parse(text: &str) -> Result<Url, String> {
        let (https, rest) = if let Some(rest) = text.strip_prefix("https://") {
            (true, rest)
        } else if let Some(rest) = text.strip_prefix("http://") {
            (false, rest)
        } else {
            return Err(format!("{text:?} is not an http:// or https:// URL"));
        };
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let authority = &rest[..end];
        if authority.is_empty() || authority.contains('@') {
            return Err(format!("{text:?} has no usable host"));
        }
        let path = rest[end..].split('#').next().unwrap_or("");
        let path = if path.is_empty() || path.starts_with('?') {
            format!("/{path}")
        } else {
            path.to_string()
        };
        Ok(Url {
            https,
            authority: authority.to_string(),
            path,
        })
    }

    /// Where a `Location` header points, relative to this URL.
    fn join(&self, location: &str) -> Result<Url, String> {
        if location.starts_with("http://") || location.starts_with("https://") {
            return Url::parse(location);
        }
        let path = if let Some(rest) = location.strip_prefix("//") {
            return Url::parse(&format!(
                "{}://{rest}",
                if self.https { "https" } else { "http" }
            ));
        } else if location.starts_with('/') {
            location.to_string()
        } else {
            let dir = self.path.rsplit_once('/').map_or("", |(dir, _)| dir);
            format!("{dir}/{location}")
        };
        Ok(Url {
            path,
            ..self.clone()
        })
    }

    fn text(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}{}", self.authority, self.path)
    }
}

struct Response {
    status: u16,
    content_type: Option<String>,
    location: Option<String>,
    body: Vec<u8>,
    truncated: bool,
}

fn header(headers: &[(String, Vec<u8>)], name: &str) -> Option<String> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
}

fn get(url: &Url, max_bytes: usize) -> Result<Response, ToolError> {
    let failed = |what: &str, e: String| ToolError::Failed(format!("{}: {what}: {e}", url.text()));
    let headers = Fields::new();
    headers
        .append("user-agent", b"toolhost-fetch/0.1")
        .map_err(|e| failed("bad header", format!("{e:?}")))?;
    let request = OutgoingRequest::new(headers);
    let set = |ok: Result<(), ()>, what: &str| ok.map_err(|()| failed(what, "refused".into()));
    set(request.set_method(&Method::Get), "method")?;
    let scheme = if url.https { Scheme::Https } else { Scheme::Http };
    set(request.set_scheme(Some(&scheme)), "scheme")?;
    set(request.set_authority(Some(&url.authority)), "authority")?;
    set(request.set_path_with_query(Some(&url.path)), "path")?;
    let pending = outgoing_handler::handle(request, None)
        .map_err(|e| failed("the request failed", format!("{e:?}")))?;
    pending.subscribe().block();
    let response = pending
        .get()
        .ok_or_else(|| failed("no response", "not ready".into()))?
        .map_err(|()| failed("no response", "already taken".into()))?
        .map_err(|e| failed("the request failed", format!("{e:?}")))?;
    let entries = response.headers().entries();
    let status = response.status();
    let body = response
        .consume()
        .map_err(|()| failed("no body", "already taken".into()))?;
    let stream = body
        .stream()
        .map_err(|()| failed("no body stream", "already taken".into()))?;
    let mut bytes = Vec::new();
    let mut truncated = false;
    loop {
        match stream.blocking_read(64 * 1024) {
            Ok(chunk) => {
                bytes.extend_from_slice(&chunk);
                if bytes.len() > max_bytes {
                    bytes.truncate(max_bytes);
                    truncated = true;
                    break;
                }
            }
            Err(StreamError::Closed) => break,
            Err(StreamError::LastOperationFailed(e)) => {
                return Err(failed("reading the body failed", e.to_debug_string()));
            }
        }
    }
    Ok(Response {
        status,
        content_type: header(&entries, "content-type"),
        location: header(&entries, "location"),
        body: bytes,
        truncated,
    })
}

/// The longest prefix of `bytes` that is whole UTF-8 (lossy elsewhere).
fn text_of(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) => text.to_string(),
        Err(e) if e.error_len().is_none() => {
            String::from_utf8_lossy(&bytes[..e.valid_up_to()]).into_owned()
        }
        Err(_) => String::from_utf8_lossy(bytes).into_owned(),
    }
}

impl Guest for Fetch {
    fn describe() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "fetch".into(),
            description: "GET a web page or API URL and return its status, content type and \
                text (cut at max_bytes). Follows up to 5 redirects. Only hosts the operator \
                granted can be reached."
                .into(),
            input_schema: json!({
                "type": "object",
                "required": ["url"],
                "additionalProperties": false,
                "properties": {
                    "url": { "type": "string", "description": "http:// or https:// URL", "pattern": "^https?://" },
                    "max_bytes": { "type": "integer", "minimum": 1, "maximum": 1000000,
                                   "description": "Most bytes of the body to return (default 100000)" }
                }
            })
            .to_string(),
        }]
    }

    fn call(name: String, arguments: String) -> Result<String, ToolError> {
        if name != "fetch" {
            return Err(ToolError::InvalidArguments(format!("no tool named {name}")));
        }
        let args: Args = serde_json::from_str(&arguments)
            .map_err(|e| ToolError::InvalidArguments(e.to_string()))?;
        let mut url = Url::parse(&args.url).map_err(ToolError::InvalidArguments)?;
        for _ in 0..=MAX_REDIRECTS {
            let response = get(&url, args.max_bytes)?;
            if (300..400).contains(&response.status)
                && let Some(location) = &response.location
            {
                url = url.join(location).map_err(ToolError::Failed)?;
                continue;
            }
            return Ok(json!({
                "url": url.text(),
                "status": response.status,
                "content_type": response.content_type,
                "text": text_of(&response.body),
                "truncated": response.truncated,
            })
            .to_string());
        }
        Err(ToolError::Failed(format!(
            "more than {MAX_REDIRECTS} redirects, the last to {}",
            url.text()
        )))
    }
}

export!(Fetch);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_and_locations_resolve() {
        let url = Url::parse("https://example.org:8443/a/b?x=1#frag").unwrap();
        assert_eq!(url.authority, "example.org:8443");
        assert_eq!(url.path, "/a/b?x=1");
        assert_eq!(Url::parse("http://example.org").unwrap().path, "/");
        assert_eq!(Url::parse("http://example.org?q").unwrap().path, "/?q");
        assert!(Url::parse("ftp://example.org").is_err());
        assert!(Url::parse("http://user@example.org/").is_err());
        assert_eq!(url.join("/c").unwrap().text(), "https://example.org:8443/c");
        assert_eq!(url.join("c").unwrap().text(), "https://example.org:8443/a/c");
        assert_eq!(
            url.join("http://other.org/x").unwrap().text(),
            "http://other.org/x"
        );
        assert_eq!(url.join("//cdn.org/y").unwrap().text(), "https://cdn.org/y");
    }

    #[test]
    fn text_stops_at_a_cut_character() {
        assert_eq!(text_of("hé".as_bytes()), "hé");
        assert_eq!(text_of(&"hé".as_bytes()[..2]), "h");
    }
}
