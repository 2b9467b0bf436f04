//! The CSV rendering: one line per cell (phases, then `disk` lines), numbers unformatted.

use super::Report;

const COLUMNS: &str = "phase,size,target,status,reason,records,bytes,seconds,records_per_s,\
mb_per_s,latency_p50_ms,latency_p95_ms,latency_p99_ms,ttfb_p50_ms,ttfb_p95_ms,ttfb_p99_ms,\
errors,verified,tsblob_speedup,disk_bytes,disk_per_payload_byte,note,server_cpu_s,\
records_per_s_runs,pct_of_limit,pct_of_limit_store,load_1m";

/// Quotes a field when it holds a comma, a quote or a line break (RFC 4180).
fn field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

/// The whole report as CSV.
pub fn render(report: &Report) -> String {
    let mut out = format!("{COLUMNS}\n");
    for c in &report.cells {
        let mut f = vec![
            c.phase.name().to_string(),
            c.size.to_string(),
            c.target.name().to_string(),
        ];
        match &c.result {
            Some(r) => {
                let t = r.ttfb_ms;
                f.extend([
                    "ok".to_string(),
                    String::new(),
                    r.records.to_string(),
                    r.bytes.to_string(),
                    r.seconds.to_string(),
                    r.records_per_s.to_string(),
                    r.mb_per_s.to_string(),
                    r.latency_ms.p50.to_string(),
                    r.latency_ms.p95.to_string(),
                    r.latency_ms.p99.to_string(),
                    opt(t.map(|t| t.p50)),
                    opt(t.map(|t| t.p95)),
                    opt(t.map(|t| t.p99)),
                    r.errors.to_string(),
                    r.verified.to_string(),
                    opt(c.tsblob_speedup),
                    String::new(),
                    String::new(),
                    field(c.note.as_deref().unwrap_or_default()),
                    opt(c.server_cpu_s),
                    c.repeats
                        .iter()
                        .map(f64::to_string)
                        .collect::<Vec<_>>()
                        .join(";"),
                    opt(c.pct_of_limit),
                    opt(c.pct_of_limit_store),
                    opt(c.load_1m),
                ]);
            }
            None => {
                f.push("n/a".to_string());
                f.push(field(c.reason.as_deref().unwrap_or_default()));
                f.extend(std::iter::repeat_n(String::new(), 22));
            }
        }
        out.push_str(&f.join(","));
        out.push('\n');
    }
    for d in &report.disk {
        let mut f = vec![
            "disk".to_string(),
            d.size.to_string(),
            d.target.name().to_string(),
        ];
        let status = if d.per_payload_byte.is_some() {
            "ok"
        } else {
            "n/a"
        };
        f.push(status.to_string());
        f.push(field(d.reason.as_deref().unwrap_or_default()));
        f.push(String::new());
        f.push(d.payload_bytes.to_string());
        f.extend(std::iter::repeat_n(String::new(), 12));
        f.push(opt(d.disk_bytes));
        f.push(opt(d.per_payload_byte));
        f.extend(std::iter::repeat_n(String::new(), 4));
        out.push_str(&f.join(","));
        out.push('\n');
    }
    out
}
