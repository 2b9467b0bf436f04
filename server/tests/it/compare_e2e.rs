//! End-to-end tests of `tsblob bench`: the real `tsblob` binary against real MinIO and
//! ReductStore processes (installed by `scripts/install-peers.sh`), on a tiny seeded workload.
//!
//! They fail, never skip, when the peers are missing: CI installs them first. No speed is
//! asserted; what is asserted is that every phase ran on every target (or is n/a with a
//! reason), that every record read was verified, and that the JSON matches the tables.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use tsblob_compare::report::{Cell, Report};
use tsblob_compare::targets::TargetKind;
use tsblob_compare::workload::{format_size, Phase};

/// The folder holding the `minio` and `reductstore` binaries.
fn peers_bin() -> PathBuf {
    let dir = match std::env::var_os("TSBLOB_PEERS_BIN") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME").expect("HOME is set"))
            .join(".cache/tsblob/peers/bin"),
    };
    for name in ["minio", "reductstore"] {
        assert!(
            dir.join(name).is_file(),
            "peer binary {} is missing: run scripts/install-peers.sh (or set TSBLOB_PEERS_BIN) \
             before these tests",
            dir.join(name).display()
        );
    }
    dir
}

/// A fresh folder under the system temp dir, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let p = std::env::temp_dir().join(format!(
            "tsblob-compare-{tag}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const WORKLOAD: &str = r#"
seed = 7
sizes = [1024, 102400]
records_per_size = 48
entries = 2
concurrency = 4
batch_size = 8
labels = 2
single_fraction = 0.25
sub_windows = 4
point_reads = 12
phases = ["write-single", "write-batch", "range-whole", "range-sub", "range-when", "point-read", "fifo"]

[fifo]
quota_bytes = 1048576
record_size = 10240
overwrite_factor = 3.0
block_bytes = 262144
"#;

/// The tests share two cores: one at a time, so a peer's timeouts under another test's load
/// do not show up as errors of this one.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn bench(dir: &Path, extra: &[&str]) -> Command {
    bench_with_minio(dir, &peers_bin().join("minio"), extra)
}

fn bench_with_minio(dir: &Path, minio: &Path, extra: &[&str]) -> Command {
    let bin = peers_bin();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tsblob"));
    cmd.arg("bench")
        .args(["--against", "minio,reductstore", "--no-progress"])
        .arg("--minio-bin")
        .arg(minio)
        .arg("--reductstore-bin")
        .arg(bin.join("reductstore"))
        .arg("--work-dir")
        .arg(dir.join("work"))
        .args(extra);
    cmd
}

fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "tsblob bench failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Rows of the tables in a Markdown report: section name → rows of cells.
fn markdown_rows(md: &str) -> HashMap<String, Vec<Vec<String>>> {
    let mut out: HashMap<String, Vec<Vec<String>>> = HashMap::new();
    let mut section = String::new();
    for line in md.lines() {
        if let Some(name) = line.strip_prefix("### ") {
            section = name.trim().to_string();
        } else if line.starts_with("| ") && !line.starts_with("| size ") {
            let cells = line
                .trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().to_string())
                .collect();
            out.entry(section.clone()).or_default().push(cells);
        }
    }
    out
}

/// Rows of the terminal tables in stdout: the phase name printed above each table → rows.
fn terminal_rows(text: &str) -> HashMap<String, Vec<Vec<String>>> {
    let mut out: HashMap<String, Vec<Vec<String>>> = HashMap::new();
    let mut section = String::new();
    for line in text.lines() {
        if !line.trim().is_empty() && !"│┌└╞├".contains(line.chars().next().unwrap_or(' '))
        {
            // A phase name above its table, or any other heading (the disk table's).
            section = line.trim().to_string();
        } else if line.starts_with('│') && line.contains('┆') {
            let cells: Vec<String> = line
                .trim_matches('│')
                .split('┆')
                .map(|c| c.trim().to_string())
                .collect();
            if cells.get(1).is_some_and(|c| c == "target") {
                continue; // the header row
            }
            out.entry(section.clone()).or_default().push(cells);
        }
    }
    out
}

/// The strings a table shows for a cell, formatted independently of the renderer.
fn expected_row(c: &Cell) -> Vec<String> {
    let mut v = vec![format_size(c.size), c.target.name().to_string()];
    match &c.result {
        Some(r) => v.extend([
            r.records.to_string(),
            format!("{:.0}", r.records_per_s),
            format!("{:.1}", r.mb_per_s),
            format!("{:.3}", r.latency_ms.p50),
        ]),
        None => v.extend(std::iter::repeat_n("n/a".to_string(), 4)),
    }
    v
}

#[test]
fn every_phase_runs_on_all_three_targets_verified_and_reported() {
    let _serial = serial();
    let dir = Scratch::new("e2e");
    let workload = dir.0.join("tiny.toml");
    std::fs::write(&workload, WORKLOAD).unwrap();
    let (json, md, csv, svg) = (
        dir.0.join("r.json"),
        dir.0.join("r.md"),
        dir.0.join("r.csv"),
        dir.0.join("r.svg"),
    );
    let out = run_ok(
        bench(&dir.0, &[])
            .arg("--workload")
            .arg(&workload)
            .arg("--json")
            .arg(&json)
            .arg("--markdown")
            .arg(&md)
            .arg("--csv")
            .arg(&csv)
            .arg("--chart")
            .arg(&svg),
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let report = Report::from_json(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(
        report.load_1m_start.is_some() && report.load_1m_end.is_some(),
        "the run's load average at its start and end"
    );
    let w = &report.workload;
    let kinds = [
        TargetKind::Tsblob,
        TargetKind::Minio,
        TargetKind::Reductstore,
    ];
    assert_eq!(
        report.targets.iter().map(|t| t.kind).collect::<Vec<_>>(),
        kinds
    );
    for t in &report.targets {
        assert!(t.spawned, "{:?} should have been spawned", t.kind);
        assert!(
            !t.version.is_empty() && !t.client.is_empty(),
            "{t:?} lacks version or settings"
        );
    }

    // Every (phase, size, target) cell exists once, measured or n/a with a reason.
    let plans = w.size_plans();
    for phase in Phase::ALL {
        let sizes: Vec<u64> = if phase == Phase::Fifo {
            vec![w.fifo.record_size]
        } else {
            plans.iter().map(|p| p.size).collect()
        };
        for size in sizes {
            for kind in kinds {
                let cells: Vec<&Cell> = report
                    .cells
                    .iter()
                    .filter(|c| c.phase == phase && c.size == size && c.target == kind)
                    .collect();
                assert_eq!(
                    cells.len(),
                    1,
                    "{phase:?} {size} {kind:?}: {} cells",
                    cells.len()
                );
                let c = cells[0];
                let na_expected =
                    // MinIO has no batch API, no FIFO quota and no conditions on metadata.
                    kind == TargetKind::Minio
                        && matches!(phase, Phase::WriteBatch | Phase::Fifo | Phase::RangeWhen);
                match (&c.result, na_expected) {
                    (None, true) => assert!(c.reason.as_deref().is_some_and(|r| !r.is_empty())),
                    (Some(r), false) => {
                        assert!(r.records > 0, "{phase:?} {size} {kind:?} measured nothing");
                        assert_eq!(
                            r.errors, 0,
                            "{phase:?} {size} {kind:?}: {:?}",
                            r.first_error
                        );
                        assert!(
                            c.tsblob_speedup.is_some(),
                            "{phase:?} {size} {kind:?} has no ratio"
                        );
                        // Spawned targets: the server CPU of the phase was read from procfs.
                        assert!(
                            c.server_cpu_s.is_some_and(|s| s >= 0.0),
                            "{phase:?} {size} {kind:?} has no server CPU figure"
                        );
                        // The machine's load when the phase ended, read from procfs.
                        assert!(
                            c.load_1m.is_some_and(|l| l >= 0.0),
                            "{phase:?} {size} {kind:?} has no load figure"
                        );
                        if phase.is_read() {
                            assert_eq!(
                                r.verified, r.records,
                                "{phase:?} {size} {kind:?}: unverified reads"
                            );
                            assert!(r.ttfb_ms.is_some());
                        }
                    }
                    other => panic!("{phase:?} {size} {kind:?}: unexpected cell {other:?}"),
                }
            }
        }
    }
    // The whole-window read returns every record; point reads read as many as planned.
    for c in &report.cells {
        let Some(r) = &c.result else { continue };
        let plan = plans.iter().find(|p| p.size == c.size);
        match c.phase {
            Phase::RangeWhole => assert_eq!(r.records, plan.unwrap().count),
            Phase::PointRead => assert_eq!(r.records, w.scaled_point_reads()),
            Phase::WriteSingle => assert_eq!(r.records, plan.unwrap().single),
            Phase::Fifo => assert!(c.note.as_deref().unwrap().starts_with("quota")),
            _ => {}
        }
    }
    let tsblob_fifo = report
        .cells
        .iter()
        .find(|c| c.phase == Phase::Fifo && c.target == TargetKind::Tsblob);
    assert!(tsblob_fifo
        .unwrap()
        .note
        .as_deref()
        .unwrap()
        .starts_with("quota held"));
    // Disk usage is measured for every size on every (spawned) target.
    assert_eq!(report.disk.len(), plans.len() * kinds.len());
    assert!(report
        .disk
        .iter()
        .all(|d| d.per_payload_byte.is_some_and(|r| r > 0.0)));

    // The Markdown and the terminal table show the JSON's numbers.
    let md_rows = markdown_rows(&std::fs::read_to_string(&md).unwrap());
    let term_rows = terminal_rows(&stdout);
    for phase in report.phases() {
        let want: Vec<Vec<String>> = report
            .cells
            .iter()
            .filter(|c| c.phase == phase)
            .map(expected_row)
            .collect();
        for (what, rows) in [("markdown", &md_rows), ("terminal", &term_rows)] {
            let got = rows
                .get(phase.name())
                .unwrap_or_else(|| panic!("{what}: no {} table", phase.name()));
            assert_eq!(got.len(), want.len(), "{what} {}: row count", phase.name());
            for (g, e) in got.iter().zip(&want) {
                assert_eq!(
                    &g[..e.len()],
                    &e[..],
                    "{what} {}: row differs from JSON",
                    phase.name()
                );
                if e[2] == "n/a" {
                    assert!(
                        g.last().unwrap().starts_with("n/a: "),
                        "{what}: n/a row without reason: {g:?}"
                    );
                }
            }
        }
    }
    // The summary: one row per phase and size, tsblob's median records/s and its ratio to
    // each peer as in the JSON.
    let summary = md_rows
        .get("summary (median round of each cell, records/s)")
        .expect("markdown: no summary table");
    let mut sized: Vec<&Cell> = report
        .cells
        .iter()
        .filter(|c| c.target == TargetKind::Tsblob)
        .collect();
    sized.sort_by_key(|c| (c.phase, c.size));
    assert_eq!(
        summary.len(),
        1 + sized.len(),
        "summary: header + a row per cell"
    );
    let ts_rates: Vec<f64> = summary[1..]
        .iter()
        .filter(|r| r[2] != "n/a")
        .map(|r| r[2].replace(',', "").parse::<f64>().unwrap())
        .collect();
    let want_rates: Vec<f64> = sized
        .iter()
        .filter_map(|c| c.result.as_ref())
        .map(|r| r.records_per_s)
        .collect();
    assert_eq!(ts_rates.len(), want_rates.len());
    for (got, want) in ts_rates.iter().zip(&want_rates) {
        assert!(
            (got - want).abs() <= want.max(1.0) * 0.01,
            "summary shows {got} rec/s where the JSON has {want}"
        );
    }
    // `--render` writes the same Markdown again from the JSON, without running anything.
    let md2 = dir.0.join("r2.md");
    let mut render = Command::new(env!("CARGO_BIN_EXE_tsblob"));
    run_ok(
        render
            .args(["bench", "--render"])
            .arg(&json)
            .arg("--markdown")
            .arg(&md2),
    );
    assert_eq!(
        std::fs::read_to_string(&md2).unwrap(),
        std::fs::read_to_string(&md).unwrap()
    );
    // CSV: a header, one line per cell and per disk cell.
    let csv = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(
        csv.lines().count(),
        1 + report.cells.len() + report.disk.len()
    );
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));
    // Nothing of the run is left on disk.
    assert_eq!(std::fs::read_dir(dir.0.join("work")).unwrap().count(), 0);
}

/// Processes whose command line mentions `needle` (the run's work folder).
fn processes_mentioning(needle: &str) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        // The bench itself names the work folder too; only its children hold data in it.
        if cmdline.contains(needle) && !cmdline.contains(" bench ") {
            out.push(cmdline);
        }
    }
    out
}

#[test]
fn ctrl_c_stops_spawned_peers_and_removes_their_data() {
    let _serial = serial();
    let dir = Scratch::new("sigint");
    let work = dir.0.join("work");
    // Large enough to still be running when interrupted.
    let mut child = bench(
        &dir.0,
        &[
            "--sizes",
            "100KiB",
            "--records",
            "200000",
            "--against",
            "reductstore,minio",
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // Wait until a spawned target holds a data folder, then interrupt.
    let start = Instant::now();
    let needle = work.to_string_lossy().into_owned();
    while processes_mentioning(&needle).is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no target was spawned within 60 s"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "bench exited before it was interrupted"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    assert!(
        !out.status.success(),
        "an interrupted bench must not report success"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("interrupted"), "stderr: {stderr}");
    assert!(
        processes_mentioning(&needle).is_empty(),
        "targets still running after Ctrl-C"
    );
    assert_eq!(
        std::fs::read_dir(&work).unwrap().count(),
        0,
        "run data left behind"
    );
}

#[test]
fn a_missing_peer_binary_is_a_clear_error_and_leaves_nothing_behind() {
    let _serial = serial();
    let dir = Scratch::new("missing");
    let mut cmd = bench_with_minio(
        &dir.0,
        Path::new("/nonexistent/minio"),
        &["--scale", "0.01"],
    );
    let out = cmd.output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("/nonexistent/minio") && stderr.contains("does not exist"),
        "stderr: {stderr}"
    );
    let needle = dir.0.join("work").to_string_lossy().into_owned();
    assert!(processes_mentioning(&needle).is_empty());
    let left = std::fs::read_dir(dir.0.join("work")).map_or(0, |d| d.count());
    assert_eq!(left, 0, "run data left behind");
}
