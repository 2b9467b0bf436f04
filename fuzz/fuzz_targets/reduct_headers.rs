//! Fuzzes the text codecs of ReductStore's batch headers (issue 29): the per-record values
//! of batch protocol v1 (`x-reduct-time-<ts>: <size>,<content type>,<k>=<v>,...`) and v2
//! (`x-reduct-<entry>-<delta>: <size>[,<content type>[,<label ops>]]`, deltas chained from
//! the entry's previous record), which the ReductStore listener parses from any client
//! (`server/src/reduct_header.rs`).
//!
//! The first input byte picks the protocol (bit 0) and whether label indexes of
//! `x-reduct-labels` are given (bit 1); the rest is the header text (v2: one record value
//! per line, all of one entry). Properties, besides never panicking:
//! - v1: what parses, formatted back (`BatchHeaderV1::format`, the header tsblob answers
//!   with), parses to the same size, content type and labels;
//! - v2: every record of the chain, sent back as tsblob answers it (`label_delta_v2`
//!   relative to the previous record), reads back to the same labels and content type.
//!
//! Texts the formats cannot carry either way (a label name holding `,` or `=`, a value with
//! spaces at either end, a content type holding `,`) are checked for not panicking only; a
//! value HTTP cannot carry raw (a control, a byte outside ASCII), or a `"` the format has no
//! room for (a value starting with one, or quoted for its `,`), is answered
//! percent-encoded, one way, and checked for not panicking only too.
//!
//! The codec is compiled here from its source file (`#[path]`), as `when_parser` does:
//! it depends on the engine's `RecordMeta` alone, not on the server crate.
#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use tsblob_storage::RecordMeta;

#[allow(dead_code)]
#[path = "../../server/src/reduct_header.rs"]
mod header;

use header::{label_delta_v2, parse_record_v2, BatchHeaderV1, EntryState};

fn name_ok(k: &str) -> bool {
    !k.contains([',', '=', '"']) && k.trim() == k
}

/// A value the header carries raw: printable ASCII and inner tabs, no blank at either end,
/// a `"` inside (ReductStore's readers quote only a value that starts with one). Others
/// are sent percent-encoded, one way: a value HTTP cannot carry, one starting with `"`, or
/// one holding both `,` (so quoted) and `"`.
fn value_ok(v: &str) -> bool {
    let blank = |c: char| c == ' ' || c == '\t';
    !v.starts_with(blank)
        && !v.ends_with(blank)
        && v.bytes().all(|b| (0x20..0x7f).contains(&b) || b == b'\t')
        && !v.starts_with('"')
        && !(v.contains(',') && v.contains('"'))
}

fn content_type(ct: &Option<String>) -> String {
    ct.clone()
        .unwrap_or_else(|| tsblob_storage::DEFAULT_CONTENT_TYPE.to_string())
}

fn v1(text: &str) {
    let Ok(h) = BatchHeaderV1::parse(text) else {
        return;
    };
    let labels: BTreeMap<String, String> = h.labels.iter().cloned().collect();
    if !labels.iter().all(|(k, v)| name_ok(k) && value_ok(v))
        || h.content_type.as_deref().is_some_and(|ct| ct.contains(','))
    {
        return;
    }
    let meta = RecordMeta {
        ts: 0,
        size: h.size,
        content_type: content_type(&h.content_type),
        labels: labels.clone(),
    };
    let shown = BatchHeaderV1::format(&meta);
    let back = BatchHeaderV1::parse(&shown)
        .unwrap_or_else(|e| panic!("{text:?} was formatted as {shown:?}, which is refused: {e}"));
    assert_eq!(back.size, h.size, "{shown:?}");
    assert_eq!(
        content_type(&back.content_type),
        meta.content_type,
        "{shown:?}"
    );
    let back_labels: BTreeMap<String, String> = back.labels.into_iter().collect();
    assert_eq!(back_labels, labels, "{text:?} was formatted as {shown:?}");
}

fn v2(text: &str, indexed: bool) {
    let names: Vec<String> = ["score", "cam", "x,y"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let names = indexed.then_some(names.as_slice());
    let mut prev: Option<EntryState> = None;
    // What a reader of tsblob's answers holds: the previous record sent, and its state.
    let mut sent: Option<(RecordMeta, EntryState)> = None;
    for line in text.split('\n').take(64) {
        let Ok((size, state)) = parse_record_v2(line, prev.as_ref(), names) else {
            return;
        };
        prev = Some(state.clone());
        let (ct, labels) = state;
        // A record as stored: an empty value is no label.
        let labels: BTreeMap<String, String> =
            labels.into_iter().filter(|(_, v)| !v.is_empty()).collect();
        if !labels
            .iter()
            .all(|(k, v)| name_ok(k) && value_ok(v) && k.parse::<u64>().is_err())
            || ct
                .as_deref()
                .is_some_and(|c| c.contains(',') || c.trim() != c)
        {
            return;
        }
        let meta = RecordMeta {
            ts: 0,
            size,
            content_type: content_type(&ct),
            labels,
        };
        let shown = label_delta_v2(&meta, sent.as_ref().map(|(m, _)| m));
        let (back_size, back) = parse_record_v2(&shown, sent.as_ref().map(|(_, s)| s), None)
            .unwrap_or_else(|e| {
                panic!("{line:?} was answered as {shown:?}, which is refused: {e}")
            });
        assert_eq!(back_size, size, "{shown:?}");
        assert_eq!(
            back.0.as_deref(),
            Some(meta.content_type.as_str()),
            "{shown:?}"
        );
        let read: BTreeMap<String, String> = back
            .1
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(read, meta.labels, "{line:?} was answered as {shown:?}");
        sent = Some((meta, back));
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    if flags & 1 == 0 {
        v1(text);
    } else {
        v2(text, flags & 2 == 2);
    }
});
