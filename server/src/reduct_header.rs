//! The text codecs of ReductStore's batch headers, without HTTP types: batch protocol v1's
//! per-record value (`<size>,<content type>[,<k>=<v>]...`), v2's per-record value
//! (`<size>[,<content type>[,<label ops>]]`, deltas from the entry's previous record) and
//! its label operations. `wire.rs` re-exports them and `batch.rs` applies them to requests;
//! they depend on nothing but the engine's `RecordMeta`, so the fuzz target
//! (`fuzz/fuzz_targets/reduct_headers.rs`) compiles this file alone.
//!
//! Errors are texts (what is wrong with the value); the callers wrap them in the adapter's
//! 422 `malformed_batch`, naming the header.

use std::collections::{BTreeMap, BTreeSet};

use tsblob_storage::RecordMeta;

/// One record's header in batch protocol v1: `<size>,<content type>[,<k>=<v>]...`, a value
/// holding `,` in double quotes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchHeaderV1 {
    pub size: u64,
    pub content_type: Option<String>,
    pub labels: Vec<(String, String)>,
}

/// A label list's `(name, value)` pairs and the text left at its end without `=`.
type LabelPairs<'a> = (Vec<(&'a str, String)>, Option<&'a str>);

/// The `<name>=<value>` pairs of a header's label list as ReductStore reads them: a value
/// is quoted only when it *starts* with `"` (it then runs to the next `"` and may hold
/// `,`); any other value runs to the next `,` and may hold `"`. Names and unquoted values
/// are trimmed (quoted ones inside their quotes, as ReductStore trims them). With the pairs,
/// the text left at the end that holds no `=`, if any (one pass: linear in the header).
/// Bug (ReductStore parity probe of
/// 2026-11-29): a `"` anywhere in a value flipped quoting, so `screen=5"` failed the whole
/// v1 batch (422; a ReductStore replicating into tsblob dropped the batch) and `say "hi"`
/// was stored as `say hi`.
fn label_pairs(raw: &str) -> Result<LabelPairs<'_>, String> {
    let mut pairs = Vec::new();
    let mut rest = raw.trim();
    while !rest.is_empty() {
        let Some((key, after)) = rest.split_once('=') else {
            return Ok((pairs, Some(rest)));
        };
        let value;
        if let Some(quoted) = after.strip_prefix('"') {
            let (v, r) = quoted
                .split_once('"')
                .ok_or_else(|| "a double quote is not closed".to_string())?;
            value = v.trim().to_string();
            rest = r.trim_start_matches(',').trim();
        } else if let Some((v, r)) = after.split_once(',') {
            value = v.trim().to_string();
            rest = r.trim();
        } else {
            value = after.trim().to_string();
            rest = "";
        }
        pairs.push((key.trim(), value));
    }
    Ok((pairs, None))
}

fn content_type_of(meta: &RecordMeta) -> &str {
    if meta.content_type.is_empty() {
        tsblob_storage::DEFAULT_CONTENT_TYPE
    } else {
        &meta.content_type
    }
}

impl BatchHeaderV1 {
    pub fn parse(raw: &str) -> Result<BatchHeaderV1, String> {
        let (first, rest) = raw.split_once(',').unwrap_or((raw, ""));
        let size = first
            .trim()
            .parse::<u64>()
            .map_err(|_| format!("{first:?} is not a content length"))?;
        let (content_type, labels_text) = rest.split_once(',').unwrap_or((rest, ""));
        let content_type = Some(content_type.trim().to_string()).filter(|s| !s.is_empty());
        // An item without `=` is skipped, as ReductStore does: reduct-py (1.21) quotes a
        // value only when its *name* holds `,` or `=`, so a value `x,y` arrives as `k=x,y`
        // and ReductStore stores `k=x` (an item without `=` before the next pair, as in
        // `k=x,y,m=1`, is part of the next name for ReductStore; here it is left out).
        // Text left at the end without `=` is left out.
        let (pairs, _) = label_pairs(labels_text)?;
        let labels = pairs
            .into_iter()
            .map(|(k, v)| {
                let k = k.rsplit_once(',').map_or(k, |(_, name)| name);
                (label_name(k), v)
            })
            .collect();
        Ok(BatchHeaderV1 {
            size,
            content_type,
            labels,
        })
    }

    /// The header of a record's metadata.
    pub fn format(meta: &RecordMeta) -> String {
        let mut s = format!("{},{}", meta.size, content_type_of(meta));
        for (k, v) in &meta.labels {
            s.push_str(&format!(",{k}={}", batch_label(v)));
        }
        s
    }
}

/// The label operations of a v2 record header: `<name or index>=<value>`, comma-separated,
/// a value holding `,` in double quotes, an empty value removing the label. An index names
/// the label at that place of `x-reduct-labels` (`names`).
pub fn parse_label_ops(
    raw: &str,
    names: Option<&[String]>,
) -> Result<Vec<(String, String)>, String> {
    let pairs = match label_pairs(raw)? {
        (_, Some(rest)) => return Err(format!("label {rest:?} is not <name>=<value>")),
        (pairs, None) => pairs,
    };
    pairs
        .into_iter()
        .map(|(key, value)| {
            let key = match (names, key.parse::<usize>()) {
                (Some(names), Ok(i)) => names
                    .get(i)
                    .cloned()
                    .ok_or_else(|| format!("label index {i} is not in x-reduct-labels"))?,
                _ => label_name(key),
            };
            Ok((key, value))
        })
        .collect()
}

/// A v2 record's content type and labels, as the entry's previous record left them.
pub type EntryState = (Option<String>, BTreeMap<String, String>);

/// One v2 record header value, applied to the entry's previous state: its size, content
/// type and labels (a label whose value is empty is kept empty: updates read it as a
/// removal, writes drop it).
pub fn parse_record_v2(
    value: &str,
    prev: Option<&EntryState>,
    names: Option<&[String]>,
) -> Result<(u64, EntryState), String> {
    let (size, rest) = match value.split_once(',') {
        Some((s, r)) => (s, Some(r)),
        None => (value, None),
    };
    let size: u64 = size
        .trim()
        .parse()
        .map_err(|_| format!("{size:?} is not a size"))?;
    let state = match rest {
        None => prev.cloned().ok_or_else(|| {
            "the first record of an entry needs its content type and labels".to_string()
        })?,
        Some(rest) => {
            let (ct, ops) = match rest.split_once(',') {
                Some((ct, ops)) => (ct.trim(), Some(ops)),
                None => (rest.trim(), None),
            };
            let (prev_ct, prev_labels) = prev.cloned().unwrap_or_default();
            let ct = if ct.is_empty() {
                prev_ct
            } else {
                Some(ct.to_string())
            };
            let mut labels = prev_labels;
            if let Some(ops) = ops {
                for (k, v) in parse_label_ops(ops, names)? {
                    labels.insert(k, v);
                }
            }
            (ct, labels)
        }
    };
    Ok((size, state))
}

/// A record's v2 header relative to the previous record of its entry in the answer:
/// `<size>,<content type>[,<label ops>]` (a label gone is `name=`).
pub fn label_delta_v2(meta: &RecordMeta, prev: Option<&RecordMeta>) -> String {
    let ct = content_type_of(meta);
    let quote = |v: &str| batch_label(v);
    let mut ops: Vec<String> = Vec::new();
    match prev {
        None => {
            for (k, v) in &meta.labels {
                ops.push(format!("{k}={}", quote(v)));
            }
        }
        Some(p) => {
            let keys: BTreeSet<&String> = meta.labels.keys().chain(p.labels.keys()).collect();
            for k in keys {
                match (meta.labels.get(k), p.labels.get(k)) {
                    (a, b) if a == b => {}
                    (None, _) => ops.push(format!("{k}=")),
                    (Some(v), _) => ops.push(format!("{k}={}", quote(v))),
                }
            }
        }
    }
    if ops.is_empty() {
        format!("{},{ct}", meta.size)
    } else {
        format!("{},{ct},{}", meta.size, ops.join(","))
    }
}

/// An entry (or label) name as a header list item: `tchar`s kept, other bytes `%XX`.
pub fn encode_entry(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"!#$&'*+-.^_`|~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A label value as the text of a ReductStore header: raw when HTTP can carry it (visible
/// ASCII and inner spaces), else percent-encoded as tsblob does (HTTP cannot carry it raw).
pub fn label_text(v: &str) -> std::borrow::Cow<'_, str> {
    // A tab is a field value's character too (RFC 9110 §5.5), but not at either end (HTTP
    // trims those). Bug (parity probe of 2026-11-29): `t<TAB>x` was answered `t%09x`, and a
    // copy back into a ReductStore stored that text.
    let blank = |c: char| c == ' ' || c == '\t';
    let raw_ok = v.bytes().all(|b| (0x20..0x7f).contains(&b) || b == b'\t')
        && !v.starts_with(blank)
        && !v.ends_with(blank);
    if raw_ok {
        std::borrow::Cow::Borrowed(v)
    } else {
        std::borrow::Cow::Owned(tsblob_proto::headers::encode_label_value(v))
    }
}

/// A label name of a batch header, in lower case: tsblob's label names are (HTTP gives a
/// single write's `x-reduct-label-A` as `a` already); ReductStore keeps a batch's `A`, and
/// tsblob refused the record (`422` in its `x-reduct-error-<ts>`, which reduct-py's
/// `write_batch` does not raise: the record was lost unless the writer checked).
pub fn label_name(k: &str) -> String {
    k.trim().to_ascii_lowercase()
}

/// A label value in a batch header (v1 and v2), as ReductStore writes it and its readers
/// (and [`label_pairs`]) read it: as [`label_text`] (raw when HTTP carries it, else
/// percent-encoded), and in double quotes when it holds `,`. A `"` inside stays raw (a reader
/// quotes only a value that starts with one), except where the format has no room for it:
/// in a value that starts with `"` or is quoted (a quoted value ends at its next `"`), every
/// `"` is percent-encoded. Without the encoding a value HTTP cannot carry (a line break,
/// NUL, DEL: only tsblob's own API can store one) made its record's header unsendable; the
/// header was left out and its payload kept, so a client paired every later payload with
/// the record before it.
fn batch_label(v: &str) -> String {
    let text = label_text(v);
    let quoted = text.contains(',');
    let text = if v.contains('"') && (quoted || v.starts_with('"')) {
        text.replace('"', "%22")
    } else {
        text.into_owned()
    };
    if quoted {
        format!("\"{text}\"")
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn meta(size: u64, ct: &str, labels: &[(&str, &str)]) -> RecordMeta {
        RecordMeta {
            ts: 1,
            size,
            content_type: ct.into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    /// Bug: a label value HTTP cannot carry (a line break, NUL, DEL) made its record's batch
    /// header unsendable; it was left out while its payload was sent (hostile probe of
    /// 2026-11-29). Both formats send printable ASCII only, and a `"` cannot end a quote.
    #[test]
    fn a_label_http_cannot_carry_made_its_batch_header_unsendable() {
        let m = meta(
            2,
            "text/plain",
            &[
                ("a", "x\r\ny"),
                ("b", "\0"),
                ("c", "\x7f"),
                ("d", "é"),
                ("e", "q\"u,o"),
            ],
        );
        for shown in [BatchHeaderV1::format(&m), label_delta_v2(&m, None)] {
            assert!(
                shown.bytes().all(|b| (0x20..0x7f).contains(&b)),
                "{shown:?}"
            );
            assert!(
                shown.ends_with(",a=x%0D%0Ay,b=%00,c=%7F,d=%C3%A9,e=\"q%22u,o\""),
                "{shown}"
            );
        }
        let back = BatchHeaderV1::parse(&BatchHeaderV1::format(&m)).unwrap();
        assert_eq!(back.labels.len(), 5);
        assert_eq!(back.labels[4], ("e".into(), "q%22u,o".into()));
    }

    #[test]
    fn batch_v1_headers_parse_as_reductstore_documents_them() {
        // From ReductStore's batch protocol documentation and reduct-py's make_headers_v1.
        let h = BatchHeaderV1::parse("10,text/plain,label1=value1,label2=\"value,2\"").unwrap();
        assert_eq!(h.size, 10);
        assert_eq!(h.content_type.as_deref(), Some("text/plain"));
        assert_eq!(
            h.labels,
            vec![
                ("label1".into(), "value1".into()),
                ("label2".into(), "value,2".into())
            ]
        );
        let h = BatchHeaderV1::parse("5").unwrap();
        assert_eq!((h.size, h.content_type), (5, None));
        assert!(BatchHeaderV1::parse("x,text/plain").is_err());
        assert!(BatchHeaderV1::parse("").is_err());
        // reduct-py's unquoted `k=x,y`: ReductStore keeps `k=x`.
        let h = BatchHeaderV1::parse("1,a,k=x,y").unwrap();
        assert_eq!(h.labels, vec![("k".into(), "x".into())]);
        assert!(BatchHeaderV1::parse("1,a,b=\"c").is_err());
    }

    /// Bug (ReductStore parity probe of 2026-11-29): a `"` inside a v1 batch label value
    /// flipped quoting: `screen=5"` failed the whole batch with 422 (a ReductStore
    /// replicating into tsblob dropped it, and `rcli cp` copied nothing) and `say "hi"` was
    /// stored as `say hi`. ReductStore quotes only a value that starts with `"`.
    #[test]
    fn a_double_quote_inside_a_v1_label_value_failed_the_batch_or_was_dropped() {
        let h = BatchHeaderV1::parse("1,text/plain,screen=5\",q=say \"hi\",k=\"a,b\",n=1").unwrap();
        assert_eq!(
            h.labels,
            vec![
                ("screen".into(), "5\"".into()),
                ("q".into(), "say \"hi\"".into()),
                ("k".into(), "a,b".into()),
                ("n".into(), "1".into()),
            ]
        );
        // An item without `=` between pairs is left out, the pair after it kept.
        let h = BatchHeaderV1::parse("1,a,k=x,y,m=1").unwrap();
        assert_eq!(
            h.labels,
            vec![("k".into(), "x".into()), ("m".into(), "1".into())]
        );
        // What tsblob answers reads back the same through this parser (and ReductStore's).
        for v in [
            "q\"q",
            "end\"",
            "say \"hi\"",
            "\"quoted\"",
            "t\tx",
            "a,\"b",
            "plain",
        ] {
            let m = meta(1, "text/plain", &[("v", v)]);
            let shown = BatchHeaderV1::format(&m);
            let back = BatchHeaderV1::parse(&shown).unwrap();
            let expect = if v.starts_with('"') || (v.contains(',') && v.contains('"')) {
                v.replace('"', "%22")
            } else {
                v.to_string()
            };
            assert_eq!(
                back.labels,
                vec![("v".into(), expect)],
                "{v:?} shown as {shown:?}"
            );
            let (_, state) = parse_record_v2(&label_delta_v2(&m, None), None, None).unwrap();
            assert!(state.1.contains_key("v"), "{shown:?}");
        }
        assert_eq!(
            BatchHeaderV1::format(&meta(1, "t", &[("v", "q\"q"), ("w", "t\tx")])),
            "1,t,v=q\"q,w=t\tx"
        );
    }

    /// Review of 2026-11-29: the first version of the quote fix read trailing text without
    /// `=` by parsing shorter and shorter prefixes again (quadratic: 200,000 commas took
    /// 1.5 s of a worker). One pass now returns the pairs and the text left.
    #[test]
    fn trailing_text_without_a_pair_was_parsed_again_for_every_comma() {
        let tail = ",".repeat(100_000);
        let raw = format!("k=1,m=\"a,b\"{tail}x");
        let (pairs, rest) = label_pairs(&raw).unwrap();
        assert_eq!(
            pairs,
            vec![("k", "1".to_string()), ("m", "a,b".to_string())]
        );
        assert_eq!(rest, Some("x"));
        let h = BatchHeaderV1::parse(&format!("1,t,k=1{tail}")).unwrap();
        assert_eq!(h.labels, vec![("k".into(), "1".into())]);
    }

    #[test]
    fn batch_v1_header_round_trips_a_comma_value() {
        let m = meta(3, "text/plain", &[("a", "x,y")]);
        let s = BatchHeaderV1::format(&m);
        assert_eq!(s, "3,text/plain,a=\"x,y\"");
        let back = BatchHeaderV1::parse(&s).unwrap();
        assert_eq!(back.labels, vec![("a".into(), "x,y".into())]);
    }

    #[test]
    fn v2_record_values_apply_deltas() {
        let (size, first) = parse_record_v2("4,text/plain,a=1,b=\"x,y\"", None, None).unwrap();
        assert_eq!(size, 4);
        assert_eq!(first.0.as_deref(), Some("text/plain"));
        assert_eq!(first.1["b"], "x,y");
        // Only a size: everything as the previous record.
        let (_, same) = parse_record_v2("7", Some(&first), None).unwrap();
        assert_eq!(same, first);
        // An empty content type keeps the previous one; `a=` clears a.
        let (_, next) = parse_record_v2("7,,a=", Some(&first), None).unwrap();
        assert_eq!(next.0.as_deref(), Some("text/plain"));
        assert_eq!(next.1["a"], "");
        let names = vec!["score".to_string()];
        let (_, by_index) = parse_record_v2("1,a/b,0=9", None, Some(&names)).unwrap();
        assert_eq!(by_index.1["score"], "9");
        assert!(parse_record_v2("1", None, None).is_err());
        assert!(parse_record_v2("1,a,1=9", None, Some(&names)).is_err());
        assert!(parse_record_v2("1,a,k", None, None).is_err());
        assert!(parse_record_v2("-1,a", None, None).is_err());
    }

    #[test]
    fn v2_deltas_round_trip_through_the_parser() {
        let a = meta(3, "text/plain", &[("k", "v,1"), ("z", "1")]);
        let b = meta(5, "text/plain", &[("k", "w")]);
        let (_, sa) = parse_record_v2(&label_delta_v2(&a, None), None, None).unwrap();
        assert_eq!(sa.1, a.labels);
        let (size, sb) = parse_record_v2(&label_delta_v2(&b, Some(&a)), Some(&sa), None).unwrap();
        assert_eq!(size, 5);
        // A label gone is sent empty: the reader drops it.
        let kept: BTreeMap<String, String> =
            sb.1.into_iter().filter(|(_, v)| !v.is_empty()).collect();
        assert_eq!(kept, b.labels);
    }

    #[test]
    fn entry_names_encode_outside_tchars() {
        assert_eq!(encode_entry("cam/front 1"), "cam%2Ffront%201");
    }
}
