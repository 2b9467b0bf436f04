//! Fuzzes the `when` condition language (issue 27, item 7): the parser every query, `tsblob
//! cp` and replication task runs on JSON a client wrote (`server/src/when.rs`), and the
//! engine's evaluation of whatever condition it accepts.
//!
//! The first input byte picks the evaluation flags (strict, descending); the rest is the
//! `when` text. Properties, besides never panicking:
//! - a refusal is a `WhenError` whose code is `bad_request` (answered 400) or
//!   `unsupported_directive`/`unsupported_time_zone` (422), and whose message starts `when:`;
//! - the parser's own rendering of the JSON it read (`Json`'s `Display`, which its error
//!   messages quote) parses to the same condition: what a message shows is what was read;
//! - evaluating an accepted condition over a fixed set of records never panics, keeps only
//!   records it was given, in their order, and gives the same answer twice.
//!
//! The parser is compiled here from its source file (`#[path]`): depending on the server
//! crate would build axum, the AWS SDK and aws-lc into this workspace for one module that
//! needs none of them (its error type is its own).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tsblob_storage::Labels;

#[allow(dead_code)]
#[path = "../../server/src/when.rs"]
mod when;

/// Records to evaluate on: numbers, texts, booleans, edge values and missing labels.
fn records() -> Vec<(u64, Labels)> {
    let values: [&[(&str, &str)]; 8] = [
        &[("cam", "front"), ("score", "10"), ("flag", "true")],
        &[("cam", "back"), ("score", "2.5"), ("flag", "false")],
        &[("cam", ""), ("score", "-0")],
        &[("score", "nan"), ("flag", "1")],
        &[("score", "inf"), ("cam", "$front")],
        &[("score", "9223372036854775807"), ("cam", "10")],
        &[("score", "-9223372036854775808"), ("x", "&cam")],
        &[],
    ];
    values
        .iter()
        .enumerate()
        .map(|(i, labels)| {
            let ts = [0, 1, 1_000_000, 1_500_000, 60_000_000, 1 << 53, u64::MAX / 2, u64::MAX - 1][i];
            let labels = labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<Labels>();
            (ts, labels)
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let condition = match when::parse_text(text) {
        Ok(c) => c,
        Err(e) => {
            assert!(
                ["bad_request", "unsupported_directive", "unsupported_time_zone"].contains(&e.code),
                "{}",
                e.code
            );
            assert!(e.message.starts_with("when: "), "{}", e.message);
            return;
        }
    };
    // parse_text accepted it, so it is JSON: its rendering must read back the same.
    let json: when::Json = serde_json::from_str(text).expect("parse_text accepted it");
    let shown = json.to_string();
    match when::parse_text(&shown) {
        Ok(again) => assert_eq!(again, condition, "{text} was shown as {shown}"),
        Err(e) => panic!("{text} was shown as {shown}, which is refused: {}", e.message),
    }
    let (strict, descending) = (flags & 1 == 1, flags & 2 == 2);
    let mut records = records();
    if descending {
        records.reverse();
    }
    let first = tsblob_storage::fuzzing::evaluate(&condition, strict, descending, &records);
    let second = tsblob_storage::fuzzing::evaluate(&condition, strict, descending, &records);
    assert_eq!(first, second, "evaluation is not deterministic");
    if let Ok(kept) = first {
        let order: Vec<u64> = records.iter().map(|(ts, _)| *ts).collect();
        let mut at = 0;
        for ts in kept {
            let pos = order[at..]
                .iter()
                .position(|t| *t == ts)
                .expect("kept a record it was not given, or out of order");
            at += pos + 1;
        }
    }
});
