//! Human-readable times and sizes for the CLI: timestamps are shown as RFC 3339 (UTC) and
//! accepted as µs integers, RFC 3339 times, or `now`/`now-<duration>`.

use std::borrow::Cow;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A string from the server (a name, a label, a content type, an error document), ready for
/// a terminal: each control character (C0 with ESC, DEL, C1 U+0080 to U+009F) is written as
/// an escape (`\n`, `\x1b`, `\u{9b}`), so is each bidirectional formatting character
/// (`\u{202e}`), everything else as it is. Bug "terminal escapes from
/// the server" (hostile probe of 2026-11-28): names, labels, content types and error frames
/// were printed raw, so a server, or anyone able to write a label, could set a terminal's
/// title, clear its screen or colour its text. `--json` output needs none of this (serde
/// escapes C0; the JSON goes to programs).
pub fn term(s: &str) -> Cow<'_, str> {
    if !s.chars().any(escaped) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x80 && c.is_control() => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if escaped(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Whether [`term`] escapes `c`: a control character (C0, DEL, C1), or one of Unicode's
/// bidirectional formatting characters, which reorder what a terminal shows after them (a
/// name could show as another: "Trojan Source", CVE-2021-42574).
fn escaped(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

/// A string field of a JSON answer, for a terminal ([`term`]); `""` when missing.
pub fn field(v: &serde_json::Value) -> Cow<'_, str> {
    term(v.as_str().unwrap_or(""))
}

/// A JSON value of the server printed as JSON in a readable line, for a terminal (serde
/// escapes C0 controls in strings, not DEL or C1 ones).
pub fn json_text(v: &serde_json::Value) -> String {
    term(&v.to_string()).into_owned()
}

/// An optional timestamp of the API (`oldest`, `latest`) as RFC 3339, or `-`.
pub fn opt_time(v: &serde_json::Value) -> String {
    v.as_u64().map(format_time).unwrap_or_else(|| "-".into())
}

/// A timestamp argument: `1700000000000000` (µs), `2024-05-01T12:00:00Z`, `now`, `now-5m`.
pub fn parse_time(s: &str) -> Result<u64, String> {
    let s = s.trim();
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        let us = s
            .parse::<u64>()
            .map_err(|_| format!("{s} is too large for a µs timestamp"))?;
        if let Some(warning) = unit_warning(us) {
            eprintln!("warning: {warning}");
        }
        return Ok(us);
    }
    let now = tsblob_storage::now_micros();
    if s == "now" {
        return Ok(now);
    }
    if let Some(ago) = s.strip_prefix("now-") {
        let d = humantime::parse_duration(ago)
            .map_err(|e| format!("{ago:?} is not a duration ({e}): use e.g. now-5m"))?;
        return Ok(now.saturating_sub(d.as_micros() as u64));
    }
    let t = humantime::parse_rfc3339_weak(s).map_err(|e| {
        format!("{s:?} is not a time ({e}): use µs since the epoch, 2024-05-01T12:00:00Z, now or now-5m")
    })?;
    let d = t
        .duration_since(UNIX_EPOCH)
        .map_err(|_| format!("{s:?} is before 1970"))?;
    Ok(d.as_micros() as u64)
}

/// Integer timestamps that are seconds (resp. ms) since the epoch of the years 1973..5138
/// when read in those units: as µs they fall in 1970-1973, which no real record has. The
/// Python SDK's `TimestampWarning` bounds (client-py/src/tsblob/_timestamps.py).
const SECONDS_LIKE: std::ops::Range<u64> = 100_000_000..100_000_000_000;
const MILLIS_LIKE: std::ops::Range<u64> = 100_000_000_000..100_000_000_000_000;

/// What to say about an integer timestamp that looks like seconds or milliseconds since
/// the epoch, not µs. Bug "the CLI takes seconds as microseconds without a word"
/// (new-user walkthrough B.12): `put --ts 1700000010` stored a record in 1970, exit 0.
pub fn unit_warning(us: u64) -> Option<String> {
    let (unit, factor) = if SECONDS_LIKE.contains(&us) {
        ("seconds", 1_000_000)
    } else if MILLIS_LIKE.contains(&us) {
        ("milliseconds", 1_000)
    } else {
        return None;
    };
    let meant = us * factor;
    let at = UNIX_EPOCH + Duration::from_micros(meant);
    let rfc = if factor == 1_000 {
        humantime::format_rfc3339_millis(at).to_string()
    } else {
        humantime::format_rfc3339_seconds(at).to_string()
    };
    Some(format!(
        "timestamp {us} looks like {unit} since the epoch, but integers are microseconds: it means {}; for {rfc} give {meant} or {rfc}",
        format_time(us),
    ))
}

/// `2024-05-01T12:00:00.123456Z`.
pub fn format_time(us: u64) -> String {
    let t = UNIX_EPOCH + Duration::from_micros(us);
    humantime::format_rfc3339_micros(t).to_string()
}

/// `1.5 MiB`.
pub fn size(bytes: u64) -> String {
    indicatif::HumanBytes(bytes).to_string()
}

/// A count and its noun: `1 record`, `3 records`, `0 entries`. Bug "counts are not
/// pluralised" (new-user walkthrough B.24): "1 records", "1 entries".
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Prints a listing of the API (an array of objects): one JSON line per item with `json`,
/// else one readable line each, by `line`.
pub fn print_list(items: &serde_json::Value, json: bool, line: impl Fn(&serde_json::Value)) {
    for item in items.as_array().into_iter().flatten() {
        if json {
            println!("{item}");
        } else {
            line(item);
        }
    }
}

/// Seconds since a start, for summaries.
pub fn since(start: SystemTime) -> Duration {
    start.elapsed().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn times_round_trip() {
        assert_eq!(
            parse_time("1700000000000000").unwrap(),
            1_700_000_000_000_000
        );
        let us = parse_time("2023-11-14T22:13:20Z").unwrap();
        assert_eq!(us, 1_700_000_000_000_000);
        assert_eq!(format_time(us + 5), "2023-11-14T22:13:20.000005Z");
        assert!(parse_time("now-1h").unwrap() < parse_time("now").unwrap());
        assert!(parse_time("yesterday").is_err());
    }

    /// Bug "the CLI takes seconds as microseconds without a word" (new-user walkthrough
    /// B.12): the SDK's bounds, the value to give instead, nothing for real µs.
    #[test]
    fn the_cli_took_seconds_as_microseconds_without_a_word() {
        let w = unit_warning(1_700_000_010).unwrap();
        assert!(
            w.contains("looks like seconds")
                && w.contains("1970-01-01T00:28:20.000010Z")
                && w.contains("give 1700000010000000")
                && w.contains("2023-11-14T22:13:30Z"),
            "{w}"
        );
        let w = unit_warning(1_700_000_010_123).unwrap();
        assert!(
            w.contains("milliseconds")
                && w.contains("for 2023-11-14T22:13:30.123Z give 1700000010123000 or 2023-11-14T22:13:30.123Z"),
            "{w}"
        );
        assert!(unit_warning(99_999_999).is_none());
        assert!(unit_warning(100_000_000).is_some());
        assert!(unit_warning(99_999_999_999_999).is_some());
        assert!(unit_warning(100_000_000_000_000).is_none());
        assert!(unit_warning(1_700_000_000_000_000).is_none());
        assert!(unit_warning(0).is_none() && unit_warning(5).is_none());
        // parse_time still takes the value as µs (a warning, not a refusal).
        assert_eq!(parse_time("1700000010").unwrap(), 1_700_000_010);
    }

    /// Bug "terminal escapes from the server": control characters reached the terminal.
    #[test]
    fn terminal_escapes_from_the_server() {
        assert!(matches!(term("cam/front ü"), Cow::Borrowed("cam/front ü")));
        assert_eq!(
            term("a\x1b]0;T\x07\x1b[2Jb\nc\r\t\x7f\u{9b}31m"),
            "a\\x1b]0;T\\x07\\x1b[2Jb\\nc\\r\\t\\x7f\\u{9b}31m"
        );
        let v = serde_json::json!({"k": "v\u{1b}[31m\u{9b}"});
        let text = json_text(&v);
        assert!(!text.chars().any(char::is_control), "{text}");
        assert_eq!(field(&v["k"]), "v\\x1b[31m\\u{9b}");
    }

    #[test]
    fn counts_were_not_pluralised() {
        assert_eq!(count(1, "record", "records"), "1 record");
        assert_eq!(count(0, "entry", "entries"), "0 entries");
        assert_eq!(count(2, "entry", "entries"), "2 entries");
    }

    #[test]
    fn bidi_characters_from_the_server_reordered_the_terminal() {
        assert_eq!(
            term("cam\u{202e}gpj.exe\u{2066}x\u{2069}\u{200f}"),
            "cam\\u{202e}gpj.exe\\u{2066}x\\u{2069}\\u{200f}"
        );
        assert!(matches!(term("שלום/מצלמה"), Cow::Borrowed(_)));
    }
}
