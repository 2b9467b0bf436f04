//! The Markdown rendering: a summary (one row per phase and size, the targets side by side,
//! as the README shows it), then the same rows as the terminal table, as GitHub tables under
//! one `### <phase>` heading each.

use super::{disk_row, preamble, row, Cell, Report, DISK_HEADERS, HEADERS};
use crate::targets::TargetKind;

/// Escapes a table cell (pipes would split it).
fn esc(s: &str) -> String {
    s.replace('|', "\\|")
}

fn table(out: &mut String, headers: &[&str], rows: impl Iterator<Item = Vec<String>>) {
    out.push_str(&format!("| {} |\n", headers.join(" | ")));
    out.push_str(&format!("|{}\n", "---|".repeat(headers.len())));
    for r in rows {
        let cells: Vec<String> = r.iter().map(|c| esc(c)).collect();
        out.push_str(&format!("| {} |\n", cells.join(" | ")));
    }
}

/// The whole report as Markdown.
pub fn render(report: &Report) -> String {
    let mut out = String::from("## tsblob bench results\n\n");
    for line in preamble(report) {
        out.push_str(&format!("- {}\n", esc(&line)));
    }
    summary(&mut out, report);
    for phase in report.phases() {
        out.push_str(&format!("\n### {}\n\n", phase.name()));
        table(
            &mut out,
            &HEADERS,
            report.cells.iter().filter(|c| c.phase == phase).map(row),
        );
    }
    if !report.disk.is_empty() {
        out.push_str("\n### disk\n\n");
        table(&mut out, &DISK_HEADERS, report.disk.iter().map(disk_row));
    }
    out
}

/// Records/s as the summary prints them: whole numbers with thousands separators from 100
/// up, three figures below.
fn rate(v: f64) -> String {
    if v >= 100.0 {
        let whole = format!("{v:.0}");
        let digits = whole.len();
        let mut out = String::new();
        for (i, ch) in whole.chars().enumerate() {
            if i > 0 && (digits - i) % 3 == 0 {
                out.push(',');
            }
            out.push(ch);
        }
        out
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// The summary table: per phase and size, each target's median records/s, tsblob's ratio to
/// each peer, its share of the `limit` and `limit-store` servers, and the server CPU each
/// target spent on the phase (tsblob's also per record).
fn summary(out: &mut String, report: &Report) {
    let mut kinds: Vec<TargetKind> = report.cells.iter().map(|c| c.target).collect();
    kinds.sort();
    kinds.dedup();
    let peers: Vec<TargetKind> = kinds
        .iter()
        .copied()
        .filter(|k| *k != TargetKind::Tsblob && !k.is_limit())
        .collect();
    let mut headers: Vec<String> = vec!["phase".into(), "size".into()];
    headers.extend(kinds.iter().map(|k| k.name().to_string()));
    headers.extend(peers.iter().map(|k| format!("tsblob ÷ {}", k.name())));
    for limit in [TargetKind::Limit, TargetKind::LimitStore] {
        if kinds.contains(&limit) {
            headers.push(format!("tsblob % of {}", limit.name()));
        }
    }
    let names: Vec<&str> = kinds.iter().map(|k| k.name()).collect();
    headers.push(format!("server CPU s ({})", names.join(" / ")));
    headers.push("tsblob CPU µs/record".into());
    let cell = |phase, size, kind| {
        report
            .cells
            .iter()
            .find(|c: &&Cell| c.phase == phase && c.size == size && c.target == kind)
    };
    let mut rows = Vec::new();
    for phase in report.phases() {
        let mut sizes: Vec<u64> = report
            .cells
            .iter()
            .filter(|c| c.phase == phase)
            .map(|c| c.size)
            .collect();
        sizes.sort_unstable();
        sizes.dedup();
        for (i, size) in sizes.into_iter().enumerate() {
            let phase_name = if i == 0 { phase.name() } else { "" };
            let mut r = vec![phase_name.to_string(), crate::workload::format_size(size)];
            let rps = |k| cell(phase, size, k).and_then(|c| c.result.as_ref());
            r.extend(
                kinds
                    .iter()
                    .map(|k| rps(*k).map_or_else(|| "n/a".to_string(), |s| rate(s.records_per_s))),
            );
            let ts = cell(phase, size, TargetKind::Tsblob);
            r.extend(
                peers
                    .iter()
                    .map(|k| match (ts.and_then(|c| c.result.as_ref()), rps(*k)) {
                        (Some(t), Some(p)) if p.records_per_s > 0.0 => {
                            format!("{:.2}", t.records_per_s / p.records_per_s)
                        }
                        _ => String::new(),
                    }),
            );
            for (limit, pct) in [
                (TargetKind::Limit, ts.and_then(|c| c.pct_of_limit)),
                (
                    TargetKind::LimitStore,
                    ts.and_then(|c| c.pct_of_limit_store),
                ),
            ] {
                if kinds.contains(&limit) {
                    r.push(pct.map_or_else(String::new, |p| format!("{p:.0} %")));
                }
            }
            let cpu: Vec<String> = kinds
                .iter()
                .map(|k| {
                    cell(phase, size, *k)
                        .and_then(|c| c.result.as_ref().and(c.server_cpu_s))
                        .map_or_else(|| "–".to_string(), |s| format!("{s:.2}"))
                })
                .collect();
            r.push(cpu.join(" / "));
            r.push(
                match (
                    ts.and_then(|c| c.server_cpu_s),
                    ts.and_then(|c| c.result.as_ref()),
                ) {
                    (Some(cpu), Some(s)) if s.records > 0 => {
                        format!("{:.1}", cpu / s.records as f64 * 1e6)
                    }
                    _ => String::new(),
                },
            );
            rows.push(r);
        }
    }
    out.push_str("\n### summary (median round of each cell, records/s)\n\n");
    let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
    table(out, &headers, rows.into_iter());
}

#[cfg(test)]
mod tests {
    use super::rate;

    #[test]
    fn rates_print_with_thousands_separators_and_three_figures_below_100() {
        assert_eq!(rate(243_819.4), "243,819");
        assert_eq!(rate(1_017_329.0), "1,017,329");
        assert_eq!(rate(115.2), "115");
        assert_eq!(rate(87.04), "87.0");
        assert_eq!(rate(9.876), "9.88");
    }
}
