//! template: the text of a prompt's messages, with its arguments filled in by minijinja, in
//! an environment that can do nothing but compute text: no loader (so no `include` and no
//! file), no macros, no functions of ours. Names a template reads must be the prompt's
//! arguments (checked when the ensemble loads); an optional argument not given is undefined
//! (empty as text, false in `if`). Each render is
//! bounded three ways: fuel ([`FUEL`] instructions), recursion ([`RECURSION`]) and output
//! ([`MAX_OUTPUT_BYTES`], enforced by the writer, so that one expression that builds a huge
//! string cannot overshoot what fuel charges after the fact).
//!
//! The ensemble check compiles every template ([`check`]); a prompt's `get` renders it
//! ([`render`]).

use minijinja::{Environment, ErrorKind, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::io;

/// Instructions one render may run (minijinja charges data too, about 1 per 64 bytes).
pub const FUEL: u64 = 100_000;
/// How deep one render's loops and calls may nest.
pub const RECURSION: usize = 64;
/// Bytes one message's text may render to.
pub const MAX_OUTPUT_BYTES: usize = 256 << 10;
/// Bytes of one template's source.
pub const MAX_SOURCE_BYTES: usize = 64 << 10;

/// Why a template was refused or could not render: the engine's message, and the line of the
/// template it points at (1-based) when it knows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct TemplateError {
    pub message: String,
    pub line: Option<usize>,
}

fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_fuel(Some(FUEL));
    env.set_recursion_limit(RECURSION);
    env
}

fn refused(error: minijinja::Error) -> TemplateError {
    let message = match error.kind() {
        ErrorKind::OutOfFuel => format!(
            "the template ran out of fuel ({FUEL} steps): it does too much work for a prompt"
        ),
        _ => match error.detail() {
            Some(detail) => format!("{}: {detail}", error.kind()),
            None => error.kind().to_string(),
        },
    };
    TemplateError {
        message,
        line: error.line(),
    }
}

/// Compiles `source` and returns the names it reads that are not set in it: each must be an
/// argument of the prompt.
pub fn check(source: &str) -> Result<BTreeSet<String>, TemplateError> {
    if source.len() > MAX_SOURCE_BYTES {
        return Err(TemplateError {
            message: format!(
                "the template is {} bytes; at most {MAX_SOURCE_BYTES} are taken",
                source.len()
            ),
            line: None,
        });
    }
    let env = environment();
    let template = env.template_from_str(source).map_err(refused)?;
    // The engine's own functions (`range`, `dict`, ...) are read as names too.
    let globals: BTreeSet<&str> = env.globals().map(|(name, _)| name).collect();
    Ok(template
        .undeclared_variables(false)
        .into_iter()
        .filter(|name| !globals.contains(name.as_str()))
        .collect())
}

/// Renders `source` with `arguments` as its variables.
pub fn render(source: &str, arguments: &BTreeMap<String, String>) -> Result<String, TemplateError> {
    let env = environment();
    let template = env.template_from_str(source).map_err(refused)?;
    let context: BTreeMap<&str, Value> = arguments
        .iter()
        .map(|(name, value)| (name.as_str(), Value::from(value.as_str())))
        .collect();
    let mut out = Capped(Vec::new());
    match template.render_captured_to(Value::from(context), &mut out) {
        Ok(_) => {}
        Err(error) if error.kind() == ErrorKind::WriteFailure => {
            return Err(TemplateError {
                message: format!(
                    "the text rendered past {MAX_OUTPUT_BYTES} bytes, the most one message takes"
                ),
                line: None,
            });
        }
        Err(error) => return Err(refused(error)),
    }
    // minijinja writes what it renders as UTF-8.
    String::from_utf8(out.0).map_err(|_| TemplateError {
        message: "the text rendered is not UTF-8".into(),
        line: None,
    })
}

/// A writer that refuses to grow past [`MAX_OUTPUT_BYTES`].
struct Capped(Vec<u8>);

impl io::Write for Capped {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.0.len() + buf.len() > MAX_OUTPUT_BYTES {
            return Err(io::Error::other("output cap"));
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn arguments_fill_the_text_and_undeclared_names_are_found() {
        let source = "Review {{ path }}{% if focus %} for {{ focus }}{% endif %}\
                      {% for i in range(2) %}!{% endfor %}";
        let names = check(source).expect("compiles");
        assert_eq!(names, ["focus", "path"].map(String::from).into());
        let text = render(source, &args(&[("path", "a.rs"), ("focus", "bugs")]));
        assert_eq!(text.expect("renders"), "Review a.rs for bugs!!");
    }

    #[test]
    fn a_syntax_error_says_which_line() {
        let error = check("one\ntwo {{ 1 + }}\nthree").expect_err("refused");
        assert_eq!(error.line, Some(2), "{error:?}");
    }

    #[test]
    fn an_optional_argument_not_given_is_undefined() {
        let source = "Hi {{ name }}{% if focus is defined %}, on {{ focus }}{% endif %}.";
        assert_eq!(render(source, &args(&[])).expect("renders"), "Hi .");
        let text = render(source, &args(&[("name", "Ann"), ("focus", "tests")]));
        assert_eq!(text.expect("renders"), "Hi Ann, on tests.");
    }

    #[test]
    fn a_template_that_builds_a_huge_text_is_stopped_by_fuel_or_the_output_cap() {
        // Within fuel (5,000 turns of a loop), past the cap (500 KB).
        let x = "x".repeat(100);
        let source = "{% for i in range(5000) %}{{ x }}{% endfor %}";
        let error = render(source, &args(&[("x", &x)])).expect_err("cap");
        assert!(error.message.contains("rendered past"), "{error:?}");
        let fits = render(
            "{% for i in range(2000) %}{{ x }}{% endfor %}",
            &args(&[("x", &x)]),
        );
        assert_eq!(fits.expect("under the cap").len(), 200_000);
        // One expression that would build 80 MB.
        let error = render("{{ x * 10000000 }}", &args(&[("x", "abcdefgh")])).expect_err("big");
        assert!(
            error.message.contains("fuel") || error.message.contains("rendered past"),
            "{error:?}"
        );
        let looping =
            "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}";
        let error = render(looping, &args(&[])).expect_err("fuel or cap");
        assert!(
            error.message.contains("fuel") || error.message.contains("rendered past"),
            "{error:?}"
        );
    }

    #[test]
    fn nothing_outside_the_template_can_be_reached() {
        for source in [
            "{% include 'secret.txt' %}",
            "{% extends 'base' %}",
            "{% import 'm' as m %}",
        ] {
            let outcome = check(source).and_then(|_| render(source, &args(&[])));
            assert!(outcome.is_err(), "{source} rendered: {outcome:?}");
        }
    }
}
