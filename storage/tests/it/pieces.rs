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
