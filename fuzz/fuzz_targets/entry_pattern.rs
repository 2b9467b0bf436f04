//! Fuzzes the entry-pattern matcher (`tsblob_storage::EntryPattern`, issue 27 defect 1)
//! against a plain reference: a table of which pattern prefix matches which name prefix
//! (`O(pattern × name)`, obviously right, too slow to serve). Inputs are tiny: the first
//! byte cuts the rest into a pattern over `a b / *` and a name over `a b /`; the two must
//! agree on every input, and `compile` must accept every pattern within the wildcard cap.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tsblob_storage::{EntryPattern, MAX_PATTERN_WILDCARDS};

/// `m[i][j]`: the first `i` pattern bytes match the first `j` name bytes.
fn reference(p: &[u8], n: &[u8]) -> bool {
    let mut m = vec![vec![false; n.len() + 1]; p.len() + 1];
    m[0][0] = true;
    for i in 1..=p.len() {
        let double = p[i - 1] == b'*' && i >= 2 && p[i - 2] == b'*';
        for j in 0..=n.len() {
            m[i][j] = match p[i - 1] {
                // `**` (the second star of a pair, or a longer run): any bytes after
                // the run's first star.
                b'*' if double => m[i - 1][j] || (j > 0 && m[i][j - 1]),
                // A single star (perhaps the first of a run): bytes other than `/`.
                b'*' => m[i - 1][j] || (j > 0 && n[j - 1] != b'/' && m[i][j - 1]),
                c => j > 0 && n[j - 1] == c && m[i - 1][j - 1],
            };
        }
    }
    m[p.len()][n.len()]
}

fuzz_target!(|data: &[u8]| {
    let Some((&cut, rest)) = data.split_first() else {
        return;
    };
    let rest = &rest[..rest.len().min(64)];
    let cut = (cut as usize) % (rest.len() + 1);
    let pattern: Vec<u8> = rest[..cut].iter().map(|b| b"ab/*"[(*b % 4) as usize]).collect();
    let name: Vec<u8> = rest[cut..].iter().map(|b| b"ab/"[(*b % 3) as usize]).collect();
    let (p, n) = (
        std::str::from_utf8(&pattern).unwrap_or_default(),
        std::str::from_utf8(&name).unwrap_or_default(),
    );
    match EntryPattern::compile(p) {
        Ok(compiled) => assert_eq!(compiled.matches(n), reference(&pattern, &name), "{p:?} on {n:?}"),
        Err(e) => {
            let runs = p.split(|c| c != '*').filter(|r| !r.is_empty()).count();
            assert!(runs > MAX_PATTERN_WILDCARDS, "{p:?} refused: {e}");
        }
    }
});
