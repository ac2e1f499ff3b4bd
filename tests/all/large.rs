//! Large catalogs: positions of errors stay exact at the end of a 20,000-invoker file (they
//! are computed from a line index, only for the message).

use crate::support::{Fixture, ensemble};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_at_the_end_of_a_large_file_has_its_exact_line_and_column() {
    let fixture = Fixture::new();
    let mut rest = String::new();
    for i in 0..20_000 {
        rest.push_str(&format!(
            "[[invokers]]\ninvoker = {{ name = \"echo_{i:05}\", tool = \"echo\" }}\n"
        ));
    }
    rest.push_str("[[invokers]]\ninvoker = { name = \"last\", tool = \"nope\" }\n");
    let text = ensemble("big", "echo", &rest);
    let (index, line) = text
        .lines()
        .enumerate()
        .find(|(_, line)| line.contains("\"nope\""))
        .expect("the bad line");
    let (expected_line, expected_column) = (index + 1, line.find("\"nope\"").expect("nope") + 1);
    assert!(
        expected_line > 40_000,
        "the error is at the end of the file"
    );
    fixture.write("big.toml", &text);

    let resolved = fixture.resolve().await;
    let errors: Vec<_> = resolved.diagnostics().collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    let location = &errors[0].location;
    assert_eq!(
        (location.line, location.column),
        (Some(expected_line), Some(expected_column))
    );
    assert!(
        errors[0].to_string().contains("has no tool `nope`"),
        "{}",
        errors[0]
    );
}
