//! Crash consistency at the HTTP level (issue #7): concurrent clients write to a real
//! `tsblob serve` (single records and batches, three entries, sizes from 100 bytes to
//! 3 MB) while a reader runs range queries; the server is killed with SIGKILL at a random
//! moment, restarted on the same data folder with no repair step, and every record it
//! acknowledged must read back byte-identical; no query may ever return a payload that is
//! not what was written.
//!
//! `TSBLOB_CRASH_CYCLES` sets the number of kill cycles (default 50, what CI runs;
//! `reliability/crash_cycles.sh` runs 1,000 against a release build) and
//! `TSBLOB_CRASH_SEED` replays a run (the seed is printed).
#![allow(clippy::unwrap_used)]

use crate::common;
use crate::reliability_util;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Server;
use rand::{Rng, SeedableRng};
use reliability_util::*;

const ENTRIES: [&str; 3] = ["cam", "lidar", "imu/raw"];
const WRITERS: u64 = 4;
const BASE_TS: u64 = 1_000_000_000_000;
/// Each cycle writes timestamps in its own window, so a cycle's records can be queried alone.
const CYCLE_SPAN: u64 = 10_000_000_000;
/// Above this many acknowledged bytes, the oldest cycles are removed (over HTTP) so that a
/// 1,000-cycle run stays within a small disk.
const KEEP_BYTES: usize = 256 << 20;

/// One acknowledged record.
#[derive(Clone, Copy, Debug)]
struct Acked {
    entry: usize,
    ts: u64,
    len: usize,
    cycle: u64,
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn record_url(s: &Server, entry: usize, ts: u64) -> String {
    s.url(&format!("/api/v1/b/b/{}?ts={ts}", ENTRIES[entry]))
}

fn query_url(s: &Server, entry: usize, start: u64, stop: u64) -> String {
    s.url(&format!(
        "/api/v1/b/b/{}/query?start={start}&stop={stop}",
        ENTRIES[entry]
    ))
}

/// Length of the next record: mostly small, some tens of KB, now and then multi-MB (the
/// server streams those in chunks, so a kill lands inside one regularly). Over 4 MiB they
/// are spooled, and a spool becomes a block of its own (`storage/src/link.rs`): a kill
/// can land between its link and its index commit too.
fn pick_len(rng: &mut impl Rng) -> usize {
    match rng.random_range(0..64) {
        0 => rng.random_range(4_300_000..6_000_000),
        1 => rng.random_range(1_000_000..3_000_000),
        2..=17 => rng.random_range(20_000..70_000),
        _ => rng.random_range(100..3_000),
    }
}

/// Writes until the first failure (the kill) or `stop`; pushes what the server acknowledged.
async fn writer(
    c: reqwest::Client,
    base: String,
    w: u64,
    cycle: u64,
    seed: u64,
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<Acked>>>,
) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ (cycle << 8) ^ w);
    let entry = (w % ENTRIES.len() as u64) as usize;
    let name = ENTRIES[entry];
    let mut next_ts = BASE_TS + cycle * CYCLE_SPAN + w * (CYCLE_SPAN / WRITERS);
    while !stop.load(Ordering::Relaxed) {
        if rng.random_range(0..4) == 0 {
            let recs: Vec<(u64, usize)> = (0..rng.random_range(2..9))
                .map(|i| (next_ts + i * 10, pick_len(&mut rng)))
                .collect();
            next_ts += 10 * recs.len() as u64;
            let r = c
                .post(format!("{base}/api/v1/b/b/{name}/batch"))
                .header("content-type", "application/x-tsblob-records")
                .body(batch_body(&recs))
                .send()
                .await;
            let Ok(r) = r else { return };
            if r.status() != 200 {
                return;
            }
            let Ok(v) = r.json::<serde_json::Value>().await else {
                return;
            };
            let results = v["results"].as_array().cloned().unwrap_or_default();
            assert_eq!(results.len(), recs.len(), "batch answer {v}");
            let mut a = acked.lock().unwrap();
            for (res, &(ts, len)) in results.iter().zip(&recs) {
                if res["status"] == 201 {
                    assert_eq!(res["ts"], ts, "batch answer {v}");
                    a.push(Acked {
                        entry,
                        ts,
                        len,
                        cycle,
                    });
                }
            }
        } else {
            let (ts, len) = (next_ts, pick_len(&mut rng));
            next_ts += 10;
            let r = c
                .post(format!("{base}/api/v1/b/b/{name}?ts={ts}"))
                .body(payload(ts, len))
                .send()
                .await;
            // Only a whole 201 answer is an acknowledgement.
            let Ok(r) = r else { return };
            if r.status() != 201 || r.bytes().await.is_err() {
                return;
            }
            acked.lock().unwrap().push(Acked {
                entry,
                ts,
                len,
                cycle,
            });
        }
    }
}

/// Queries earlier cycles while the writers run: a cut stream is fine (the kill), a wrong
/// payload never is.
async fn reader(c: reqwest::Client, s_base: String, upto: u64, stop: Arc<AtomicBool>, seed: u64) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    while !stop.load(Ordering::Relaxed) && upto > 0 {
        let entry = rng.random_range(0..ENTRIES.len());
        let cycle = rng.random_range(0..upto);
        let start = BASE_TS + cycle * CYCLE_SPAN;
        let url = format!(
            "{s_base}/api/v1/b/b/{}/query?start={start}&stop={}",
            ENTRIES[entry],
            start + CYCLE_SPAN
        );
        match checked_query(&c, &url).await {
            Ok(_) | Err(QueryError::Status(404, _)) => {}
            Err(QueryError::Transport(_)) => return,
            Err(e) => panic!("query during writes: {e:?}"),
        }
    }
}

/// Every acknowledged record of `recs` reads back byte-identical by point read.
async fn check_point_reads(c: &reqwest::Client, s: &Server, recs: &[Acked]) {
    for a in recs {
        let r = c.get(record_url(s, a.entry, a.ts)).send().await.unwrap();
        assert_eq!(
            r.status(),
            200,
            "acknowledged record lost: {a:?}: {}",
            r.text().await.unwrap_or_default()
        );
        let data = r.bytes().await.unwrap();
        if let Some(p) = payload_problem(a.ts, &data) {
            panic!("acknowledged record {a:?} reads back wrong: {p}");
        }
        assert_eq!(data.len(), a.len.max(MIN_PAYLOAD), "{a:?}");
    }
}

/// Queries `[start, stop)` of every entry: every payload must check, and every acknowledged
/// record of the window must be there. Returns the number of records seen.
async fn check_window(
    c: &reqwest::Client,
    s: &Server,
    start: u64,
    stop: u64,
    acked: &[Acked],
) -> usize {
    let mut seen = 0;
    for entry in 0..ENTRIES.len() {
        let got = match checked_query(c, &query_url(s, entry, start, stop)).await {
            Ok(g) => g,
            Err(QueryError::Status(404, _)) => Vec::new(), // entry never written yet
            Err(e) => panic!("query after restart: {e:?}"),
        };
        let have: std::collections::HashSet<u64> = got.iter().map(|g| g.0).collect();
        for a in acked
            .iter()
            .filter(|a| a.entry == entry && (start..stop).contains(&a.ts))
        {
            assert!(
                have.contains(&a.ts),
                "acknowledged {a:?} missing from the query"
            );
        }
        seen += got.len();
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_during_http_writes_loses_no_acknowledged_record() {
    let cycles = env_u64("TSBLOB_CRASH_CYCLES", 50);
    let seed = env_u64("TSBLOB_CRASH_SEED", rand::random());
    println!("crash cycles: {cycles}, seed {seed} (TSBLOB_CRASH_SEED replays it)");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let c = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let mut acked: Vec<Acked> = Vec::new();
    let mut first_kept_cycle = 0u64;
    let (mut repaired_starts, mut acked_total, mut acked_bytes) = (0u64, 0usize, 0usize);
    let started = Instant::now();
    for cycle in 0..=cycles {
        let sync = ["always", "periodic", "never"][(cycle % 3) as usize];
        // Starting is the "no manual repair" check: Server::start panics if it cannot.
        let s = Server::start_in(dir.path(), &["--sync", sync, "--free-space-reserve", "0"]);
        if s.stderr_contains("recovery:", Duration::from_millis(0)) {
            repaired_starts += 1;
        }
        if cycle == 0 {
            let r = c
                .post(s.url("/api/v1/b/b"))
                .body(r#"{"max_block_size": 262144}"#)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 201);
        } else {
            // The previous cycle's acknowledged records by point read, its window by query.
            let prev: Vec<Acked> = acked
                .iter()
                .filter(|a| a.cycle == cycle - 1)
                .copied()
                .collect();
            check_point_reads(&c, &s, &prev).await;
            let start = BASE_TS + (cycle - 1) * CYCLE_SPAN;
            check_window(&c, &s, start, start + CYCLE_SPAN, &prev).await;
        }
        if cycle % 10 == 0 || cycle == cycles {
            // Everything kept so far, by query (streamed, one record in memory at a time).
            let n = check_window(&c, &s, 0, u64::MAX - 1, &acked).await;
            assert!(n >= acked.len());
        }
        if cycle == cycles {
            break;
        }
        let kept: usize = acked.iter().map(|a| a.len).sum();
        if kept > KEEP_BYTES {
            // Remove the older half of the cycles kept (a range delete per entry).
            first_kept_cycle += (cycle - first_kept_cycle) / 2;
            let stop = BASE_TS + first_kept_cycle * CYCLE_SPAN;
            for e in ENTRIES {
                let r = c
                    .delete(s.url(&format!("/api/v1/b/b/{e}/query?stop={stop}")))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 200, "{}", r.text().await.unwrap_or_default());
            }
            acked.retain(|a| a.cycle >= first_kept_cycle);
        }

        let stop = Arc::new(AtomicBool::new(false));
        let new_acked = Arc::new(Mutex::new(Vec::new()));
        let base = s.url("");
        let mut tasks: Vec<_> = (0..WRITERS)
            .map(|w| {
                tokio::spawn(writer(
                    c.clone(),
                    base.clone(),
                    w,
                    cycle,
                    seed,
                    stop.clone(),
                    new_acked.clone(),
                ))
            })
            .collect();
        tasks.push(tokio::spawn(reader(
            c.clone(),
            base,
            cycle,
            stop.clone(),
            seed ^ cycle,
        )));
        tokio::time::sleep(Duration::from_millis(rng.random_range(100..1500))).await;
        sigkill(s.pid());
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            // A panic inside a task (a wrong payload, a bad batch answer) fails the test here.
            tokio::time::timeout(Duration::from_secs(60), t)
                .await
                .expect("a client hung after the kill")
                .unwrap();
        }
        drop(s);
        let new = std::mem::take(&mut *new_acked.lock().unwrap());
        acked_total += new.len();
        acked_bytes += new.iter().map(|a| a.len).sum::<usize>();
        acked.extend(new);
        if (cycle + 1) % 50 == 0 {
            println!(
                "  {} cycles, {:.0} s, {acked_total} records acknowledged so far",
                cycle + 1,
                started.elapsed().as_secs_f64()
            );
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{cycles} SIGKILL cycles in {secs:.0} s: {acked_total} records ({:.1} MB) acknowledged, \
         all read back byte-identical; {repaired_starts} restarts logged a repair",
        acked_bytes as f64 / 1e6
    );
    assert!(
        acked_total > cycles as usize,
        "the writers hardly wrote anything"
    );
}
