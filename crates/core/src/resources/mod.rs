//! resources: the files an ensemble offers to MCP clients as resources (`[[resources]]`).
//! A [`ResourceSet`] is one directory at one URI prefix: read-only, each file at most
//! `max-file-kib`, at most `max-files` listed, and nothing outside the directory reachable by
//! any URI (`..`, absolute paths, symbolic links, hidden files and directories, anything but
//! a regular file are all refused the same way: "no such resource"). A file is opened one
//! path component at a time below a handle of the directory, none of them followed if it is
//! a link, so a link swapped in while a read is under way leads nowhere either.
//!
//! The file system work runs on blocking threads ([`ResourceSet::list`], [`ResourceSet::read`]);
//! `invoke::watch` tells subscribers which URIs changed. The resources of an imported MCP server or
//! of a `toolhost:plugin@0.3.0` component are passed on by [`passed`]; [`owners`] keeps every
//! URI to one of them.

pub(crate) mod owners;
pub mod passed;

pub use crate::backend::MAX_URI_BYTES;
use crate::backend::VersionHash;
use percent_encoding::{AsciiSet, CONTROLS, percent_decode_str, utf8_percent_encode};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use toolhost_config::Span;
use toolhost_config::draft::ResourcesDraft;

/// Who reads resources and renders prompts, as the catalog and the prompts see it (invoke's
/// `Session` is one): its id, and which prompts and resource sets it may see.
pub trait Reader: Sync {
    /// Its id in audit records, and to the server or component that answers a passed-on read.
    fn id(&self) -> &str;

    /// Whether it may see the prompt or resource set `name` of `ensemble`.
    fn may_see(&self, ensemble: &str, name: &str) -> bool;
}

/// Directory entries one listing looks at, at most, whatever `max-files` says: a directory
/// with millions of entries costs a bounded walk.
pub const MAX_ENTRIES_WALKED: usize = 200_000;
/// How deep a listing goes below the set's directory.
pub const MAX_DEPTH: usize = 16;
/// Listings and reads of resource files under way at once, host-wide; more wait their turn.
/// With reads of 1 MiB (64 MiB at most) each, what they hold stays a bounded multiple, and
/// the blocking threads they run on stay free for the rest of the host.
pub const MAX_FILE_WORK: usize = 16;

static FILE_WORK: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(MAX_FILE_WORK);

/// What is escaped in a path when it becomes part of a URI: controls, space and the
/// characters URIs reserve or forbid (`/` stays: it separates the path's parts).
const IN_URI: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'[')
    .add(b']')
    .add(b'\\')
    .add(b'^')
    .add(b'`')
    .add(b'{')
    .add(b'|')
    .add(b'}');

/// One directory's files, offered as resources.
#[derive(Debug)]
pub struct ResourceSet {
    pub(crate) name: String,
    pub(crate) ensemble: Arc<str>,
    pub(crate) description: Option<String>,
    pub(crate) directory: PathBuf,
    pub(crate) uri_prefix: String,
    pub(crate) mime_types: Vec<(String, String)>,
    pub(crate) max_file_bytes: usize,
    pub(crate) max_files: usize,
    pub(crate) definition: Span,
    pub(crate) version: VersionHash,
}

/// One file as `resources/list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub uri: String,
    /// Its path below the set's directory (a passed-on resource's name).
    pub path: String,
    pub mime: String,
    /// Its size in bytes, when known (a file's; a server's when it says; a component's never).
    pub size: Option<u64>,
    /// A name for people, and what it is, when its source says (a file says neither: its set
    /// has a description).
    pub title: Option<String>,
    pub description: Option<String>,
}

/// What a resource holds: text (UTF-8 of a textual type) or bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    Text(String),
    Blob(Vec<u8>),
}

/// One resource read whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contents {
    pub uri: String,
    pub mime: String,
    pub body: Body,
}

impl From<Contents> for toolhost_contract::EmbeddedResource {
    fn from(contents: Contents) -> Self {
        toolhost_contract::EmbeddedResource {
            uri: contents.uri,
            mime_type: Some(contents.mime),
            contents: match contents.body {
                Body::Text(text) => toolhost_contract::ResourceContents::Text(text),
                Body::Blob(bytes) => toolhost_contract::ResourceContents::Blob(bytes),
            },
        }
    }
}

impl Contents {
    /// Its size in bytes.
    pub fn len(&self) -> usize {
        match &self.body {
            Body::Text(text) => text.len(),
            Body::Blob(bytes) => bytes.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Why a resource could not be read. Every URI that names nothing this host serves (outside
/// every set, outside the set's directory, hidden, not a file, or not for this caller) is
/// `NotFound`, so a caller learns nothing of what is there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResourceError {
    #[error("no resource `{uri}`")]
    NotFound { uri: String },
    #[error("resource `{uri}` is {size} bytes; this host serves at most {max} from its set")]
    TooLarge { uri: String, size: u64, max: usize },
    #[error("resource `{uri}` could not be read: {reason}")]
    Unreadable { uri: String, reason: String },
}

impl ResourceSet {
    /// The set an ensemble's draft describes.
    pub(crate) fn new(ensemble: &Arc<str>, draft: ResourcesDraft) -> Self {
        let mut hasher = blake3::Hasher::new();
        for part in [
            draft.name.as_str(),
            draft.uri_prefix.as_str(),
            &draft.directory.to_string_lossy(),
            draft.description.as_deref().unwrap_or(""),
        ] {
            hasher.update(&(part.len() as u64).to_le_bytes());
            hasher.update(part.as_bytes());
        }
        for (pattern, mime) in &draft.mime_types {
            hasher.update(pattern.as_bytes());
            hasher.update(b"\0");
            hasher.update(mime.as_bytes());
            hasher.update(b"\0");
        }
        hasher.update(&(draft.max_file_bytes as u64).to_le_bytes());
        hasher.update(&(draft.max_files as u64).to_le_bytes());
        ResourceSet {
            name: draft.name,
            ensemble: Arc::clone(ensemble),
            description: draft.description,
            directory: draft.directory,
            uri_prefix: draft.uri_prefix,
            mime_types: draft.mime_types,
            max_file_bytes: draft.max_file_bytes,
            max_files: draft.max_files,
            definition: draft.definition,
            version: VersionHash(*hasher.finalize().as_bytes()),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn ensemble(&self) -> &str {
        &self.ensemble
    }

    pub fn description(&self) -> Option<&str> {
        self.description.as_deref()
    }

    pub fn directory(&self) -> &Path {
        &self.directory
    }

    pub fn uri_prefix(&self) -> &str {
        &self.uri_prefix
    }

    pub fn max_file_bytes(&self) -> usize {
        self.max_file_bytes
    }

    pub fn definition(&self) -> &Span {
        &self.definition
    }

    pub fn version(&self) -> VersionHash {
        self.version
    }

    /// The set's URI template (RFC 6570): its prefix, then the path (`{+path}` keeps `/`).
    pub fn template(&self) -> String {
        format!("{}{{+path}}", self.uri_prefix)
    }

    /// The URI of the file at `path` below the directory.
    pub fn uri_of(&self, path: &str) -> String {
        format!("{}{}", self.uri_prefix, utf8_percent_encode(path, IN_URI))
    }

    /// The path below the directory that `uri` names, if it is one this set could serve:
    /// under its prefix, relative, without `.`, `..`, empty or hidden parts.
    pub fn path_of(&self, uri: &str) -> Option<String> {
        let rest = uri.strip_prefix(&self.uri_prefix)?;
        let path = percent_decode_str(rest).decode_utf8().ok()?;
        let fine =
            |part: &str| !part.is_empty() && !part.starts_with('.') && !part.contains(['\\', '\0']);
        (uri.len() <= MAX_URI_BYTES && path.split('/').all(fine)).then(|| path.into_owned())
    }

    /// The MIME type of the file at `path`: its exact path in `mime-types`, else the longest
    /// pattern there that matches, else its extension's, else `text/plain` for UTF-8 text
    /// (`head` is the file's start, when at hand) and `application/octet-stream` otherwise.
    pub fn mime_of(&self, path: &str, head: Option<&[u8]>) -> String {
        if let Some((_, mime)) = self.mime_types.iter().find(|(pattern, _)| pattern == path) {
            return mime.clone();
        }
        // The most specific (longest) pattern wins: `*` does not hide `*.md`, whatever
        // order the table is written in.
        if let Some((_, mime)) = self
            .mime_types
            .iter()
            .filter(|(pattern, _)| toolhost_config::glob(pattern, path))
            .max_by_key(|(pattern, _)| pattern.len())
        {
            return mime.clone();
        }
        let extension = path.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase());
        if let Some(mime) = extension.as_deref().and_then(by_extension) {
            return mime.to_string();
        }
        match head {
            Some(head) if looks_like_text(head) => "text/plain".into(),
            _ => "application/octet-stream".into(),
        }
    }

    /// The set's files, sorted by path, and whether the listing stopped at `max-files` (or at
    /// [`MAX_ENTRIES_WALKED`]) before it saw them all.
    pub async fn list(self: &Arc<Self>) -> (Vec<Listed>, bool) {
        // The semaphore is never closed.
        let Ok(_turn) = FILE_WORK.acquire().await else {
            return (Vec::new(), true);
        };
        let set = Arc::clone(self);
        tokio::task::spawn_blocking(move || set.walk())
            .await
            .unwrap_or_else(|_| (Vec::new(), true))
    }

    fn walk(&self) -> (Vec<Listed>, bool) {
        let Ok(root) = self.directory.canonicalize() else {
            return (Vec::new(), false);
        };
        let mut found = Vec::new();
        let mut cut = false;
        let mut walked = 0usize;
        let mut pending = vec![(root.clone(), String::new(), 0usize)];
        'walk: while let Some((dir, relative, depth)) = pending.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                walked += 1;
                if walked > MAX_ENTRIES_WALKED || found.len() >= self.max_files {
                    cut = true;
                    break 'walk;
                }
                let Ok(name) = entry.file_name().into_string() else {
                    continue;
                };
                if name.starts_with('.') {
                    continue;
                }
                let path = if relative.is_empty() {
                    name
                } else {
                    format!("{relative}/{name}")
                };
                // Links are not followed, inside the directory or out.
                let Ok(kind) = entry.file_type() else {
                    continue;
                };
                if kind.is_symlink() {
                    continue;
                }
                let real = entry.path();
                let Ok(metadata) = entry.metadata() else {
                    continue;
                };
                if metadata.is_dir() {
                    if depth + 1 < MAX_DEPTH {
                        pending.push((real, path, depth + 1));
                    }
                } else if metadata.is_file() {
                    let head = (self.needs_head(&path))
                        .then(|| head_of(&self.directory, &path))
                        .flatten();
                    found.push(Listed {
                        uri: self.uri_of(&path),
                        mime: self.mime_of(&path, head.as_deref()),
                        path,
                        size: Some(metadata.len()),
                        title: None,
                        description: None,
                    });
                }
            }
        }
        found.sort_by(|a, b| a.uri.cmp(&b.uri));
        (found, cut)
    }

    /// Whether the MIME type of `path` depends on its content.
    fn needs_head(&self, path: &str) -> bool {
        let by_pattern = self
            .mime_types
            .iter()
            .any(|(pattern, _)| toolhost_config::glob(pattern, path));
        let extension = path.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase());
        !by_pattern && extension.as_deref().and_then(by_extension).is_none()
    }

    /// Reads the resource at `uri` whole: text when its type is textual and it is UTF-8,
    /// bytes otherwise.
    pub async fn read(self: &Arc<Self>, uri: &str) -> Result<Contents, ResourceError> {
        let Ok(_turn) = FILE_WORK.acquire().await else {
            return Err(ResourceError::NotFound { uri: uri.into() });
        };
        let set = Arc::clone(self);
        let uri = uri.to_string();
        let failed = uri.clone();
        tokio::task::spawn_blocking(move || set.read_now(&uri))
            .await
            .unwrap_or_else(|e| {
                Err(ResourceError::Unreadable {
                    uri: failed,
                    reason: e.to_string(),
                })
            })
    }

    fn read_now(&self, uri: &str) -> Result<Contents, ResourceError> {
        let not_found = || ResourceError::NotFound { uri: uri.into() };
        let path = self.path_of(uri).ok_or_else(not_found)?;
        let file = open_beneath(&self.directory, &path).map_err(|_| not_found())?;
        let metadata = file.metadata().map_err(|_| not_found())?;
        if !metadata.is_file() {
            return Err(not_found());
        }
        let too_large = |size| ResourceError::TooLarge {
            uri: uri.into(),
            size,
            max: self.max_file_bytes,
        };
        if metadata.len() > self.max_file_bytes as u64 {
            return Err(too_large(metadata.len()));
        }
        // The file may grow between the look and the read: never read past the bound.
        let mut bytes = Vec::with_capacity(metadata.len() as usize);
        file.take(self.max_file_bytes as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| ResourceError::Unreadable {
                uri: uri.into(),
                reason: e.to_string(),
            })?;
        if bytes.len() > self.max_file_bytes {
            return Err(too_large(bytes.len() as u64));
        }
        let mime = self.mime_of(&path, Some(&bytes[..bytes.len().min(HEAD_BYTES)]));
        let body = if is_textual(&mime) {
            match String::from_utf8(bytes) {
                Ok(text) => Body::Text(text),
                Err(e) => Body::Blob(e.into_bytes()),
            }
        } else {
            Body::Blob(bytes)
        };
        Ok(Contents {
            uri: uri.into(),
            mime,
            body,
        })
    }

    /// The paths below the directory that start with `typed`, for `completion/complete` of
    /// the template's `path` (at most `max`, sorted).
    pub async fn complete(self: &Arc<Self>, typed: &str, max: usize) -> Vec<String> {
        let (listed, _) = self.list().await;
        listed
            .into_iter()
            .map(|l| l.path)
            .filter(|path| path.starts_with(typed))
            .take(max)
            .collect()
    }
}

/// How much of a file's start tells text from bytes.
const HEAD_BYTES: usize = 4096;

fn head_of(directory: &Path, path: &str) -> Option<Vec<u8>> {
    let mut head = Vec::with_capacity(HEAD_BYTES);
    let file = open_beneath(directory, path).ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    file.take(HEAD_BYTES as u64).read_to_end(&mut head).ok()?;
    Some(head)
}

/// Opens `path` (parts checked by [`ResourceSet::path_of`]: none empty, `.` or `..`) below
/// `directory` for reading, one part at a time from the directory's handle, refusing a link at
/// any part (`O_NOFOLLOW`), and without blocking on a FIFO or a device (`O_NONBLOCK`; the
/// caller then refuses what is not a regular file).
fn open_beneath(directory: &Path, path: &str) -> std::io::Result<std::fs::File> {
    use rustix::fs::{Mode, OFlags, openat};
    let mut dir = rustix::fs::open(
        directory,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut parts = path.split('/').peekable();
    while let Some(part) = parts.next() {
        if parts.peek().is_none() {
            let flags = OFlags::RDONLY
                | OFlags::NOFOLLOW
                | OFlags::NONBLOCK
                | OFlags::NOCTTY
                | OFlags::CLOEXEC;
            return Ok(std::fs::File::from(openat(
                &dir,
                part,
                flags,
                Mode::empty(),
            )?));
        }
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        dir = openat(&dir, part, flags, Mode::empty())?;
    }
    Err(std::io::Error::from(std::io::ErrorKind::NotFound))
}

/// UTF-8 (a character cut at the end aside) without NUL bytes.
fn looks_like_text(head: &[u8]) -> bool {
    if head.contains(&0) {
        return false;
    }
    match std::str::from_utf8(head) {
        Ok(_) => true,
        Err(e) => e.error_len().is_none() && head.len() - e.valid_up_to() < 4,
    }
}

/// Whether a resource of type `mime` is sent as text (when it is UTF-8).
pub fn is_textual(mime: &str) -> bool {
    let essence = mime.split(';').next().unwrap_or("").trim();
    essence.starts_with("text/")
        || essence.ends_with("+json")
        || essence.ends_with("+xml")
        || matches!(
            essence,
            "application/json"
                | "application/xml"
                | "application/toml"
                | "application/yaml"
                | "application/javascript"
                | "application/x-sh"
        )
}

/// The MIME types of common extensions.
fn by_extension(extension: &str) -> Option<&'static str> {
    Some(match extension {
        "txt" | "text" | "log" => "text/plain",
        "md" | "markdown" => "text/markdown",
        "html" | "htm" => "text/html",
        "css" => "text/css",
        "csv" => "text/csv",
        "json" => "application/json",
        "toml" => "application/toml",
        "yaml" | "yml" => "application/yaml",
        "xml" => "application/xml",
        "js" | "mjs" => "application/javascript",
        "sh" => "application/x-sh",
        "rs" => "text/x-rust",
        "py" => "text/x-python",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "svg" => "image/svg+xml",
        "pdf" => "application/pdf",
        "wav" => "audio/wav",
        "mp3" => "audio/mpeg",
        "wasm" => "application/wasm",
        "zip" => "application/zip",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(dir: &Path, mime_types: &[(&str, &str)]) -> Arc<ResourceSet> {
        let source = Arc::new(toolhost_config::SourceFile::new(
            dir.join("e.toml"),
            String::new(),
        ));
        let draft = ResourcesDraft {
            name: "docs".into(),
            description: None,
            directory: dir.to_path_buf(),
            uri_prefix: "docs://d/".into(),
            mime_types: mime_types
                .iter()
                .map(|(p, m)| (p.to_string(), m.to_string()))
                .collect(),
            max_file_bytes: 64,
            max_files: 3,
            definition: Span::new(&source, 0..0),
        };
        Arc::new(ResourceSet::new(&Arc::from("e"), draft))
    }

    #[test]
    fn uris_that_leave_the_directory_or_hide_name_nothing() {
        let dir = tempfile::tempdir().expect("dir");
        let set = set(dir.path(), &[]);
        assert_eq!(set.path_of("docs://d/a/b.md").as_deref(), Some("a/b.md"));
        assert_eq!(set.path_of("docs://d/a%20b.md").as_deref(), Some("a b.md"));
        for uri in [
            "docs://d/../secret",
            "docs://d/a/../../secret",
            "docs://d/%2e%2e/secret",
            "docs://d//etc/passwd",
            "docs://d/.env",
            "docs://d/a/.git/config",
            "docs://d/a\\..\\b",
            "docs://d/a%00b",
            "docs://d/",
            "docs://other/a",
            "docs://d/%ff",
        ] {
            assert_eq!(set.path_of(uri), None, "{uri}");
        }
        assert_eq!(set.uri_of("a b/c#d.md"), "docs://d/a%20b/c%23d.md");
    }

    #[tokio::test]
    async fn files_are_read_within_bounds_and_links_out_are_refused() {
        let dir = tempfile::tempdir().expect("dir");
        let outside = tempfile::tempdir().expect("outside");
        std::fs::write(outside.path().join("secret"), "s3cret").expect("write");
        std::fs::write(dir.path().join("a.md"), "# A").expect("write");
        std::fs::write(dir.path().join("logo"), [0x89, b'P', b'N', b'G', 0]).expect("write");
        std::fs::write(dir.path().join("big.txt"), "x".repeat(65)).expect("write");
        std::os::unix::fs::symlink(outside.path().join("secret"), dir.path().join("link"))
            .expect("link");
        std::fs::write(dir.path().join(".env"), "TOKEN=1").expect("write");
        // A link to a hidden file inside the directory, and a FIFO nobody writes to.
        std::os::unix::fs::symlink(dir.path().join(".env"), dir.path().join("env")).expect("link");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            dir.path().join("pipe"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .expect("fifo");
        let set = set(dir.path(), &[("logo", "image/png")]);

        let text = set.read("docs://d/a.md").await.expect("read");
        assert_eq!(text.mime, "text/markdown");
        assert_eq!(text.body, Body::Text("# A".into()));
        let logo = set.read("docs://d/logo").await.expect("read");
        assert_eq!(logo.mime, "image/png");
        assert!(matches!(logo.body, Body::Blob(ref b) if b.len() == 5));
        assert!(matches!(
            set.read("docs://d/big.txt").await,
            Err(ResourceError::TooLarge {
                size: 65,
                max: 64,
                ..
            })
        ));
        for refused in [
            "docs://d/link",
            "docs://d/env",
            "docs://d/pipe",
            "docs://d/.env",
        ] {
            assert!(
                matches!(set.read(refused).await, Err(ResourceError::NotFound { .. })),
                "{refused}"
            );
        }

        let (listed, cut) = set.list().await;
        let paths: Vec<&str> = listed.iter().map(|l| l.path.as_str()).collect();
        assert_eq!(paths, ["a.md", "big.txt", "logo"]);
        assert!(!cut);
        std::fs::write(dir.path().join("z.txt"), "z").expect("write");
        let (listed, cut) = set.list().await;
        assert_eq!(listed.len(), 3, "max-files holds");
        assert!(cut);
    }

    #[test]
    fn text_is_told_from_bytes() {
        assert!(looks_like_text(b"hello\n"));
        assert!(looks_like_text("caf\u{e9}".as_bytes()));
        assert!(looks_like_text(&"\u{e9}".as_bytes()[..1]), "cut at the end");
        assert!(!looks_like_text(b"a\0b"));
        assert!(!looks_like_text(&[0xff, 0xfe, b'a', b'b', b'c']));
        assert!(is_textual("application/json; charset=utf-8"));
        assert!(!is_textual("image/png"));
    }
}
