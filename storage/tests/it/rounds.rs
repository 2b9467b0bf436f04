//! `Store::write_groups`: the server's writer thread writes the single writes queued while it
//! was busy as one round, one append per entry and one index commit for all of them (issue
//! 15: one LMDB transaction per entry made a 1 KiB write cost 37.5–44 µs of server CPU).
//! A bad part of a round fails alone; a failed shared commit cuts what every entry appended
//! and loses nothing acknowledged before; rounds that hold several entry locks at once
//! (taken by entry id) never deadlock with each other or with single writers.
#![allow(clippy::unwrap_used)]

use crate::common;
use common::*;
use std::collections::BTreeMap;
use std::sync::Arc;
use tsblob_storage::*;

type Rec<'a> = (&'a WriteMeta, &'a [Vec<u8>]);

fn pieces(ts: u64, len: usize) -> Vec<Vec<u8>> {
    let p = payload(ts, len);
    vec![p[..len / 2].to_vec(), p[len / 2..].to_vec()]
}

/// A round of six groups: two good entries (one of them new), one with a taken timestamp
/// and a bad label among good records, an unknown bucket, a bad entry name and a second
/// group of an entry already in the round. Each group gets its own outcome; every record
/// acknowledged reads back, also after an index rebuild from the block files; nothing
/// refused does.
#[test]
fn a_round_fails_only_its_bad_parts() {
    let dir = tempfile::tempdir().unwrap();
    let bad_labels = WriteMeta {
        labels: [("no spaces".to_string(), "x".to_string())].into(),
        ..meta(30)
    };
    let metas = [meta(10), meta(20), meta(1), bad_labels, meta(40), meta(50)];
    let datas: Vec<Vec<Vec<u8>>> = metas
        .iter()
        .map(|m| pieces(m.ts.unwrap_or(0), 1024))
        .collect();
    let recs: Vec<Rec> = metas
        .iter()
        .zip(&datas)
        .map(|(m, d)| (m, d.as_slice()))
        .collect();
    {
        let s = open(dir.path());
        s.create_bucket("b", BucketSettings::default()).unwrap();
        s.write("b", "old", &meta(1), &payload(1, 1024)).unwrap();
        s.write("b", "other", &meta(1), &payload(1, 1024)).unwrap();
        let groups: Vec<Group<'_, Vec<u8>>> = vec![
            ("b", "old", &recs[0..4]),  // 10, 20 stored; 1 taken; bad labels
            ("nope", "e", &recs[4..5]), // unknown bucket
            ("b", "new", &recs[0..2]),  // a new entry: 10, 20
            ("b", "bad name", &recs[4..5]),
            ("b", "old", &recs[4..6]), // the entry again: 40, 50 after the round
            ("b", "other", &recs[4..5]), // 40
        ];
        let out = s.write_groups(&groups);
        assert_eq!(out.len(), 6);
        let oks = |i: usize| -> Vec<Option<u64>> {
            out[i]
                .as_ref()
                .unwrap()
                .iter()
                .map(|r| r.as_ref().ok().copied())
                .collect()
        };
        assert_eq!(oks(0), [Some(10), Some(20), None, None]);
        let own = &out[0].as_ref().unwrap();
        assert!(matches!(
            own[2],
            Err(Error::Write(WriteError::Conflict { .. }))
        ));
        assert!(matches!(
            own[3],
            Err(Error::Write(WriteError::InvalidLabel(_)))
        ));
        assert!(
            matches!(out[1], Err(Error::NotFound(NotFound::Bucket(_)))),
            "{:?}",
            out[1].as_ref().err()
        );
        assert_eq!(oks(2), [Some(10), Some(20)]);
        assert!(
            matches!(out[3], Err(Error::Name(_))),
            "{:?}",
            out[3].as_ref().err()
        );
        assert_eq!(oks(4), [Some(40), Some(50)]);
        assert_eq!(oks(5), [Some(40)]);
    }
    let check = |s: &Store| {
        let want: BTreeMap<&str, Vec<u64>> = [
            ("old", vec![1, 10, 20, 40, 50]),
            ("new", vec![10, 20]),
            ("other", vec![1, 40]),
        ]
        .into();
        for (entry, ts) in want {
            assert_eq!(all_ts(s, "b", entry, &Query::default()), ts, "{entry}");
            for t in ts {
                assert_eq!(s.read("b", entry, Some(t)).unwrap().data, payload(t, 1024));
            }
        }
        assert!(s.read("b", "old", Some(30)).is_err());
    };
    check(&open(dir.path()));
    rebuild_index(dir.path(), &opts()).unwrap();
    check(&open(dir.path()));
}

/// Labels of ~32 KiB, distinct per record: each record's attrs take index pages of their
/// own, so a small LMDB map fills after a few rounds.
fn fat(ts: u64) -> WriteMeta {
    WriteMeta {
        labels: (0..8)
            .map(|i| (format!("k{i}"), format!("{ts}-{i}-").repeat(400)))
            .collect(),
        ..meta(ts)
    }
}

/// A shared commit that fails for real (the index's LMDB map is full: `MDB_MAP_FULL`)
/// fails every group of its round, and what each entry appended is cut: none of the
/// round's records is readable, nor comes back when the index is rebuilt from the block
/// files; every record acknowledged before (in earlier rounds) still reads back.
#[test]
fn a_failed_round_commit_cuts_every_entry_and_keeps_what_was_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let entries = ["e0", "e1", "e2", "e3"];
    let small = StoreOptions {
        map_size: 1 << 20,
        ..opts()
    };
    let mut acked: Vec<(&str, u64)> = Vec::new();
    let mut refused: Vec<(&str, u64)> = Vec::new();
    {
        let s = Store::open(dir.path(), small).unwrap();
        s.create_bucket("b", BucketSettings::default()).unwrap();
        for e in entries {
            s.write("b", e, &meta(1), &payload(1, 1024)).unwrap();
            acked.push((e, 1));
        }
        for round in 0..200u64 {
            let ts = [10 + 2 * round, 11 + 2 * round];
            let metas = [fat(ts[0]), fat(ts[1])];
            let datas = [pieces(ts[0], 1024), pieces(ts[1], 1024)];
            let recs: Vec<Rec> = metas
                .iter()
                .zip(&datas)
                .map(|(m, d)| (m, d.as_slice()))
                .collect();
            let groups: Vec<Group<'_, Vec<u8>>> =
                entries.iter().map(|e| ("b", *e, recs.as_slice())).collect();
            let out = s.write_groups(&groups);
            let failed = out.iter().filter(|o| o.is_err()).count();
            // One transaction: all groups committed, or none.
            assert!(
                failed == 0 || failed == entries.len(),
                "round {round}: {failed} groups failed"
            );
            for (e, o) in entries.iter().zip(&out) {
                match o {
                    Ok(rs) => {
                        assert!(rs.iter().all(Result::is_ok), "round {round}: {rs:?}");
                        acked.extend(ts.map(|t| (*e, t)));
                    }
                    Err(err) => {
                        assert!(err.to_string().contains("map"), "round {round}: {err}");
                        refused.extend(ts.map(|t| (*e, t)));
                    }
                }
            }
            if failed > 0 {
                break;
            }
        }
        assert!(!refused.is_empty(), "the map never filled up");
        assert!(
            acked.len() > entries.len(),
            "no round went through before the map filled"
        );
        for (e, t) in &refused {
            assert!(
                s.read("b", e, Some(*t)).is_err(),
                "{e}@{t} was refused but reads"
            );
        }
    }
    let check = |s: &Store, when: &str| {
        for (e, t) in &acked {
            let r = s
                .read("b", e, Some(*t))
                .unwrap_or_else(|err| panic!("{when}: {e}@{t}: {err}"));
            assert_eq!(r.data, payload(*t, 1024), "{when}: {e}@{t}");
        }
        for (e, t) in &refused {
            assert!(
                s.read("b", e, Some(*t)).is_err(),
                "{when}: refused {e}@{t} is back"
            );
        }
        for e in entries {
            let n = acked.iter().filter(|(a, _)| *a == e).count() as u64;
            assert_eq!(s.entry("b", e).unwrap().record_count, n, "{when}: {e}");
        }
    };
    check(&open(dir.path()), "reopened");
    rebuild_index(dir.path(), &opts()).unwrap();
    check(&open(dir.path()), "rebuilt");
}

/// Rounds over overlapping sets of entries (given in different orders) and single writers
/// of those entries, at once, under the deadlock detector: every write is acknowledged
/// and reads back. The rounds hold several entry locks at once, taken by entry id; debug
/// builds check that order on every acquisition.
#[test]
fn concurrent_rounds_and_single_writers_do_not_deadlock() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    s.create_bucket(
        "b",
        BucketSettings {
            max_block_records: 50,
            ..BucketSettings::default()
        },
    )
    .unwrap();
    let watch = DeadlockWatch::start();
    let names: Arc<Vec<String>> = Arc::new((0..8).map(|i| format!("e{i}")).collect());
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let (s, names) = (s.clone(), names.clone());
            std::thread::spawn(move || {
                let mut written = Vec::new();
                for i in 0..150u64 {
                    // Each thread owns the timestamps ≡ t (mod 4): no conflicts.
                    let ts = 1 + 4 * i + t;
                    let m = meta(ts);
                    let d = pieces(ts, 300);
                    let rec: [Rec; 1] = [(&m, d.as_slice())];
                    if t == 3 {
                        let e = &names[(i % 8) as usize];
                        s.write_pieces("b", e, &m, &d).unwrap();
                        written.push((e.clone(), ts));
                        continue;
                    }
                    // Three to five entries, forwards or backwards.
                    let mut pick: Vec<&String> = Vec::new();
                    for k in 0..3 + (i % 3) {
                        let e = &names[((i + k * (t + 1)) % 8) as usize];
                        if !pick.contains(&e) {
                            pick.push(e);
                        }
                    }
                    if (i + t) % 2 == 0 {
                        pick.reverse();
                    }
                    let groups: Vec<Group<'_, Vec<u8>>> =
                        pick.iter().map(|e| ("b", e.as_str(), &rec[..])).collect();
                    for (e, o) in pick.iter().zip(s.write_groups(&groups)) {
                        match o {
                            Ok(r) => {
                                assert_eq!(r.len(), 1);
                                assert_eq!(*r[0].as_ref().unwrap(), ts);
                                written.push(((*e).clone(), ts));
                            }
                            Err(err) => panic!("{e}@{ts}: {err}"),
                        }
                    }
                }
                written
            })
        })
        .collect();
    let mut written = Vec::new();
    for t in threads {
        written.extend(t.join().unwrap());
    }
    watch.finish();
    assert!(written.len() > 1000);
    for (e, ts) in &written {
        assert_eq!(
            s.read("b", e, Some(*ts)).unwrap().data,
            payload(*ts, 300),
            "{e}@{ts}"
        );
    }
    let total: u64 = names
        .iter()
        .map(|e| s.entry("b", e).unwrap().record_count)
        .sum();
    assert_eq!(total, written.len() as u64);
}

/// `Store::write_groups_at` (the server's batch writer thread): records of several groups
/// share one `WriteMeta` across groups and keep their own timestamps ("now" ones get
/// distinct ones), a second group of an entry follows the round in order, a group with a
/// bad entry name fails alone, and a taken timestamp fails only its record. All of it reads
/// back with the shared labels, also after an index rebuild.
#[test]
fn timed_groups_share_metas_keep_their_own_timestamps_and_fail_alone() {
    let dir = tempfile::tempdir().unwrap();
    let shared = WriteMeta {
        labels: [("cam".to_string(), "front".to_string())].into(),
        ..meta(0)
    };
    let other = WriteMeta {
        content_type: Some("text/plain".into()),
        ..meta(0)
    };
    let datas: Vec<Vec<Vec<u8>>> = (0..8u64).map(|i| pieces(100 + i, 700)).collect();
    let (sh, ot) = (&shared, &other);
    let rec = |ts: Option<u64>, m: &str, i: usize| -> (Option<u64>, &WriteMeta, &[Vec<u8>]) {
        (ts, if m == "shared" { sh } else { ot }, datas[i].as_slice())
    };
    let one: Vec<TimedRecord<'_, Vec<u8>>> = vec![
        rec(Some(100), "shared", 0),
        rec(Some(101), "other", 1),
        rec(Some(1), "shared", 2), // taken
        rec(Some(103), "shared", 3),
    ];
    let two: Vec<TimedRecord<'_, Vec<u8>>> = vec![rec(None, "shared", 4), rec(None, "other", 5)];
    let again: Vec<TimedRecord<'_, Vec<u8>>> = vec![rec(Some(200), "shared", 6)];
    let bad: Vec<TimedRecord<'_, Vec<u8>>> = vec![rec(Some(300), "shared", 7)];
    let now_ts;
    {
        let s = open(dir.path());
        s.create_bucket("b", BucketSettings::default()).unwrap();
        s.write("b", "e", &meta(1), &payload(1, 64)).unwrap();
        let groups: Vec<TimedGroup<'_, Vec<u8>>> = vec![
            ("b", "e", &one),
            ("b", "f", &two),
            ("b", "bad name", &bad),
            ("b", "e", &again),
        ];
        let out = s.write_groups_at(&groups);
        assert_eq!(out.len(), 4);
        let oks = |i: usize| -> Vec<Option<u64>> {
            out[i]
                .as_ref()
                .unwrap()
                .iter()
                .map(|r| r.as_ref().ok().copied())
                .collect()
        };
        assert_eq!(oks(0), [Some(100), Some(101), None, Some(103)]);
        assert!(matches!(
            out[0].as_ref().unwrap()[2],
            Err(Error::Write(WriteError::Conflict { .. }))
        ));
        let now = oks(1);
        assert!(
            now[0].is_some() && now[1].is_some() && now[0] < now[1],
            "{now:?}"
        );
        now_ts = [now[0].unwrap(), now[1].unwrap()];
        assert!(
            matches!(out[2], Err(Error::Name(_))),
            "{:?}",
            out[2].as_ref().err()
        );
        assert_eq!(oks(3), [Some(200)]);
    }
    let check = |s: &Store| {
        assert_eq!(
            all_ts(s, "b", "e", &Query::default()),
            [1, 100, 101, 103, 200]
        );
        assert_eq!(all_ts(s, "b", "f", &Query::default()), now_ts);
        for (entry, ts, i, m) in [
            ("e", 100, 0, &shared),
            ("e", 101, 1, &other),
            ("e", 103, 3, &shared),
            ("e", 200, 6, &shared),
            ("f", now_ts[0], 4, &shared),
            ("f", now_ts[1], 5, &other),
        ] {
            let r = s.read("b", entry, Some(ts)).unwrap();
            assert_eq!(r.data, datas[i].concat(), "{entry}@{ts}");
            assert_eq!(r.meta.labels, m.labels, "{entry}@{ts}");
            let ct = m.content_type.as_deref().unwrap_or(DEFAULT_CONTENT_TYPE);
            assert_eq!(r.meta.content_type, ct, "{entry}@{ts}");
        }
    };
    check(&open(dir.path()));
    rebuild_index(dir.path(), &opts()).unwrap();
    check(&open(dir.path()));
}

/// Bug (hostile probe of 2026-11-29): a write refused for its own record (a label value
/// over 4 KiB) still created its entry, empty, which counted against the entry cap: in a
/// round and alone alike. A group of which no record may be written creates nothing; a
/// group with one good record creates its entry as before.
#[test]
fn a_refused_write_left_an_empty_entry_behind() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    s.create_bucket("b", BucketSettings::default()).unwrap();
    let bad = WriteMeta {
        labels: [("k".to_string(), "v".repeat(5000))].into(),
        ..meta(1)
    };
    let r = s.write("b", "alone", &bad, b"x");
    assert!(
        matches!(r, Err(Error::Write(WriteError::InvalidLabel(_)))),
        "{r:?}"
    );
    let data = [b"x".to_vec()];
    let refused: Vec<Rec> = vec![(&bad, &data[..])];
    let good = meta(2);
    let mixed: Vec<Rec> = vec![(&bad, &data[..]), (&good, &data[..])];
    let out = s.write_groups(&[("b", "round", &refused[..]), ("b", "mixed", &mixed[..])]);
    let results = out[0].as_ref().unwrap();
    assert!(
        matches!(&results[0], Err(Error::Write(WriteError::InvalidLabel(_)))),
        "{results:?}"
    );
    let results = out[1].as_ref().unwrap();
    assert!(results[0].is_err() && results[1].is_ok(), "{results:?}");
    let names: Vec<String> = s
        .list_entries("b")
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, ["mixed"]);
}

/// Bug (probe of 2026-11-30): a write refused as older than its bucket's `max_age`
/// (`too_old`) still created its entry, empty, for good: the check ran under the entry's
/// lock, after the entry was made, so `all_refused` never saw it. Three stale writes into
/// new entries used up `--max-entries 3`, and a valid write into a fourth was refused.
/// A refused write into a new entry (alone, in a round, as a batch, streamed) leaves no
/// entry and takes no place under the cap.
#[test]
fn a_too_old_write_left_an_empty_entry_behind() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(
        dir.path(),
        StoreOptions {
            max_entries: 3,
            ..opts()
        },
    )
    .unwrap();
    let day = 86_400_000_000;
    s.create_bucket(
        "old",
        BucketSettings {
            max_age: Some(day),
            ..BucketSettings::default()
        },
    )
    .unwrap();
    let too_old = |r: &Result<u64>| matches!(r, Err(Error::Write(WriteError::TooOld { .. })));
    for e in ["a", "b", "c", "d"] {
        let r = s.write("old", e, &meta(1), b"x");
        assert!(too_old(&r), "{e}: {r:?}");
    }
    let stale = meta(1);
    let data = [b"x".to_vec()];
    let recs: Vec<Rec> = vec![(&stale, &data[..]), (&stale, &data[..])];
    let out = s.write_groups(&[("old", "round", &recs[..])]);
    let results = out[0].as_ref().unwrap();
    assert!(results.iter().all(too_old), "{results:?}");
    let batch = s
        .write_batch(
            "old",
            "batchy",
            [BatchRecord {
                meta: meta(1),
                data: b"x".to_vec(),
            }],
        )
        .unwrap();
    assert!(batch.iter().all(too_old), "{batch:?}");
    let mut spool = s.spool("old").unwrap();
    spool.append(&vec![7u8; 200_000]).unwrap();
    let r = s.write_spooled("old", "streamed", &meta(1), spool);
    assert!(too_old(&r), "{r:?}");
    assert!(s.list_entries("old").unwrap().is_empty());
    let now = now_micros();
    for e in ["good", "good2", "good3"] {
        s.write("old", e, &meta(now), b"x").unwrap();
    }
}
