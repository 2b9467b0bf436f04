//! `tsblob bench --against limit,limit-store --repeat N`: the real `tsblob` binary spawns
//! itself as the `limit` and `limit-store` servers (`tsblob bench-limit [--store]`) next to
//! a real tsblob server, on a tiny workload.
//!
//! No speed is asserted. What is asserted: every phase the limit server can answer ran on it
//! with every record read back verified against the seed (so it really sent the records'
//! bytes), the phases it cannot answer are n/a with a reason, each cell holds one records/s
//! per round and the median round's result, tsblob's cells carry their percentage of each
//! limit, `limit` stores nothing while `limit-store` stores every written byte, and no limit
//! server is left running.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::Command;

use tsblob_compare::report::Report;
use tsblob_compare::targets::TargetKind;
use tsblob_compare::workload::Phase;

const WORKLOAD: &str = r#"
seed = 11
sizes = [1024, 40000]
records_per_size = 40
entries = 2
concurrency = 4
batch_size = 8
labels = 2
single_fraction = 0.5
sub_windows = 3
point_reads = 10
phases = ["write-single", "write-batch", "range-whole", "range-sub", "range-when", "point-read"]
"#;

fn scratch() -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let p = std::env::temp_dir().join(format!(
        "tsblob-compare-limit-{}-{nanos}",
        std::process::id()
    ));
    std::fs::create_dir_all(&p).unwrap();
    p
}

fn limit_servers_running(work: &str) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains("bench-limit") && cmdline.contains(work) {
            out.push(cmdline);
        }
    }
    out
}

#[test]
fn limit_target_serves_verified_bytes_and_repeats_report_the_median_round() {
    let dir = scratch();
    let workload = dir.join("tiny.toml");
    std::fs::write(&workload, WORKLOAD).unwrap();
    let json = dir.join("r.json");
    let out = Command::new(env!("CARGO_BIN_EXE_tsblob"))
        .args([
            "bench",
            "--against",
            "limit,limit-store",
            "--repeat",
            "3",
            "--no-progress",
        ])
        .arg("--workload")
        .arg(&workload)
        .arg("--work-dir")
        .arg(dir.join("work"))
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "tsblob bench failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let report = Report::from_json(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let kinds: Vec<TargetKind> = report.targets.iter().map(|t| t.kind).collect();
    assert_eq!(
        kinds,
        [
            TargetKind::Tsblob,
            TargetKind::Limit,
            TargetKind::LimitStore
        ]
    );

    let cell = |phase, size, target| {
        report
            .cells
            .iter()
            .find(|c| c.phase == phase && c.size == size && c.target == target)
            .unwrap_or_else(|| panic!("no cell {phase:?} {size} {target:?}"))
    };
    for size in [1024, 40000] {
        for phase in [
            Phase::WriteSingle,
            Phase::WriteBatch,
            Phase::RangeWhole,
            Phase::RangeSub,
            Phase::PointRead,
        ] {
            let t = cell(phase, size, TargetKind::Tsblob);
            let r = t.result.as_ref().unwrap();
            for kind in [TargetKind::Limit, TargetKind::LimitStore] {
                let limit = cell(phase, size, kind);
                let l = limit
                    .result
                    .as_ref()
                    .unwrap_or_else(|| panic!("{kind:?} {phase:?} {size} n/a: {:?}", limit.reason));
                assert_eq!(
                    l.errors, 0,
                    "{kind:?} {phase:?} {size}: {:?}",
                    l.first_error
                );
                assert!(l.records > 0);
                if phase.is_read() {
                    assert_eq!(l.verified, l.records, "every record read back is checked");
                }
                // One figure per round, and the result is the median round's.
                for c in [t, limit] {
                    assert_eq!(c.repeats.len(), 3, "{phase:?} {size} {:?}", c.target);
                    let mut sorted = c.repeats.clone();
                    sorted.sort_by(f64::total_cmp);
                    assert_eq!(c.result.as_ref().unwrap().records_per_s, sorted[1]);
                }
                let pct = match kind {
                    TargetKind::Limit => t.pct_of_limit,
                    _ => t.pct_of_limit_store,
                };
                let pct = pct.unwrap_or_else(|| panic!("tsblob cells carry % of {kind:?}"));
                let want = r.records_per_s / l.records_per_s * 100.0;
                assert!((pct - want).abs() < 1e-9 * want.max(1.0), "{pct} vs {want}");
                assert!(limit.pct_of_limit.is_none() && limit.pct_of_limit_store.is_none());
            }
        }
        // What the limit servers cannot do is n/a, with the reason.
        for kind in [TargetKind::Limit, TargetKind::LimitStore] {
            let when = cell(Phase::RangeWhen, size, kind);
            assert!(when.result.is_none());
            assert!(when.reason.as_deref().unwrap().contains("no index"));
        }
    }
    // The limit's data folder did not grow: writes were discarded (its records are read
    // from memory). The limit-store's grew by at least every payload byte written.
    let disk = |kind| report.disk.iter().filter(move |d| d.target == kind);
    assert_eq!(disk(TargetKind::Limit).count(), 2);
    assert!(disk(TargetKind::Limit).all(|d| d.disk_bytes == Some(0)));
    assert_eq!(disk(TargetKind::LimitStore).count(), 2);
    for d in disk(TargetKind::LimitStore) {
        assert!(
            d.disk_bytes.unwrap() >= d.payload_bytes,
            "limit-store stored {:?} of {} payload bytes",
            d.disk_bytes,
            d.payload_bytes
        );
    }
    let work = dir.join("work").display().to_string();
    assert!(limit_servers_running(&work).is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}
