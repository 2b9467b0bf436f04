//! How a range read's answer reaches the socket (issue 30): a query step is written as ONE
//! HTTP chunk of its pieces (heads and payload slices gathered by `writev`), not a chunk
//! per piece, and not copied into one buffer first.
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::time::Duration;

use crate::reliability_cost::{call, metric, start};
use crate::reliability_util::{batch_body, decode_query, payload};

/// The chunks of a chunked HTTP/1.1 answer: (status, each chunk's length, the body).
fn chunked_answer(raw: &[u8]) -> (u16, Vec<usize>, Vec<u8>) {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
    let status = head[9..12].parse().unwrap();
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    let (mut at, mut sizes, mut body) = (end + 4, Vec::new(), Vec::new());
    loop {
        let line = raw[at..].windows(2).position(|w| w == b"\r\n").unwrap();
        let size =
            usize::from_str_radix(std::str::from_utf8(&raw[at..at + line]).unwrap(), 16).unwrap();
        at += line + 2;
        if size == 0 {
            return (status, sizes, body);
        }
        body.extend_from_slice(&raw[at..at + size]);
        assert_eq!(&raw[at + size..at + size + 2], b"\r\n", "a chunk's CRLF");
        at += size + 2;
        sizes.push(size);
    }
}

/// Bug "range answers were written a chunk per piece" (issue 30): a record whose payload
/// was sent from its block's mapping (16 KiB and more) was two body frames, its head and
/// its payload, and hyper wrote each frame as a chunk of its own and flushed every 16 of
/// them: 200 records of 20 KiB were 400 chunks and ~25 `writev`s, which cost more records/s
/// than copying (`docs/benchmarks/range-slices-2026-11-26.md`). Now each step is one chunk
/// of its pieces: a handful for the whole answer, every record intact and in order, and
/// the bytes counted in `tsblob_http_sent_bytes_total`.
#[test]
fn range_answers_were_written_a_chunk_per_piece() {
    let (_s, a) = start(&[]);
    assert_eq!(
        call(&a, "POST", "/api/v1/b/b", b"", Duration::from_secs(20)).0,
        201
    );
    let (n, size) = (200u64, 20 << 10);
    let records: Vec<(u64, usize)> = (1..=n).map(|ts| (ts, size)).collect();
    let (status, answer) = call(
        &a,
        "POST",
        "/api/v1/b/b/e/batch",
        &batch_body(&records),
        Duration::from_secs(60),
    );
    assert_eq!(status, 200, "{answer}");
    let sent_before = metric(&a, "tsblob_http_sent_bytes_total");
    let mut tcp = std::net::TcpStream::connect(&a).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    tcp.write_all(
        b"GET /api/v1/b/b/e/query HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nAuthorization: Bearer cost-admin\r\n\r\n",
    )
    .unwrap();
    let mut raw = Vec::new();
    tcp.read_to_end(&mut raw).unwrap();
    let (status, chunks, body) = chunked_answer(&raw);
    assert_eq!(status, 200);
    let got = decode_query(&body).unwrap();
    assert_eq!(got.len() as u64, n);
    for (g, ts) in got.iter().zip(1..) {
        assert_eq!(g.ts, ts);
        assert!(g.data == payload(ts, size), "record {ts} intact");
    }
    // 4 MiB: a few steps (the first stops at 256 KiB, then up to 4 MiB or 4 block
    // windows each), not 400 chunks of a head or a payload each
    assert!(chunks.len() <= 10, "{} chunks: {chunks:?}", chunks.len());
    let sent = metric(&a, "tsblob_http_sent_bytes_total") - sent_before;
    assert!(
        sent >= body.len() as i64,
        "{sent} bytes counted of {}",
        body.len()
    );
}
