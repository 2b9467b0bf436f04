//! A 1 GiB record streamed into a real `tsblob serve` and back out (single GET and query),
//! generated and verified on the fly so that neither side holds it, while the server's
//! resident memory is sampled from /proc: it must stay bounded (< 200 MB).
#![allow(clippy::unwrap_used)]

use crate::common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use tsblob_proto::framing::{Decoder, Event};

const SIZE: u64 = 1 << 30;
const CHUNK: u64 = 1 << 20;
const RSS_LIMIT: u64 = 200 << 20;

/// Byte `i` of the record: a pattern that a shifted or repeated chunk would break.
fn byte_at(i: u64) -> u8 {
    ((i / CHUNK) as u8).wrapping_mul(31) ^ (i % 251) as u8
}

fn chunk(n: u64) -> Bytes {
    Bytes::from(
        (n * CHUNK..(n + 1) * CHUNK)
            .map(byte_at)
            .collect::<Vec<u8>>(),
    )
}

/// Checks streamed bytes against the pattern as they arrive.
struct Verifier {
    pos: u64,
}

impl Verifier {
    fn feed(&mut self, data: &[u8]) {
        for (k, b) in data.iter().enumerate() {
            let i = self.pos + k as u64;
            assert_eq!(*b, byte_at(i), "byte {i} differs");
        }
        self.pos += data.len() as u64;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_gib_record_streams_in_and_out_with_bounded_server_memory() {
    let s = common::Server::start(&[]);
    let c = reqwest::Client::new();
    assert_eq!(
        c.post(s.url("/api/v1/b/big"))
            .send()
            .await
            .unwrap()
            .status(),
        201
    );

    let peak = Arc::new(AtomicU64::new(0));
    let pid = s.pid();
    let sampler = {
        let peak = peak.clone();
        tokio::spawn(async move {
            loop {
                if let Some(rss) = tsblob_compare::spawn::rss_of(pid) {
                    peak.fetch_max(rss.now, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };

    let body =
        futures_util::stream::iter(0..SIZE / CHUNK).map(|n| Ok::<_, std::io::Error>(chunk(n)));
    let r = c
        .post(s.url("/api/v1/b/big/blob?ts=1"))
        .header("content-length", SIZE)
        .body(reqwest::Body::wrap_stream(body))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());

    let r = c
        .get(s.url("/api/v1/b/big/blob?ts=1"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.content_length(), Some(SIZE));
    let mut v = Verifier { pos: 0 };
    let mut stream = r.bytes_stream();
    while let Some(b) = stream.next().await {
        v.feed(&b.unwrap());
    }
    assert_eq!(v.pos, SIZE);

    let r = c
        .get(s.url("/api/v1/b/big/blob/query"))
        .send()
        .await
        .unwrap();
    let mut stream = r.bytes_stream();
    let (mut dec, mut buf, mut v, mut end) =
        (Decoder::new(), BytesMut::new(), Verifier { pos: 0 }, None);
    while let Some(b) = stream.next().await {
        buf.extend_from_slice(&b.unwrap());
        while let Some(ev) = dec.next(&mut buf).unwrap() {
            match ev {
                Event::Record(h) => assert_eq!(h.payload_len, SIZE),
                Event::Data(d) => v.feed(&d),
                Event::End(n) => end = Some(n),
                Event::Error(e) => panic!("{}", String::from_utf8_lossy(&e)),
                Event::Heartbeat(_) | Event::Skipped(_) => {}
            }
        }
        // The client side is bounded too: the decoder hands payload pieces out at once.
        assert!(buf.len() < 4 << 20);
    }
    assert_eq!((v.pos, end), (SIZE, Some(1)));

    sampler.abort();
    let (_, hwm) = s.rss();
    let peak = peak.load(Ordering::Relaxed).max(hwm);
    eprintln!(
        "server peak RSS while moving 3 GiB: {:.1} MB",
        peak as f64 / 1e6
    );
    assert!(peak > 0, "RSS could not be read from /proc");
    assert!(peak < RSS_LIMIT, "server RSS peaked at {peak} bytes");
}

/// The `THP_enabled` line of a process's /proc status (Linux 5.0 and later), if printed.
fn thp_enabled(pid: u32) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("THP_enabled:"))
        .map(|v| v.trim().to_string())
}

/// Bug "huge pages held the ingest's RSS" (issue 30): mimalloc advises 2 MiB pages on its
/// arenas, each resident while any small block in it lives, and a 10 GB ingest over 16
/// connections peaked at 155 MB of RSS, 90 MB of it in huge pages (96 MB without them,
/// docs/benchmarks/rss-2026-11-26.md). The server now runs with them off, unless
/// mimalloc's own `MIMALLOC_ALLOW_THP` asks for them.
#[cfg(target_os = "linux")]
#[test]
fn server_runs_without_the_huge_pages_that_held_ingest_rss() {
    let s = common::Server::start(&[]);
    if let Some(v) = thp_enabled(s.pid()) {
        assert_eq!(v, "0", "the server may use transparent huge pages");
    }
    let dir = tempfile::tempdir().unwrap();
    let s = common::Server::start_in_env(dir.path(), &[], &[("MIMALLOC_ALLOW_THP", "1")]);
    if let Some(v) = thp_enabled(s.pid()) {
        assert_eq!(v, "1", "MIMALLOC_ALLOW_THP=1 keeps huge pages");
    }
}
