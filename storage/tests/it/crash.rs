//! Crash consistency, tested on purpose: a child process writes records (single, batched
//! and streamed, several threads and entries) and prints each acknowledged one; the parent
//! kills it with SIGKILL at a random moment, reopens the store and checks that every
//! acknowledged record reads back byte-identical and that nothing reads back corrupted.
//! `TSBLOB_CRASH_CYCLES` sets the number of kill cycles (default 50).
#![allow(clippy::unwrap_used)]

use crate::common;
use common::*;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tsblob_storage::*;

const ENTRIES: [&str; 3] = ["cam", "lidar", "imu/raw"];

/// Not a test of its own: the body of the child process (it returns at once unless the
/// parent set `TSBLOB_CRASH_DIR`).
#[test]
fn crash_child_writer() {
    let Ok(dir) = std::env::var("TSBLOB_CRASH_DIR") else {
        return;
    };
    let cycle: u64 = std::env::var("TSBLOB_CRASH_CYCLE")
        .unwrap()
        .parse()
        .unwrap();
    let sync = match cycle % 3 {
        0 => SyncPolicy::Always,
        1 => SyncPolicy::default(),
        _ => SyncPolicy::Never,
    };
    let s = Store::open(&dir, StoreOptions { sync, ..opts() }).unwrap();
    let _ = s.create_bucket(
        "b",
        BucketSettings {
            max_block_size: 256 << 10,
            ..BucketSettings::default()
        },
    );
    let out = std::sync::Arc::new(std::sync::Mutex::new(std::io::stdout()));
    let threads: Vec<_> = (0..3u64)
        .map(|t| {
            let s = s.clone();
            let out = out.clone();
            std::thread::spawn(move || {
                let entry = ENTRIES[t as usize];
                let mut rng = (cycle + 1) * 7919 + t;
                for i in 0.. {
                    rng = rng
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let ts = (cycle + 1) * 1_000_000_000_000 + t * 10_000_000_000 + i * 10;
                    let len = match rng >> 60 {
                        0 => 600_000 + (rng >> 40) as usize % 400_000, // streamed, multi-chunk
                        1..=3 => 20_000 + (rng >> 40) as usize % 50_000,
                        _ => 100 + (rng >> 40) as usize % 3000,
                    };
                    let acked: Vec<(u64, usize)> = if rng >> 62 == 3 {
                        let recs: Vec<BatchRecord> = (0..5u64)
                            .map(|j| BatchRecord {
                                meta: meta(ts + j),
                                data: payload(ts + j, len / 5),
                            })
                            .collect();
                        let res = s.write_batch("b", entry, recs).unwrap();
                        res.into_iter().map(|r| (r.unwrap(), len / 5)).collect()
                    } else if len >= 600_000 {
                        let data = payload(ts, len);
                        s.write_stream("b", entry, &meta(ts), &mut data.as_slice(), None)
                            .unwrap();
                        vec![(ts, len)]
                    } else {
                        s.write("b", entry, &meta(ts), &payload(ts, len)).unwrap();
                        vec![(ts, len)]
                    };
                    let mut o = out.lock().unwrap();
                    for (ts, len) in acked {
                        writeln!(o, "ack {t} {ts} {len}").unwrap();
                    }
                    o.flush().unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn sigkill_at_random_moments_loses_no_acknowledged_record() {
    let cycles: u64 = std::env::var("TSBLOB_CRASH_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut acked: Vec<(usize, u64, usize)> = Vec::new();
    let mut seed = 0x1234_5678u64;
    let started = Instant::now();
    for cycle in 0..cycles {
        let mut child = Command::new(&exe)
            .args([
                "crash::crash_child_writer",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("TSBLOB_CRASH_DIR", dir.path())
            .env("TSBLOB_CRASH_CYCLE", cycle.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
        let run_for = Duration::from_millis(30 + (seed >> 33) % 300);
        let reader = std::thread::spawn(move || {
            let mut lines = Vec::new();
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                lines.push(line);
            }
            lines
        });
        std::thread::sleep(run_for);
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let lines = reader.join().unwrap();
        let before = acked.len();
        for l in lines {
            let parts: Vec<&str> = l.split(' ').collect();
            // A line cut by the kill is not a complete acknowledgement; skip it.
            if parts.len() == 4 && parts[0] == "ack" {
                if let (Ok(t), Ok(ts), Ok(len)) =
                    (parts[1].parse(), parts[2].parse(), parts[3].parse())
                {
                    acked.push((t, ts, len));
                }
            }
        }
        let s = open(dir.path());
        // This cycle's acknowledgements now; all of them once more at the end.
        verify_acked(&s, &acked[before..], cycle);
        verify_no_corruption(&s, (cycle + 1) * 1_000_000_000_000, cycle);
        eprintln!(
            "cycle {cycle}: ran {run_for:?}, {} new acks, {} in all, {} repairs",
            acked.len() - before,
            acked.len(),
            s.recovery_report().events.len()
        );
    }
    let s = open(dir.path());
    verify_acked(&s, &acked, cycles);
    verify_no_corruption(&s, 0, cycles);
    assert!(
        acked.len() as u64 > cycles,
        "the child acknowledged too little to test anything: {}",
        acked.len()
    );
    eprintln!(
        "{cycles} kill cycles, {} acknowledged records verified in {:?}",
        acked.len(),
        started.elapsed()
    );
}

fn verify_acked(s: &Store, acked: &[(usize, u64, usize)], cycle: u64) {
    for (t, ts, len) in acked {
        let r = s.read("b", ENTRIES[*t], Some(*ts)).unwrap_or_else(|e| {
            panic!(
                "cycle {cycle}: acknowledged record {ts} of {} lost: {e}",
                ENTRIES[*t]
            )
        });
        assert_eq!(
            r.data.len(),
            *len,
            "cycle {cycle}: record {ts} has the wrong length"
        );
        assert!(
            r.data == payload(*ts, *len),
            "cycle {cycle}: record {ts} reads back different bytes"
        );
    }
}

/// Nothing stored from `start` on may read back corrupted, acknowledged or not.
fn verify_no_corruption(s: &Store, start: u64, cycle: u64) {
    for entry in ENTRIES {
        let Ok(iter) = s.query(
            "b",
            entry,
            &Query {
                start: Some(start),
                ..Query::default()
            },
        ) else {
            continue;
        };
        for item in iter {
            let item = item.unwrap();
            let data = item
                .data()
                .unwrap_or_else(|e| panic!("cycle {cycle}: {entry} {}: {e}", item.meta.ts));
            assert!(
                data == payload(item.meta.ts, data.len()),
                "cycle {cycle}: corrupted record {}",
                item.meta.ts
            );
        }
    }
}
