//! Query-string parsing: timestamps, flags and the label filters of queries.
//!
//! Parameters are parsed by hand (not with serde) so that an unknown parameter is refused
//! with a message naming it: a misspelt `strat=` must not silently query everything.

use super::errors::AppError;

/// The decoded `key=value` pairs of a query string, in order.
pub fn pairs(query: Option<&str>) -> Vec<(String, String)> {
    form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// Parameters that may be given several times: `entries` (names and globs add up) and the
/// label filters (they AND).
fn repeatable(key: &str) -> bool {
    matches!(key, "entries" | "has" | "missing") || key.starts_with("eq.") || key.starts_with("ne.")
}

/// Refuses a parameter given twice that takes one value (`ts`, `start`, `stop`, `limit`,
/// ...): the handlers keep the last one, so `DELETE ?start=100&stop=200&start=0` removed
/// from 0, silently. Run on every entry route before its handler.
pub fn refuse_repeats(query: Option<&str>) -> Result<(), AppError> {
    let Some(query) = query else {
        return Ok(());
    };
    // A request names a handful of parameters: their names stay on the stack (past 8
    // they spill to the heap; the check is the same).
    let mut seen: smallvec::SmallVec<[std::borrow::Cow<'_, str>; 8]> = smallvec::SmallVec::new();
    for (k, _) in form_urlencoded::parse(query.as_bytes()) {
        if repeatable(&k) {
            continue;
        }
        if seen.contains(&k) {
            return Err(AppError::bad_request(format!(
                "query parameter {k:?} is given twice: give it once (only entries, has, missing, eq.<key> and ne.<key> may repeat)"
            )));
        }
        seen.push(k);
    }
    Ok(())
}

/// A timestamp parameter: decimal µs, below `u64::MAX` (which the framing reserves).
pub fn parse_ts(name: &str, value: &str) -> Result<u64, AppError> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(AppError::invalid_timestamp(format!(
            "{name}={value:?} is not a timestamp: give microseconds since the Unix epoch as a non-negative decimal integer"
        )));
    }
    match value.parse::<u64>() {
        Ok(v) if v < u64::MAX => Ok(v),
        _ => Err(AppError::invalid_timestamp(format!(
            "{name}={value} is out of range: timestamps are below 18446744073709551615 µs"
        ))),
    }
}

/// A non-negative integer parameter such as `limit`.
pub fn parse_u64(name: &str, value: &str) -> Result<u64, AppError> {
    value.parse::<u64>().map_err(|_| {
        AppError::bad_request(format!("{name}={value:?} is not a non-negative integer"))
    })
}

/// A boolean parameter: `true`/`false`/`1`/`0`.
pub fn parse_bool(name: &str, value: &str) -> Result<bool, AppError> {
    match value {
        "true" | "1" | "" => Ok(true),
        "false" | "0" => Ok(false),
        _ => Err(AppError::bad_request(format!(
            "{name}={value:?} is not a boolean: use true or false"
        ))),
    }
}

/// Refuses a parameter the route does not know.
pub fn unknown(name: &str, known: &str) -> AppError {
    AppError::bad_request(format!(
        "unknown query parameter {name:?}: this route takes {known}"
    ))
}

/// `ts`, `start` and `stop` of the single-record routes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RecordParams {
    pub ts: Option<u64>,
    pub start: Option<u64>,
    pub stop: Option<u64>,
}

impl RecordParams {
    pub fn parse(query: Option<&str>, allow_range: bool) -> Result<RecordParams, AppError> {
        let mut p = RecordParams::default();
        let known = if allow_range {
            "ts, start and stop"
        } else {
            "ts"
        };
        for (k, v) in pairs(query) {
            match k.as_str() {
                "ts" => p.ts = Some(parse_ts(&k, &v)?),
                "start" if allow_range => p.start = Some(parse_ts(&k, &v)?),
                "stop" if allow_range => p.stop = Some(parse_ts(&k, &v)?),
                _ => return Err(unknown(&k, known)),
            }
        }
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tsblob_proto::ErrorCode;

    #[test]
    fn timestamps_are_strict() {
        assert_eq!(parse_ts("ts", "0").unwrap(), 0);
        assert_eq!(
            parse_ts("ts", "1700000000000000").unwrap(),
            1_700_000_000_000_000
        );
        for bad in [
            "",
            "-1",
            "1.5",
            "abc",
            " 1",
            "18446744073709551615",
            "99999999999999999999",
        ] {
            let e = parse_ts("ts", bad).unwrap_err();
            assert_eq!(
                (e.status.as_u16(), e.code.as_str()),
                (422, "invalid_timestamp"),
                "{bad:?}"
            );
        }
    }

    /// Bug "repeated parameter": `?start=100&stop=200&start=0` kept the last `start`, so a
    /// range removal took more than the client's first value said.
    #[test]
    fn repeated_parameter_took_the_last_value() {
        for bad in [
            "ts=1&ts=2",
            "start=100&stop=200&start=0",
            "limit=1&limit=2",
            "when=%7B%7D&when=%7B%7D",
        ] {
            let e = refuse_repeats(Some(bad)).unwrap_err();
            assert_eq!(
                (e.status.as_u16(), e.code.as_str()),
                (400, "bad_request"),
                "{bad}"
            );
        }
        for ok in [None, Some(""), Some("entries=a&entries=b&eq.k=1&eq.k=2&ne.k=3&ne.k=4&has=a&has=b&missing=c&missing=d&start=1")] {
            refuse_repeats(ok).unwrap();
        }
        // More names than the check keeps on the stack: a repeat is still seen, at either
        // end; distinct names (also percent-encoded ones) still pass.
        let many: Vec<String> = (0..20).map(|i| format!("p{i}=1")).collect();
        let many = many.join("&");
        refuse_repeats(Some(&many)).unwrap();
        refuse_repeats(Some(&format!("{many}&p19=2"))).unwrap_err();
        refuse_repeats(Some(&format!("{many}&p0=2"))).unwrap_err();
        refuse_repeats(Some("t%73=1&ts=2")).unwrap_err();
    }

    #[test]
    fn unknown_parameters_are_refused() {
        assert_eq!(
            RecordParams::parse(Some("ts=5"), false).unwrap().ts,
            Some(5)
        );
        assert!(RecordParams::parse(Some("start=1"), false).is_err());
        let p = RecordParams::parse(Some("start=1&stop=9"), true).unwrap();
        assert_eq!((p.start, p.stop), (Some(1), Some(9)));
        assert_eq!(
            RecordParams::parse(Some("strat=1"), true).unwrap_err().code,
            ErrorCode::BadRequest
        );
    }
}
