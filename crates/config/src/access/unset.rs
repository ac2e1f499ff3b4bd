//! unset: what a variable a host file names means when it is not set (or empty): an error
//! for `serve`, which needs its value, a warning for the local commands; and how that is said.

use crate::{Diagnostic, Location};

/// What a variable that is not set (or empty) means to the check of the host file.
pub enum Unset<'a> {
    /// An error: `serve`, which authenticates with the values, refuses to start.
    Refuse,
    /// A warning, kept here, and what the variable feeds is left out (a token is kept by its
    /// name and groups, matching no token; a provider or a sign-in is left out): the local
    /// commands authenticate nobody.
    Warn(&'a mut Vec<Diagnostic>),
}

impl Unset<'_> {
    /// What is said of the variable `var`, which `key` names, when it is not set.
    pub fn message(key: &str, var: &str) -> String {
        format!("${var} (`{key}`) is not set: `serve` refuses to start without it")
    }

    /// The variable `var`, which `key` names at `at`, is not set: for `serve` an error,
    /// returned for the caller's list; otherwise a warning, kept here.
    pub fn not_set(&mut self, at: Location, key: &str, var: &str) -> Option<Diagnostic> {
        let diagnostic = Diagnostic::new(at, Self::message(key, var));
        match self {
            Unset::Refuse => Some(diagnostic),
            Unset::Warn(warnings) => {
                warnings.push(diagnostic);
                None
            }
        }
    }
}
