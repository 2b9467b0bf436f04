//! `Store::write_pieces`: a payload given as the buffers it arrived in (the server's
//! in-memory path for single-record bodies) is stored exactly as its concatenation: the
//! frame's CRC covers every piece (a rebuild from the block files alone finds the records
//! whole), small and large pieces mix (small ones are copied behind the head, pieces of
//! 16 KiB and more are appended from the caller's buffers in the same `pwritev`), and a
//! compressed bucket compresses the joined payload.
#![allow(clippy::unwrap_used)]

use crate::common;

use common::*;
use tsblob_storage::*;

/// `len` bytes of `payload(ts, len)` cut into pieces of the given sizes (cycled).
fn cut(data: &[u8], sizes: &[usize]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut at = 0;
    for size in sizes.iter().cycle() {
        if at >= data.len() {
            break;
        }
        let end = (at + size).min(data.len());
        out.push(data[at..end].to_vec());
        at = end;
    }
    out
}

#[test]
fn pieced_writes_read_back_whole_and_survive_a_rebuild() {
    let dir = tempfile::tempdir().unwrap();
    // (ts, payload length, piece sizes): one piece, tiny pieces only, large pieces only,
    // small and large mixed, an empty piece among them, and an empty payload.
    let cases: [(u64, usize, &[usize]); 6] = [
        (1, 1000, &[1000]),
        (2, 50_000, &[700, 3]),
        (3, 3 << 20, &[1 << 20, 300_000]),
        (4, 1_500_000, &[5, 70_000, 16 << 10, 1]),
        (5, 40_000, &[0, 20_000]),
        (6, 0, &[]),
    ];
    {
        let s = open(dir.path());
        s.create_bucket("b", BucketSettings::default()).unwrap();
        let z = BucketSettings {
            compression: Compression::Zstd { level: 3 },
            ..BucketSettings::default()
        };
        s.create_bucket("z", z).unwrap();
        for (ts, len, sizes) in cases {
            let data = payload(ts, len);
            let mut pieces = cut(&data, sizes);
            if ts == 5 {
                pieces.insert(1, Vec::new());
            }
            assert_eq!(s.write_pieces("b", "e", &meta(ts), &pieces).unwrap(), ts);
            assert_eq!(
                s.read("b", "e", Some(ts)).unwrap().data,
                data,
                "record {ts}"
            );
        }
        // Compressible text in pieces, into a zstd bucket: stored compressed, read whole.
        let text: Vec<u8> = (0..4000)
            .map(|i| format!("{{\"seq\":{i},\"msg\":\"sensor ok\"}}\n"))
            .collect::<String>()
            .into_bytes();
        s.write_pieces("z", "logs", &meta(9), &cut(&text, &[20_000, 999]))
            .unwrap();
        assert_eq!(s.read("z", "logs", Some(9)).unwrap().data, text);
        let info = s.entry("z", "logs").unwrap();
        assert!(
            info.size < text.len() as u64 / 2,
            "stored compressed: {} of {}",
            info.size,
            text.len()
        );
    }
    rebuild_index(dir.path(), &opts()).unwrap();
    let s = open(dir.path());
    for (ts, len, _) in cases {
        assert_eq!(s.read("b", "e", Some(ts)).unwrap().data, payload(ts, len));
    }
    assert_eq!(s.entry("b", "e").unwrap().record_count, cases.len() as u64);
    let text: Vec<u8> = (0..4000)
        .map(|i| format!("{{\"seq\":{i},\"msg\":\"sensor ok\"}}\n"))
        .collect::<String>()
        .into_bytes();
    assert_eq!(s.read("z", "logs", Some(9)).unwrap().data, text);
}

/// `Store::write_group` (the server's writer thread: concurrent single writes of one entry
/// in one append and one commit): a record that fails (a timestamp already stored, one
/// repeated inside the group, bad labels) fails alone, the others are stored and read back
/// whole, also after a rebuild from the block files; a bad entry name fails the group.
#[test]
fn a_group_write_fails_only_the_records_that_fail() {
    let dir = tempfile::tempdir().unwrap();
    let bad_labels = WriteMeta {
        labels: [("no spaces".to_string(), "x".to_string())].into(),
        ..meta(7)
    };
    let metas = [meta(3), meta(5), meta(3), bad_labels, meta(9), meta(1)];
    let datas: Vec<Vec<Vec<u8>>> = metas
        .iter()
        .map(|m| cut(&payload(m.ts.unwrap_or(0), 3000), &[1000, 20_000]))
        .collect();
    {
        let s = open(dir.path());
        s.create_bucket("b", BucketSettings::default()).unwrap();
        s.write("b", "e", &meta(1), &payload(1, 3000)).unwrap();
        let group: Vec<(&WriteMeta, &[Vec<u8>])> = metas
            .iter()
            .zip(&datas)
            .map(|(m, d)| (m, d.as_slice()))
            .collect();
        let results = s.write_group("b", "e", &group).unwrap();
        let oks: Vec<Option<u64>> = results.iter().map(|r| r.as_ref().ok().copied()).collect();
        assert_eq!(oks, [Some(3), Some(5), None, None, Some(9), None]);
        for (i, r) in results.iter().enumerate() {
            if let Err(e) = r {
                let conflict = matches!(e, Error::Write(WriteError::Conflict { .. }));
                let label = matches!(e, Error::Write(WriteError::InvalidLabel(_)));
                assert!(if i == 3 { label } else { conflict }, "record {i}: {e}");
            }
        }
        assert!(s.write_group("b", "bad name", &group[..1]).is_err());
    }
    rebuild_index(dir.path(), &opts()).unwrap();
    let s = open(dir.path());
    for ts in [1, 3, 5, 9] {
        assert_eq!(s.read("b", "e", Some(ts)).unwrap().data, payload(ts, 3000));
    }
    assert_eq!(s.entry("b", "e").unwrap().record_count, 4);
}

/// `Store::write_group_at` (the batch route's write): records given one shared `WriteMeta`
/// beside their own timestamps (its `ts` not read) each get their own timestamp and the
/// meta's content type and labels, read back alike before and after a reopen and a
/// rebuild; a meta with a bad label fails each of its records (and only them); a reserved
/// timestamp fails its record; more distinct metas than the engine remembers by address
/// (16) taking turns still land each on its own records.
#[test]
fn records_sharing_one_meta_keep_their_own_timestamps_and_the_meta_labels() {
    let dir = tempfile::tempdir().unwrap();
    let front = WriteMeta {
        ts: Some(999),
        content_type: Some("image/jpeg".into()),
        labels: labels(&[("cam", "front"), ("seq", "a")]),
    };
    let back = WriteMeta {
        ts: None,
        content_type: None,
        labels: labels(&[("cam", "back")]),
    };
    let bad = WriteMeta {
        ts: None,
        content_type: None,
        labels: labels(&[("bad key!", "x")]),
    };
    let turns: Vec<WriteMeta> = (0..20)
        .map(|i| WriteMeta {
            ts: None,
            content_type: None,
            labels: labels(&[("cam", "turn"), ("i", &i.to_string())]),
        })
        .collect();
    let data: Vec<Vec<u8>> = (0..100u64).map(|ts| payload(ts, 100)).collect();
    let one = |ts: u64| std::slice::from_ref(&data[ts as usize]);
    let mut group: Vec<TimedRecord<'_, Vec<u8>>> = vec![
        (Some(1), &front, one(1)),
        (Some(2), &back, one(2)),
        (Some(3), &front, one(3)),
        (Some(4), &bad, one(4)),
        (Some(5), &bad, one(5)),
        (Some(u64::MAX), &back, one(6)),
        (Some(2), &front, one(7)),
        (Some(6), &back, one(8)),
    ];
    for i in 0..60u64 {
        group.push((Some(10 + i), &turns[(i % 20) as usize], one(10 + i)));
    }
    group.push((None, &front, one(9)));
    let check = |s: &Store, now_ts: u64| {
        for (ts, want) in [(1, &front), (2, &back), (3, &front), (6, &back)] {
            let r = s.read("b", "e", Some(ts)).unwrap();
            assert_eq!(r.meta.labels, want.labels, "record {ts}");
            assert_eq!(
                Some(r.meta.content_type.as_str()),
                want.content_type.as_deref().or(Some(DEFAULT_CONTENT_TYPE)),
                "record {ts}"
            );
        }
        assert_eq!(s.read("b", "e", Some(2)).unwrap().data, data[2]);
        assert_eq!(s.read("b", "e", Some(6)).unwrap().data, data[8]);
        for i in 0..60u64 {
            let r = s.read("b", "e", Some(10 + i)).unwrap();
            assert_eq!(r.meta.labels, turns[(i % 20) as usize].labels, "turn {i}");
            assert_eq!(r.data, data[10 + i as usize]);
        }
        let r = s.read("b", "e", Some(now_ts)).unwrap();
        assert_eq!(r.meta.labels, front.labels);
        assert_eq!(r.data, data[9]);
        assert!(s.read("b", "e", Some(4)).is_err() && s.read("b", "e", Some(5)).is_err());
        assert!(
            s.read("b", "e", Some(999)).is_err(),
            "the meta's own ts is not read"
        );
        assert_eq!(s.entry("b", "e").unwrap().record_count, 65);
    };
    let now_ts = {
        let s = open(dir.path());
        s.create_bucket("b", BucketSettings::default()).unwrap();
        let results = s.write_group_at("b", "e", &group).unwrap();
        assert_eq!(results.len(), group.len());
        for (i, want) in [(0, 1), (1, 2), (2, 3), (7, 6)] {
            assert_eq!(*results[i].as_ref().unwrap(), want, "record {i}");
        }
        for i in [3, 4] {
            assert!(
                matches!(&results[i], Err(Error::Write(WriteError::InvalidLabel(_)))),
                "{:?}",
                results[i]
            );
        }
        assert!(
            matches!(
                &results[5],
                Err(Error::Write(WriteError::InvalidTimestamp { .. }))
            ),
            "{:?}",
            results[5]
        );
        assert!(
            matches!(
                &results[6],
                Err(Error::Write(WriteError::Conflict { ts: 2, .. }))
            ),
            "{:?}",
            results[6]
        );
        let now_ts = *results.last().unwrap().as_ref().unwrap();
        assert!(now_ts > 69);
        check(&s, now_ts);
        now_ts
    };
    check(&open(dir.path()), now_ts);
    rebuild_index(dir.path(), &opts()).unwrap();
    check(&open(dir.path()), now_ts);
}
