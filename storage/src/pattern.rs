//! Entry patterns: the names and globs that select entries (`entries=` of a bucket-level
//! query, a replication task's entries, `tsblob cp --entries`). `*` matches any characters
//! but `/` (within one segment), `**` any characters including `/`; every other character
//! matches itself.
//!
//! A pattern is compiled once ([`EntryPattern::parse`]) and then matched in time linear in
//! the name. Bug "glob backtracking" (issue 27, defect 1): the matcher before this one
//! backtracked over every way to split the name between the stars, so 40 `**` then a
//! literal (or 20 `*a` then a literal) against a 200-character name never answered, and 520
//! such queries used up the server's blocking pool.
//!
//! Why the `regex` crate and not a hand-written automaton: its engines guarantee
//! `O(pattern × name)` worst case (no backtracking engine at all), its lazy DFA makes the
//! common case one pass over the name, and a glob translates to it in a few lines
//! (`**` → `.*`, `*` → `[^/]*`, anchored, literals escaped byte by byte), so the part we
//! write and must trust stays small; the fuzz target `entry_pattern` checks it against a
//! plain reference matcher. It matches bytes with Unicode off, exactly the old semantics.

use regex::bytes::Regex;
use thiserror::Error;

use crate::names::validate_entry_name;
use crate::NameError;

/// The most wildcards a pattern may have, a run of stars counting once (`***` is `**`).
/// Matching stays linear whatever the count; the cap keeps each compiled pattern small
/// (and a pattern is at most [`tsblob_proto::names::ENTRY_MAX`] bytes, the name rules'
/// length cap, since it obeys them once its stars are letters).
pub const MAX_PATTERN_WILDCARDS: usize = 32;

/// A pattern that cannot be used.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum PatternError {
    /// The pattern breaks the name rules once its stars are read as letters.
    #[error(transparent)]
    Name(#[from] NameError),
    /// More wildcards than [`MAX_PATTERN_WILDCARDS`].
    #[error("entry pattern {} has {count} wildcards, over the limit of {max}: use fewer `*` (a `**` matches across segments already)", tsblob_proto::quote_short(.pattern))]
    TooManyWildcards {
        pattern: String,
        count: usize,
        max: usize,
    },
    /// More patterns in one list than [`MAX_PATTERNS`].
    #[error("{count} entry patterns, over the limit of {max} in one list: use globs (`cam/*`, `**`) instead of listing names one by one")]
    TooMany { count: usize, max: usize },
}

/// The most patterns one list may hold (a query's `entries`, a replication task's): each is
/// compiled, and every entry name is matched against each. 200,000 `*a` in a 1 MiB query
/// body were 400,000 compilations on a runtime worker.
pub const MAX_PATTERNS: usize = 1024;

/// Fails a list of more than [`MAX_PATTERNS`] patterns.
pub fn check_pattern_count(count: usize) -> Result<(), PatternError> {
    if count > MAX_PATTERNS {
        return Err(PatternError::TooMany {
            count,
            max: MAX_PATTERNS,
        });
    }
    Ok(())
}

/// A compiled entry name or glob.
#[derive(Debug, Clone)]
pub struct EntryPattern {
    text: String,
    kind: Kind,
}

#[derive(Debug, Clone)]
enum Kind {
    /// No wildcard: the name itself.
    Exact,
    /// `**` alone: every name.
    Any,
    Glob(Regex),
}

/// One piece of a pattern: a byte, or a run of stars (`Star`: exactly one; `Stars`: two
/// or more, which match what `**` matches).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    Byte(u8),
    Star,
    Stars,
}

fn tokens(pattern: &str) -> Vec<Token> {
    let bytes = pattern.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'*' {
            out.push(Token::Byte(bytes[i]));
            i += 1;
            continue;
        }
        let run = bytes[i..].iter().take_while(|b| **b == b'*').count();
        out.push(if run == 1 { Token::Star } else { Token::Stars });
        i += run;
    }
    out
}

impl EntryPattern {
    /// Checks and compiles a pattern: it must obey the entry name rules once its stars are
    /// letters, and have at most [`MAX_PATTERN_WILDCARDS`] wildcards.
    pub fn parse(pattern: &str) -> Result<EntryPattern, PatternError> {
        validate_entry_name(&pattern.replace('*', "x"))?;
        EntryPattern::compile(pattern)
    }

    /// Compiles a pattern without the name rules (for names that come from elsewhere than
    /// this store, e.g. a folder copied by `tsblob cp`); the wildcard cap still holds.
    pub fn compile(pattern: &str) -> Result<EntryPattern, PatternError> {
        let tokens = tokens(pattern);
        let count = tokens
            .iter()
            .filter(|t| !matches!(t, Token::Byte(_)))
            .count();
        if count > MAX_PATTERN_WILDCARDS {
            return Err(PatternError::TooManyWildcards {
                pattern: pattern.to_string(),
                count,
                max: MAX_PATTERN_WILDCARDS,
            });
        }
        let kind = match tokens.as_slice() {
            _ if count == 0 => Kind::Exact,
            [Token::Stars] => Kind::Any,
            _ => {
                // Bytes mode with Unicode off: `[^/]` is any byte but `/`, as before.
                let mut re = String::from("(?s-u)^");
                for t in &tokens {
                    match t {
                        Token::Byte(b) if b.is_ascii_alphanumeric() => re.push(*b as char),
                        Token::Byte(b) => re.push_str(&format!("\\x{b:02x}")),
                        Token::Star => re.push_str("[^/]*"),
                        Token::Stars => re.push_str(".*"),
                    }
                }
                re.push('$');
                // A few hundred bytes of pattern, 32 repetitions at most: far inside the
                // crate's size limits, so a failure here is a bug of ours.
                Kind::Glob(Regex::new(&re).map_err(|e| {
                    debug_assert!(false, "entry pattern {re} did not compile: {e}");
                    PatternError::TooManyWildcards {
                        pattern: pattern.to_string(),
                        count,
                        max: MAX_PATTERN_WILDCARDS,
                    }
                })?)
            }
        };
        Ok(EntryPattern {
            text: pattern.to_string(),
            kind,
        })
    }

    /// The pattern as it was given.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether it has a wildcard (otherwise it names one entry).
    pub fn is_glob(&self) -> bool {
        !matches!(self.kind, Kind::Exact)
    }

    /// Whether `name` matches, in time linear in its length.
    pub fn matches(&self, name: &str) -> bool {
        match &self.kind {
            Kind::Exact => self.text == name,
            Kind::Any => true,
            Kind::Glob(re) => re.is_match(name.as_bytes()),
        }
    }
}

/// Entries picked by a list of patterns, as ReductStore picks them for lifecycle rules and
/// multi-entry queries: an entry is picked when some pattern includes it (every entry when
/// the list has no include pattern) and no `!pattern` matches it.
#[derive(Debug, Clone, Default)]
pub struct EntrySelection {
    include: Vec<EntryPattern>,
    exclude: Vec<EntryPattern>,
}

impl EntrySelection {
    /// Each pattern compiled ([`EntryPattern::parse`]; a leading `!` makes it an exclusion).
    pub fn new(patterns: &[String]) -> Result<EntrySelection, PatternError> {
        check_pattern_count(patterns.len())?;
        let mut sel = EntrySelection {
            include: Vec::new(),
            exclude: Vec::new(),
        };
        for p in patterns {
            let (list, text) = match p.strip_prefix('!') {
                Some(t) => (&mut sel.exclude, t),
                None => (&mut sel.include, p.as_str()),
            };
            list.push(EntryPattern::parse(text)?);
        }
        Ok(sel)
    }

    /// Every entry.
    pub fn all() -> EntrySelection {
        EntrySelection::default()
    }

    /// Whether the entry `name` is picked.
    pub fn selects(&self, name: &str) -> bool {
        (self.include.is_empty() || self.include.iter().any(|p| p.matches(name)))
            && !self.exclude.iter().any(|p| p.matches(name))
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_list_of_more_than_max_patterns_is_refused() {
        let ok: Vec<String> = (0..MAX_PATTERNS).map(|i| format!("e{i}*")).collect();
        assert!(EntrySelection::new(&ok).is_ok());
        let over: Vec<String> = (0..MAX_PATTERNS + 1).map(|i| format!("e{i}*")).collect();
        match EntrySelection::new(&over) {
            Err(PatternError::TooMany { count, max }) => {
                assert_eq!((count, max), (MAX_PATTERNS + 1, MAX_PATTERNS))
            }
            other => panic!("{other:?}"),
        }
    }

    use super::*;

    fn m(pattern: &str, name: &str) -> bool {
        EntryPattern::compile(pattern).unwrap().matches(name)
    }

    /// A plain backtracking matcher (the old one): the reference on small inputs.
    fn reference(p: &[u8], n: &[u8]) -> bool {
        match p.first() {
            None => n.is_empty(),
            Some(b'*') if p.get(1) == Some(&b'*') => {
                (0..=n.len()).any(|i| reference(&p[2..], &n[i..]))
            }
            Some(b'*') => {
                for i in 0..=n.len() {
                    if reference(&p[1..], &n[i..]) {
                        return true;
                    }
                    if n.get(i) == Some(&b'/') {
                        return false;
                    }
                }
                false
            }
            Some(c) => n.first() == Some(c) && reference(&p[1..], &n[1..]),
        }
    }

    #[test]
    fn a_selection_includes_then_excludes() {
        let s = EntrySelection::new(&["cam/*".into(), "!cam/raw".into()]).unwrap();
        assert!(s.selects("cam/front"));
        assert!(!s.selects("cam/raw"));
        assert!(!s.selects("lidar"));
        let s = EntrySelection::new(&["!tmp*".into()]).unwrap();
        assert!(s.selects("lidar"));
        assert!(!s.selects("tmp1"));
        assert!(EntrySelection::new(&[]).unwrap().selects("any/thing"));
        assert!(EntrySelection::new(&["a b".into()]).is_err());
    }

    #[test]
    fn stars_match_within_a_segment_and_double_stars_across() {
        assert!(m("cams/*", "cams/front"));
        assert!(!m("cams/*", "cams/front/left"));
        assert!(m("cams/**", "cams/front/left"));
        assert!(m("**", "a/b/c"));
        assert!(m("*/lidar", "robot1/lidar"));
        assert!(m("cam*", "camera"));
        assert!(!m("cam*", "cam/x"));
        assert!(m("imu", "imu"));
        assert!(!m("imu", "imu2"));
        assert!(m("a.b", "a.b"));
        assert!(!m("a.b", "axb"), "a dot is a literal");
        assert!(m("***", "a/b"), "a run of stars is **");
        assert!(m("a**b*c", "a/x/byc"));
        assert!(!m("a**b*c", "a/x/b/yc"));
    }

    #[test]
    fn the_compiled_matcher_agrees_with_the_reference_on_every_small_case() {
        let alphabet = [b'a', b'/', b'*'];
        let names = [b'a', b'/', b'b'];
        let all = |len: usize, set: &[u8]| -> Vec<Vec<u8>> {
            let mut out = vec![Vec::new()];
            for _ in 0..len {
                out = out
                    .into_iter()
                    .flat_map(|v| {
                        set.iter().map(move |c| {
                            let mut v = v.clone();
                            v.push(*c);
                            v
                        })
                    })
                    .collect();
            }
            out
        };
        let patterns: Vec<Vec<u8>> = (0..=5).flat_map(|l| all(l, &alphabet)).collect();
        let names: Vec<Vec<u8>> = (0..=5).flat_map(|l| all(l, &names)).collect();
        for p in &patterns {
            let text = std::str::from_utf8(p).unwrap();
            let compiled = EntryPattern::compile(text).unwrap();
            for n in &names {
                let name = std::str::from_utf8(n).unwrap();
                assert_eq!(
                    compiled.matches(name),
                    reference(p, n),
                    "{text:?} on {name:?}"
                );
            }
        }
    }

    /// Bug "glob backtracking" (issue 27, defect 1): 40 `**` then a literal, or 20 `*a` then
    /// a literal, against a 200-character name never returned.
    #[test]
    fn glob_of_many_stars_against_a_long_name_took_exponential_time() {
        let name = "a".repeat(200);
        let started = std::time::Instant::now();
        for pattern in [
            format!("{}b", "**".repeat(40)),
            format!("{}b", "*a".repeat(20)),
            format!("{}b", "**a".repeat(20)),
        ] {
            let p = EntryPattern::parse(&pattern).unwrap();
            for _ in 0..100 {
                assert!(!p.matches(&name));
            }
        }
        let took = started.elapsed();
        assert!(took < std::time::Duration::from_secs(1), "took {took:?}");
    }

    #[test]
    fn too_many_wildcards_and_bad_names_are_refused() {
        let e = EntryPattern::parse(&format!("{}b", "*a".repeat(33))).unwrap_err();
        assert!(
            matches!(
                e,
                PatternError::TooManyWildcards {
                    count: 33,
                    max: 32,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("over the limit of 32"), "{e}");
        // A run of stars counts once.
        assert!(EntryPattern::parse(&"*".repeat(100)).is_ok());
        assert!(matches!(
            EntryPattern::parse("a/../*"),
            Err(PatternError::Name(_))
        ));
        assert!(matches!(
            EntryPattern::parse(&"*".repeat(300)),
            Err(PatternError::Name(_))
        ));
    }
}
