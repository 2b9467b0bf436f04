//! Human-readable times and sizes for the CLI: timestamps are shown as RFC 3339 (UTC) and
//! accepted as µs integers, RFC 3339 times, or `now`/`now-<duration>`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// An optional timestamp of the API (`oldest`, `latest`) as RFC 3339, or `-`.
pub fn opt_time(v: &serde_json::Value) -> String {
    v.as_u64().map(format_time).unwrap_or_else(|| "-".into())
}

/// A timestamp argument: `1700000000000000` (µs), `2024-05-01T12:00:00Z`, `now`, `now-5m`.
pub fn parse_time(s: &str) -> Result<u64, String> {
    let s = s.trim();
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s
            .parse::<u64>()
            .map_err(|_| format!("{s} is too large for a µs timestamp"));
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

/// `2024-05-01T12:00:00.123456Z`.
pub fn format_time(us: u64) -> String {
    let t = UNIX_EPOCH + Duration::from_micros(us);
    humantime::format_rfc3339_micros(t).to_string()
}

/// `1.5 MiB`.
pub fn size(bytes: u64) -> String {
    indicatif::HumanBytes(bytes).to_string()
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
}
