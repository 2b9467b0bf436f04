//! Criterion benchmarks of the record framing (`tsblob_proto::framing`): decoding a query
//! stream of 100 KiB records as it arrives in 64 KiB chunks, with the server's `Decoder`
//! (chunks appended to a `BytesMut`: one copy of every payload byte) and with the clients'
//! `ChunkDecoder` (payloads handed on as slices of the chunks), and encoding a batch.
//! `cargo bench -p tsblob-benches --bench framing`.
#![allow(clippy::unwrap_used)]

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::time::Duration;
use tsblob_benches::payload;
use tsblob_proto::framing::{put_end, put_record, ChunkDecoder, Decoder, Event};
use tsblob_proto::Labels;

const RECORDS: u64 = 200;
const SIZE: usize = 100 << 10;
const CHUNK: usize = 64 << 10;

/// A query stream of `RECORDS` records of `SIZE` bytes, cut into `CHUNK`-byte chunks as
/// hyper hands them over.
fn stream() -> Vec<Bytes> {
    let labels: Labels = [("cam".to_string(), "front".to_string())].into();
    let data = payload(7, SIZE);
    let mut body = BytesMut::new();
    for ts in 0..RECORDS {
        put_record(&mut body, ts, "image/jpeg", &labels, &data);
    }
    put_end(&mut body, RECORDS);
    let body = body.freeze();
    (0..body.len())
        .step_by(CHUNK)
        .map(|at| body.slice(at..(at + CHUNK).min(body.len())))
        .collect()
}

/// Payload bytes seen; a checksum-like fold so the pieces are read.
fn count(e: &Event, bytes: &mut u64) {
    if let Event::Data(d) = e {
        *bytes += d.len() as u64 + u64::from(d[d.len() - 1]);
    }
}

fn decode(c: &mut Criterion) {
    let chunks = stream();
    let total: usize = chunks.iter().map(Bytes::len).sum();
    let mut g = c.benchmark_group("decode");
    g.measurement_time(Duration::from_secs(3)).sample_size(20);
    g.throughput(Throughput::Bytes(total as u64));
    g.bench_function("decoder_bytesmut/100KiB", |b| {
        b.iter(|| {
            let (mut d, mut buf, mut bytes) = (Decoder::new(), BytesMut::new(), 0u64);
            for chunk in &chunks {
                buf.extend_from_slice(chunk);
                while let Some(e) = d.next(&mut buf).unwrap() {
                    count(&e, &mut bytes);
                }
            }
            assert!(d.is_done());
            bytes
        })
    });
    g.bench_function("chunk_decoder/100KiB", |b| {
        b.iter(|| {
            let (mut d, mut bytes) = (ChunkDecoder::new(), 0u64);
            for chunk in &chunks {
                d.push(chunk.clone());
                while let Some(e) = d.next_event().unwrap() {
                    count(&e, &mut bytes);
                }
            }
            assert!(d.is_done());
            bytes
        })
    });
    g.finish();
}

fn encode(c: &mut Criterion) {
    let labels: Labels = [("cam".to_string(), "front".to_string())].into();
    let data = payload(7, 1024);
    let mut g = c.benchmark_group("encode");
    g.measurement_time(Duration::from_secs(3)).sample_size(20);
    g.throughput(Throughput::Elements(1000));
    g.bench_function("batch1000/1KiB", |b| {
        b.iter(|| {
            let mut body = BytesMut::with_capacity(1000 * 1100);
            for ts in 0..1000 {
                put_record(&mut body, ts, "", &labels, &data);
            }
            put_end(&mut body, 1000);
            body.len()
        })
    });
    g.finish();
}

criterion_group!(benches, decode, encode);
criterion_main!(benches);
