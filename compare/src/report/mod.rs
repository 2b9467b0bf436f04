//! The report: every (phase, size, target) cell, measured or n/a with a reason, plus disk usage
//! per size, the targets' versions and client settings, the machine and the workload.
//!
//! One model, several renderings: a terminal table, JSON (the model itself), CSV, Markdown and
//! an SVG chart. The table and the Markdown share the formatting functions below, so a number
//! printed in one is the same string in the other.

pub mod chart;
pub mod csv;
pub mod markdown;
pub mod table;

use serde::{Deserialize, Serialize};

use crate::stats::Summary;
use crate::targets::TargetKind;
use crate::workload::{Phase, Workload};

/// A target as it was run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TargetInfo {
    /// Which system.
    pub kind: TargetKind,
    /// Server version as reported by the server (or its binary).
    pub version: String,
    /// Where it listened.
    pub url: String,
    /// Spawned by this run (on a fresh data folder) rather than connected to.
    pub spawned: bool,
    /// Client settings.
    pub client: String,
}

/// One cell: a phase at one record size on one target.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Cell {
    /// Phase.
    pub phase: Phase,
    /// Record size in bytes.
    pub size: u64,
    /// Target.
    pub target: TargetKind,
    /// Measurements; `None` means n/a, with `reason`.
    pub result: Option<Summary>,
    /// Why the cell is n/a.
    pub reason: Option<String>,
    /// tsblob's records/s divided by this target's (1 for tsblob itself).
    pub tsblob_speedup: Option<f64>,
    /// A phase-specific finding (the FIFO quota check).
    pub note: Option<String>,
    /// CPU seconds the target's server process used during the phase (spawned targets
    /// only): on a machine whose cores the client shares, what each server costs per byte.
    #[serde(default)]
    pub server_cpu_s: Option<f64>,
    /// Records/s of every round that measured this cell (`--repeat`), in round order; the
    /// result is the median round's.
    #[serde(default)]
    pub repeats: Vec<f64>,
    /// tsblob's cells only: its records/s as a percentage of the `limit` target's.
    #[serde(default)]
    pub pct_of_limit: Option<f64>,
    /// tsblob's cells only: its records/s as a percentage of the `limit-store` target's.
    #[serde(default)]
    pub pct_of_limit_store: Option<f64>,
    /// The machine's 1-minute load average when the phase ended, the highest over the
    /// rounds (`--repeat`). The run itself (client and one server) keeps it near the CPU
    /// count while a phase runs; well above that, other work shared the cores.
    #[serde(default)]
    pub load_1m: Option<f64>,
}

impl Cell {
    /// A measured cell.
    pub fn measured(phase: Phase, size: u64, target: TargetKind, s: Summary) -> Cell {
        Cell {
            phase,
            size,
            target,
            result: Some(s),
            reason: None,
            tsblob_speedup: None,
            note: None,
            server_cpu_s: None,
            repeats: Vec::new(),
            pct_of_limit: None,
            pct_of_limit_store: None,
            load_1m: None,
        }
    }

    /// An n/a cell.
    pub fn na(phase: Phase, size: u64, target: TargetKind, reason: &str) -> Cell {
        Cell {
            phase,
            size,
            target,
            result: None,
            reason: Some(reason.to_string()),
            tsblob_speedup: None,
            note: None,
            server_cpu_s: None,
            repeats: Vec::new(),
            pct_of_limit: None,
            pct_of_limit_store: None,
            load_1m: None,
        }
    }

    fn key(&self) -> (Phase, u64, TargetKind) {
        (self.phase, self.size, self.target)
    }
}

/// One cell per (phase, size, target) from the cells of several rounds (`--repeat`): the
/// round with the median records/s (of an even count, the upper middle one) gives the
/// result and server CPU, every round's records/s is kept in `repeats`, and errors add up
/// over the rounds. A cell no round measured stays the first round's n/a.
pub fn median_of_rounds(rounds: &[Vec<Cell>]) -> Vec<Cell> {
    let Some(first) = rounds.first() else {
        return Vec::new();
    };
    first
        .iter()
        .map(|cell| {
            let same: Vec<&Cell> = rounds
                .iter()
                .filter_map(|r| r.iter().find(|c| c.key() == cell.key()))
                .collect();
            let mut measured: Vec<&Cell> = same
                .iter()
                .copied()
                .filter(|c| c.result.is_some())
                .collect();
            let rps = |c: &Cell| c.result.as_ref().map_or(0.0, |r| r.records_per_s);
            let repeats: Vec<f64> = measured.iter().map(|c| rps(c)).collect();
            measured.sort_by(|a, b| rps(a).total_cmp(&rps(b)));
            let Some(median) = measured.get(measured.len() / 2) else {
                return cell.clone();
            };
            let mut out = (*median).clone();
            let errors: u64 = measured
                .iter()
                .filter_map(|c| c.result.as_ref())
                .map(|r| r.errors)
                .sum();
            if let Some(r) = out.result.as_mut() {
                r.errors = errors;
                if r.first_error.is_none() {
                    r.first_error = measured
                        .iter()
                        .find_map(|c| c.result.as_ref()?.first_error.clone());
                }
            }
            out.repeats = repeats;
            out.load_1m = same.iter().filter_map(|c| c.load_1m).max_by(f64::total_cmp);
            out
        })
        .collect()
}

/// One disk cell per (size, target) from several rounds: the median ratio.
pub fn median_disk_of_rounds(rounds: &[Vec<DiskCell>]) -> Vec<DiskCell> {
    let Some(first) = rounds.first() else {
        return Vec::new();
    };
    first
        .iter()
        .map(|d| {
            let mut same: Vec<&DiskCell> = rounds
                .iter()
                .filter_map(|r| {
                    r.iter()
                        .find(|x| x.size == d.size && x.target == d.target)
                        .filter(|x| x.per_payload_byte.is_some())
                })
                .collect();
            same.sort_by(|a, b| {
                a.per_payload_byte
                    .unwrap_or(0.0)
                    .total_cmp(&b.per_payload_byte.unwrap_or(0.0))
            });
            same.get(same.len() / 2)
                .map_or_else(|| d.clone(), |m| (*m).clone())
        })
        .collect()
}

/// Disk used per payload byte for one size on one target.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DiskCell {
    /// Record size.
    pub size: u64,
    /// Target.
    pub target: TargetKind,
    /// Payload bytes written at this size.
    pub payload_bytes: u64,
    /// Allocated bytes the target's data folder grew by while writing them.
    pub disk_bytes: Option<u64>,
    /// `disk_bytes / payload_bytes`.
    pub per_payload_byte: Option<f64>,
    /// Why it was not measured.
    pub reason: Option<String>,
}

/// The machine's 1-minute load average (`/proc/loadavg`), if it can be read.
pub fn load_1m() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The machine the run was on.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Machine {
    /// Logical CPUs.
    pub cpus: usize,
    /// CPU model name.
    pub cpu_model: String,
    /// Memory in GiB.
    pub memory_gib: f64,
    /// Kernel release.
    pub kernel: String,
}

impl Machine {
    /// Reads /proc (Linux); unknown fields stay empty.
    pub fn detect() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_default();
        let memory_kib: f64 = std::fs::read_to_string("/proc/meminfo")
            .unwrap_or_default()
            .lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        Machine {
            cpus: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(0),
            cpu_model,
            memory_gib: (memory_kib / (1024.0 * 1024.0) * 10.0).round() / 10.0,
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim()
                .to_string(),
        }
    }
}

/// Everything a run produced.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Report {
    /// `tsblob bench <version>`.
    pub tool: String,
    /// Start time, seconds since the Unix epoch.
    pub started_unix: u64,
    /// Wall-clock time of the whole run.
    pub total_seconds: f64,
    /// The 1-minute load average when the run started and when it ended.
    #[serde(default)]
    pub load_1m_start: Option<f64>,
    #[serde(default)]
    pub load_1m_end: Option<f64>,
    /// Machine.
    pub machine: Machine,
    /// The workload as run (counts before scaling, and the scale).
    pub workload: Workload,
    /// Targets in run order.
    pub targets: Vec<TargetInfo>,
    /// Phase cells.
    pub cells: Vec<Cell>,
    /// Disk usage cells.
    pub disk: Vec<DiskCell>,
}

impl Report {
    /// Parses a report written with `--json`.
    pub fn from_json(text: &str) -> anyhow::Result<Report> {
        Ok(serde_json::from_str(text)?)
    }

    /// Fills `tsblob_speedup` of every measured cell from tsblob's cell of the same phase and
    /// size, and `pct_of_limit` (`pct_of_limit_store`) of tsblob's cells from the `limit`
    /// (`limit-store`) target's.
    pub fn compute_ratios(&mut self) {
        let base: Vec<(Phase, u64, f64)> = self
            .cells
            .iter()
            .filter(|c| c.target == TargetKind::Tsblob)
            .filter_map(|c| Some((c.phase, c.size, c.result.as_ref()?.records_per_s)))
            .collect();
        for cell in &mut self.cells {
            let Some(r) = &cell.result else { continue };
            let tsblob = base
                .iter()
                .find(|(p, s, _)| *p == cell.phase && *s == cell.size);
            cell.tsblob_speedup = match tsblob {
                Some((_, _, t)) if r.records_per_s > 0.0 => Some(t / r.records_per_s),
                _ => None,
            };
        }
        for (kind, pct) in [
            (
                TargetKind::Limit,
                (|c| &mut c.pct_of_limit) as fn(&mut Cell) -> &mut Option<f64>,
            ),
            (TargetKind::LimitStore, |c| &mut c.pct_of_limit_store),
        ] {
            let limit: Vec<(Phase, u64, f64)> = self
                .cells
                .iter()
                .filter(|c| c.target == kind)
                .filter_map(|c| Some((c.phase, c.size, c.result.as_ref()?.records_per_s)))
                .collect();
            for cell in &mut self.cells {
                let (Some(r), TargetKind::Tsblob) = (&cell.result, cell.target) else {
                    continue;
                };
                let rps = r.records_per_s;
                *pct(cell) = limit
                    .iter()
                    .find(|(p, s, _)| *p == cell.phase && *s == cell.size)
                    .filter(|(_, _, l)| *l > 0.0)
                    .map(|(_, _, l)| rps / l * 100.0);
            }
        }
    }

    /// Phases present, in run order.
    pub fn phases(&self) -> Vec<Phase> {
        let mut p: Vec<Phase> = self.cells.iter().map(|c| c.phase).collect();
        p.sort();
        p.dedup();
        p
    }
}

/// Column headers of a phase table (terminal and Markdown).
pub const HEADERS: [&str; 18] = [
    "size",
    "target",
    "records",
    "rec/s",
    "MB/s",
    "p50 ms",
    "p95 ms",
    "p99 ms",
    "TTFB p50 ms",
    "TTFB p99 ms",
    "errors",
    "verified",
    "tsblob ×",
    "server CPU s",
    "load 1m",
    "rec/s range",
    "% of limit",
    "notes",
];

/// The strings of one phase-table row, shared by the terminal table and Markdown.
pub fn row(cell: &Cell) -> Vec<String> {
    let mut out = vec![
        crate::workload::format_size(cell.size),
        cell.target.name().to_string(),
    ];
    match &cell.result {
        Some(r) => {
            let ttfb = |f: fn(&crate::stats::Percentiles) -> f64| {
                r.ttfb_ms
                    .as_ref()
                    .map_or_else(|| "n/a (write)".to_string(), |t| ms(f(t)))
            };
            out.extend([
                r.records.to_string(),
                format!("{:.0}", r.records_per_s),
                format!("{:.1}", r.mb_per_s),
                ms(r.latency_ms.p50),
                ms(r.latency_ms.p95),
                ms(r.latency_ms.p99),
                ttfb(|t| t.p50),
                ttfb(|t| t.p99),
                r.errors.to_string(),
                r.verified.to_string(),
                cell.tsblob_speedup
                    .map_or_else(|| "n/a (no tsblob cell)".to_string(), |x| format!("{x:.2}")),
                cell.server_cpu_s
                    .map_or_else(|| "n/a (not spawned)".to_string(), |x| format!("{x:.2}")),
                cell.load_1m
                    .map_or_else(|| "n/a".to_string(), |x| format!("{x:.2}")),
                rps_range(&cell.repeats),
                match (cell.target, cell.pct_of_limit, cell.pct_of_limit_store) {
                    (_, Some(p), Some(s)) => format!("{p:.0}% (limit-store: {s:.0}%)"),
                    (_, Some(p), None) => format!("{p:.0}%"),
                    (_, None, Some(s)) => format!("limit-store: {s:.0}%"),
                    (TargetKind::Tsblob, None, None) => "n/a (no limit cell)".to_string(),
                    _ => String::new(),
                },
            ]);
            let mut notes = cell.note.clone().unwrap_or_default();
            if let Some(e) = &r.first_error {
                if !notes.is_empty() {
                    notes.push_str("; ");
                }
                notes.push_str("first error: ");
                notes.push_str(&e.chars().take(120).collect::<String>());
            }
            out.push(notes);
        }
        None => {
            out.extend(std::iter::repeat_n("n/a".to_string(), 15));
            out.push(format!(
                "n/a: {}",
                cell.reason.as_deref().unwrap_or("not measured")
            ));
        }
    }
    out
}

/// Column headers of the disk table.
pub const DISK_HEADERS: [&str; 6] = [
    "size",
    "target",
    "payload MB",
    "disk MB",
    "disk/payload",
    "notes",
];

/// The strings of one disk-table row.
pub fn disk_row(d: &DiskCell) -> Vec<String> {
    let mb = |b: u64| format!("{:.1}", b as f64 / 1e6);
    match (d.disk_bytes, d.per_payload_byte) {
        (Some(disk), Some(ratio)) => vec![
            crate::workload::format_size(d.size),
            d.target.name().to_string(),
            mb(d.payload_bytes),
            mb(disk),
            format!("{ratio:.3}"),
            String::new(),
        ],
        _ => vec![
            crate::workload::format_size(d.size),
            d.target.name().to_string(),
            mb(d.payload_bytes),
            "n/a".into(),
            "n/a".into(),
            format!("n/a: {}", d.reason.as_deref().unwrap_or("not measured")),
        ],
    }
}

/// `min–max (N runs)` of the rounds' records/s, or `1 run`.
fn rps_range(repeats: &[f64]) -> String {
    if repeats.len() < 2 {
        return "1 run".to_string();
    }
    let min = repeats.iter().copied().fold(f64::INFINITY, f64::min);
    let max = repeats.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{min:.0}–{max:.0} ({} runs)", repeats.len())
}

fn ms(v: f64) -> String {
    format!("{v:.3}")
}

/// The run's header lines: machine, workload and each target's version and client settings.
pub fn preamble(report: &Report) -> Vec<String> {
    let m = &report.machine;
    let w = &report.workload;
    let mut lines = vec![
        format!(
            "{} — {} CPUs ({}), {} GiB RAM, Linux {}; {:.0} s in total; 1-minute load \
             average {} at the start, {} at the end",
            report.tool,
            m.cpus,
            m.cpu_model,
            m.memory_gib,
            m.kernel,
            report.total_seconds,
            report
                .load_1m_start
                .map_or("n/a".into(), |l| format!("{l:.2}")),
            report
                .load_1m_end
                .map_or("n/a".into(), |l| format!("{l:.2}")),
        ),
        format!(
            "workload: seed {}, sizes [{}], scale {}, {} entries per size, {} virtual users, \
             batches of up to {} records / {} bytes, {} labels per record, {:.0}% of records \
             written singly, {} sub-windows of up to {:.0}%, {} point reads per size",
            w.seed,
            w.sizes
                .iter()
                .map(|s| crate::workload::format_size(*s))
                .collect::<Vec<_>>()
                .join(", "),
            w.scale,
            w.entries,
            w.concurrency,
            w.batch_size,
            w.batch_max_bytes,
            w.labels,
            w.single_fraction * 100.0,
            w.sub_windows,
            w.sub_window_max * 100.0,
            w.scaled_point_reads()
        ),
    ];
    for t in &report.targets {
        lines.push(format!(
            "{} {} at {} ({}): {}",
            t.kind.name(),
            t.version,
            t.url,
            if t.spawned {
                "spawned on a fresh data folder"
            } else {
                "connected"
            },
            t.client
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Stats;

    fn measured(target: TargetKind, rps: f64, errors: u64) -> Cell {
        let mut stats = Stats {
            records: rps as u64,
            errors,
            ..Stats::default()
        };
        if errors > 0 {
            stats.first_error = Some(format!("{errors} failed"));
        }
        let mut c = Cell::measured(
            Phase::WriteSingle,
            1024,
            target,
            stats.summary(std::time::Duration::from_secs(1), false),
        );
        c.server_cpu_s = Some(rps / 1000.0);
        c
    }

    #[test]
    fn rounds_give_the_median_round_all_figures_and_summed_errors() {
        let rounds = vec![
            vec![
                measured(TargetKind::Tsblob, 300.0, 0),
                measured(TargetKind::Limit, 10.0, 0),
            ],
            vec![
                measured(TargetKind::Tsblob, 100.0, 2),
                measured(TargetKind::Limit, 30.0, 0),
            ],
            vec![
                measured(TargetKind::Tsblob, 200.0, 0),
                measured(TargetKind::Limit, 20.0, 0),
            ],
        ];
        let mut rounds = rounds;
        for (round, load) in rounds.iter_mut().zip([1.5, 4.0, 2.0]) {
            round[0].load_1m = Some(load);
        }
        let cells = median_of_rounds(&rounds);
        assert_eq!(cells.len(), 2);
        // The load is the highest any round ended with, not the median round's (2.0).
        assert_eq!(cells[0].load_1m, Some(4.0));
        assert_eq!(cells[1].load_1m, None);
        let t = &cells[0];
        assert_eq!(t.repeats, vec![300.0, 100.0, 200.0]);
        let r = t.result.as_ref().unwrap();
        assert_eq!(r.records_per_s, 200.0);
        // The CPU is the median round's, not another round's.
        assert_eq!(t.server_cpu_s, Some(0.2));
        assert_eq!(r.errors, 2, "an error of any round shows");
        assert_eq!(r.first_error.as_deref(), Some("2 failed"));
        let mut report = Report {
            tool: String::new(),
            started_unix: 0,
            total_seconds: 0.0,
            load_1m_start: Some(0.5),
            load_1m_end: Some(3.25),
            machine: Machine::detect(),
            workload: Workload::default(),
            targets: Vec::new(),
            cells,
            disk: Vec::new(),
        };
        report.compute_ratios();
        assert_eq!(report.cells[0].pct_of_limit, Some(1000.0));
        assert_eq!(report.cells[1].pct_of_limit, None);
        assert_eq!(report.cells[1].tsblob_speedup, Some(10.0));
        assert_eq!(row(&report.cells[0])[14], "4.00");
        assert_eq!(row(&report.cells[1])[14], "n/a");
        assert_eq!(row(&report.cells[0])[15], "100–300 (3 runs)");
        assert_eq!(row(&report.cells[0])[16], "1000%");
        assert!(preamble(&report)[0].contains("load average 0.50 at the start, 3.25 at the end"));
        // With a limit-store cell, tsblob's row carries both percentages.
        let mut store = measured(TargetKind::LimitStore, 400.0, 0);
        store.repeats = vec![400.0];
        report.cells.push(store);
        report.compute_ratios();
        assert_eq!(report.cells[0].pct_of_limit_store, Some(50.0));
        assert_eq!(report.cells[2].pct_of_limit_store, None);
        assert_eq!(row(&report.cells[0])[16], "1000% (limit-store: 50%)");
        assert!(super::csv::render(&report).contains(",1000,50,4\n"));
        for r in report.cells.iter().map(row) {
            assert_eq!(r.len(), HEADERS.len());
        }
        let na = Cell::na(Phase::PointRead, 1024, TargetKind::Limit, "why");
        assert_eq!(row(&na).len(), HEADERS.len());
        report.cells.push(na);
        let csv = super::csv::render(&report);
        let columns = csv.lines().next().unwrap().split(',').count();
        for line in csv.lines() {
            assert_eq!(line.split(',').count(), columns, "{line}");
        }
    }

    #[test]
    fn a_cell_no_round_measured_stays_n_a() {
        let na = Cell::na(Phase::PointRead, 1024, TargetKind::Limit, "why");
        let cells = median_of_rounds(&[vec![na.clone()], vec![na.clone()]]);
        assert_eq!(cells, vec![na]);
    }
}
