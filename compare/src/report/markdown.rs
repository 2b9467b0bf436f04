//! The Markdown rendering: the same rows as the terminal table, as GitHub tables under one
//! `### <phase>` heading each.

use super::{disk_row, preamble, row, Report, DISK_HEADERS, HEADERS};

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
