//! Glob patterns over model IDs (a key's `models`): `*` and `?`, nothing else special.
//!
//! Patterns and IDs are compared as characters, not bytes, so `?` is one Unicode character.

/// `*` matches any run of characters, `?` exactly one; everything else matches itself.
pub fn matches(pattern: &[char], text: &[char]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut backtrack: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && (pattern[p] == '?' || pattern[p] == text[t]) {
            p += 1;
            t += 1;
        } else if p < pattern.len() && pattern[p] == '*' {
            backtrack = Some((p, t));
            p += 1;
        } else if let Some((star, matched)) = backtrack {
            p = star + 1;
            t = matched + 1;
            backtrack = Some((star, matched + 1));
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
    fn globs_match_like_shell_patterns() {
        let cases = [
            ("llama-*", "llama-3.1-8b", true),
            ("llama-*", "mistral-7b", false),
            ("*", "anything", true),
            ("gpt-?", "gpt-4", true),
            ("gpt-?", "gpt-4o", false),
            ("*-8b", "llama-3.1-8b", true),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
            ("exact", "exact", true),
            ("exact", "exactly", false),
            ("mod?l-é", "modèl-é", true),
        ];
        for (pattern, text, expected) in cases {
            let (p, t): (Vec<char>, Vec<char>) =
                (pattern.chars().collect(), text.chars().collect());
            assert_eq!(matches(&p, &t), expected, "{pattern} vs {text}");
        }
    }
}
