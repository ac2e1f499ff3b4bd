//! glob: the one pattern language of names in the configuration (access rules' `tools` and
//! `ensembles`, resource sets' MIME types by path).

/// `*` matches any run of characters (none too), `?` one character; the rest itself.
pub fn glob(pattern: &str, text: &str) -> bool {
    let (pattern, text): (Vec<char>, Vec<char>) =
        (pattern.chars().collect(), text.chars().collect());
    // The classic two-pointer match with one backtrack point: linear in practice, never
    // exponential (names are 64 characters at most anyway).
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && (pattern[p] == '?' || pattern[p] == text[t]) {
            p += 1;
            t += 1;
        } else if p < pattern.len() && pattern[p] == '*' {
            star = Some((p, t));
            p += 1;
        } else if let Some((star_p, star_t)) = star {
            p = star_p + 1;
            t = star_t + 1;
            star = Some((star_p, star_t + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_runs_and_single_characters() {
        assert!(glob("calculate", "calculate"));
        assert!(!glob("calculate", "calculator"));
        assert!(glob("fetch_*", "fetch_page"));
        assert!(glob("fetch_*", "fetch_"));
        assert!(glob("*", "anything"));
        assert!(glob("*_page", "fetch_page"));
        assert!(glob("f?tch*", "fetch_page"));
        assert!(!glob("f?tch", "ftch"));
        assert!(glob("a*b*c", "axxbyyc"));
        assert!(!glob("a*b*c", "axxbyy"));
    }
}
