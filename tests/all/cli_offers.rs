//! `toolhost prompt` and `toolhost read` on the `notes` ensemble of the MCP offers' tests:
//! the messages and contents an MCP client gets, the same refusals (one line, exit 1), a
//! malformed `--arg` as a usage error, and the audit records.

use crate::mcp_offers::fixture;
use serde_json::Value;

/// `toolhost prompt` and `toolhost read`: `call`'s counterparts, through the same checks.
#[test]
fn prompts_and_resources_from_the_command_line() {
    let fixture = fixture();
    let run = |args: &[&str]| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_toolhost"));
        crate::mcp::configure(&mut command, &fixture);
        let output = command.args(args).output().expect("toolhost");
        let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).to_string();
        (
            output.status.code(),
            text(&output.stdout),
            text(&output.stderr),
        )
    };
    let (code, out, err) = run(&[
        "prompt",
        "n_review",
        "--arg",
        "path=src/lib.rs",
        "--arg",
        "focus=bugs",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        out,
        "[user] Review src/lib.rs, looking for bugs.\n[assistant] Which part first?\n"
    );
    let (code, out, err) = run(&["prompt", "n_discuss", "--arg", "note=intro.md", "--json"]);
    assert_eq!(code, Some(0), "{err}");
    let report: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(report["messages"][0]["content"]["type"], "resource");
    assert_eq!(report["messages"][1]["content"]["type"], "image");
    // The same refusals as an MCP client's, one line each, exit 1.
    let (code, _, err) = run(&["prompt", "n_review"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("path"), "{err}");
    let (code, _, err) = run(&["prompt", "n_review", "--arg", "path"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--arg takes NAME=VALUE"), "{err}");

    let (code, out, err) = run(&["read", "docs://notes/guides/setup.txt"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "Run the two commands.\n");
    let (code, out, err) = run(&["read", "docs://notes/logo", "--json"]);
    assert_eq!(code, Some(0), "{err}");
    let report: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(report["contents"][0]["mimeType"], "image/png");
    assert_eq!(report["contents"][0]["blob"], "iVBORwABAg==");
    for refused in [
        "docs://notes/out",
        "docs://notes/.env",
        "docs://notes/big.txt",
    ] {
        let (code, out, err) = run(&["read", refused]);
        assert_eq!(code, Some(1), "{refused}: {out}");
        assert!(err.starts_with("error: "), "{err}");
    }
    // Audited as an MCP client's are.
    let audited = fixture.audited("resource");
    assert!(
        audited
            .iter()
            .any(|r| r["tool"] == "docs://notes/guides/setup.txt" && r["outcome"] == "ok"),
        "{audited:?}"
    );
    assert_eq!(fixture.audited("prompt").len(), 3);
}
