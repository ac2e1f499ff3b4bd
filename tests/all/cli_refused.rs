//! What the CLI says of a tool whose ensemble was refused: `call` names the file and its
//! first reason (a core module instead of a component, say) before the tool is reported
//! missing, and a catalog with no tool says so instead of listing nothing.

use crate::support::Fixture;
use std::process::Command;

#[test]
fn a_call_to_a_tool_of_a_refused_ensemble_says_why_it_is_not_served() {
    let fixture = Fixture::new();
    std::fs::write(
        fixture.root().join("core.wasm"),
        wat::parse_str("(module)").expect("wat"),
    )
    .expect("write");
    fixture.write(
        "c.toml",
        "schema-version = 1\n[ensemble]\nname = \"c\"\ncomponent = \"../core.wasm\"\n\n\
         [[invokers]]\ninvoker = { name = \"hello\" }\n",
    );
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
    crate::mcp::configure(&mut command, &fixture);
    let output = command
        .args(["call", "hello", "{}"])
        .output()
        .expect("call");
    assert_eq!(output.status.code(), Some(1));
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(said.contains("c.toml was refused: "), "{said}");
    assert!(
        said.contains("core.wasm is not a valid WebAssembly component"),
        "{said}"
    );
    assert!(said.contains("it is a core WebAssembly module"), "{said}");
    assert!(said.contains("its tools are not served"), "{said}");
    assert!(
        said.contains("no tool named `hello`; available tools: none (no ensemble serves a tool)"),
        "{said}"
    );
}
