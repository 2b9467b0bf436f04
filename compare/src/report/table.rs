//! The terminal rendering: one table per phase (rows: size × target), then disk usage.

use comfy_table::{presets::UTF8_FULL_CONDENSED, ContentArrangement, Table};

use super::{disk_row, preamble, row, Report, DISK_HEADERS, HEADERS};

/// The whole report as terminal text.
pub fn render(report: &Report) -> String {
    let mut out = preamble(report).join("\n");
    out.push('\n');
    for phase in report.phases() {
        let mut table = Table::new();
        table
            .load_style(UTF8_FULL_CONDENSED)
            .set_content_arrangement(ContentArrangement::Dynamic)
            .set_header(HEADERS);
        for cell in report.cells.iter().filter(|c| c.phase == phase) {
            table.add_row(row(cell));
        }
        out.push_str(&format!("\n{}\n{table}\n", phase.name()));
    }
    if !report.disk.is_empty() {
        let mut table = Table::new();
        table
            .load_style(UTF8_FULL_CONDENSED)
            .set_content_arrangement(ContentArrangement::Dynamic)
            .set_header(DISK_HEADERS);
        for d in &report.disk {
            table.add_row(disk_row(d));
        }
        out.push_str(&format!(
            "\ndisk bytes per payload byte (after both write phases)\n{table}\n"
        ));
    }
    out
}
