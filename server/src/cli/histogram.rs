//! `tsblob histogram BUCKET ENTRY [--start --stop --step] [--json]`: records and bytes of an
//! entry per time step, from the server's index (no payload is read).

use reqwest::Method;

use super::client::{connect, ClientArgs};
use super::human::{format_time, parse_time, size};

/// `tsblob histogram BUCKET ENTRY`
#[derive(Debug, clap::Args)]
pub struct HistogramArgs {
    pub bucket: String,
    pub entry: String,
    /// Inclusive start (µs, RFC 3339, now-1h); default: the oldest record.
    #[arg(long, value_parser = parse_time)]
    pub start: Option<u64>,
    /// Exclusive stop; default: just after the latest record.
    #[arg(long, value_parser = parse_time)]
    pub stop: Option<u64>,
    /// Step: µs or a duration (`1s`, `5m`); default: about 200 steps; at most 10,000 steps.
    #[arg(long, value_parser = parse_step)]
    pub step: Option<u64>,
    /// Print the server's JSON answer instead of one line per step.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// A step: a µs integer or a humantime duration.
pub fn parse_step(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let us = if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        s.parse::<u64>()
            .map_err(|_| format!("{s} is too large for a step in µs"))?
    } else {
        let d = humantime::parse_duration(s).map_err(|e| {
            format!("{s:?} is not a step ({e}): give µs or a duration such as 1s or 5m")
        })?;
        u64::try_from(d.as_micros()).map_err(|_| format!("{s} is too long a step"))?
    };
    if us == 0 {
        return Err("a step must be at least 1 µs".into());
    }
    Ok(us)
}

pub async fn histogram(args: HistogramArgs) -> anyhow::Result<()> {
    let c = connect(&args.client)?;
    let mut params: Vec<(&str, String)> = Vec::new();
    for (k, v) in [
        ("start", args.start),
        ("stop", args.stop),
        ("step", args.step),
    ] {
        if let Some(v) = v {
            params.push((k, v.to_string()));
        }
    }
    let path = format!(
        "{}/histogram",
        tsblob_proto::client::entry_path(&args.bucket, &args.entry)
    );
    let h = c.json(c.request(Method::GET, &path).query(&params)).await?;
    if args.json {
        println!("{h}");
        return Ok(());
    }
    print!("{}", render(&h));
    Ok(())
}

/// One line per step: its start, records, bytes and a bar scaled to the largest count.
pub fn render(h: &serde_json::Value) -> String {
    use std::fmt::Write;
    let nums = |k: &str| -> Vec<u64> {
        h[k].as_array()
            .into_iter()
            .flatten()
            .map(|v| v.as_u64().unwrap_or(0))
            .collect()
    };
    let (counts, bytes) = (nums("counts"), nums("bytes"));
    let start = h["start"].as_u64().unwrap_or(0);
    let step = h["step"].as_u64().unwrap_or(1);
    let max = counts.iter().copied().max().unwrap_or(0).max(1);
    let mut out = String::new();
    for (i, (n, b)) in counts.iter().zip(&bytes).enumerate() {
        // u128: counts near u64::MAX (a hostile or broken server) must not wrap (bug
        // "histogram totals wrap", hostile probe of 2026-11-28).
        let bar = "#".repeat((u128::from(*n) * 40).div_ceil(u128::from(max)) as usize);
        let at = start.saturating_add(step.saturating_mul(i as u64));
        let _ = writeln!(out, "{}  {n:>10}  {:>10}  {bar}", format_time(at), size(*b));
    }
    let total = counts.iter().fold(0u64, |t, n| t.saturating_add(*n));
    let _ = writeln!(
        out,
        "{} in {} of {} µs",
        super::human::count(total, "record", "records"),
        super::human::count(counts.len() as u64, "step", "steps"),
        step
    );
    if let Some(t) = h["truncated_at"].as_u64() {
        let _ = writeln!(
            out,
            "(incomplete from {}: the window holds more records than one request visits)",
            format_time(t)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn steps_and_lines() {
        assert_eq!(parse_step("250").unwrap(), 250);
        assert_eq!(parse_step("1s").unwrap(), 1_000_000);
        assert_eq!(parse_step("5m").unwrap(), 300_000_000);
        assert!(parse_step("0").is_err() && parse_step("soon").is_err());
        let h = serde_json::json!({"start": 0, "stop": 2_000_000, "step": 1_000_000,
            "counts": [4, 2], "bytes": [4096, 10], "truncated_at": null});
        let text = render(&h);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(
            lines[0].starts_with("1970-01-01T00:00:00.000000Z")
                && lines[0].ends_with(&"#".repeat(40))
        );
        assert!(lines[1].ends_with(&"#".repeat(20)) && !lines[1].ends_with(&"#".repeat(21)));
        assert_eq!(lines[2], "6 records in 2 steps of 1000000 µs");
    }

    /// Bug "histogram totals wrap": counts [u64::MAX, 5] printed "4 records in 2 steps" and
    /// a 1-character bar for the largest step (release builds wrap on overflow).
    #[test]
    fn histogram_totals_wrap() {
        let h = serde_json::json!({"start": 0, "step": 1, "counts": [u64::MAX, 5, u64::MAX],
            "bytes": [1, 1, 1]});
        let text = render(&h);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].ends_with(&"#".repeat(40)), "{}", lines[0]);
        assert!(lines[1].ends_with(" #"), "{}", lines[1]);
        assert_eq!(lines[3], format!("{} records in 3 steps of 1 µs", u64::MAX));
    }

    /// Bug "counts are not pluralised" (new-user walkthrough B.24).
    #[test]
    fn one_record_in_one_step_was_plural() {
        let h = serde_json::json!({"start": 0, "step": 1, "counts": [1], "bytes": [1]});
        assert!(
            render(&h).ends_with("1 record in 1 step of 1 µs\n"),
            "{}",
            render(&h)
        );
    }
}
