//! `tsblob loadgen` (hidden): drives one tsblob server over HTTP with N connections and
//! prints records/s, MB/s, latency percentiles and, given `--server-pid`, the server's peak
//! RSS. The figures in `docs/benchmarks/http-*.md` come from it (`server/bench/http_bench.sh`);
//! every loop is bounded by `--count`. It shares the bench's statistics ([`Stats`]:
//! hdrhistogram), seeded RNG ([`crate::workload::rng`]) and process readings
//! ([`crate::spawn::rss_of`]); the CLI entry (`server/src/cli/app.rs`) adds where to connect.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bytes::BytesMut;
use reqwest::Method;

use crate::spawn::{rss_of, rss_parts};
use crate::stats::Stats;
use crate::workload::{below, rng};
use tsblob_proto::client::Client;
use tsblob_proto::framing::{put_end, put_record, Event};
use tsblob_proto::parse_size;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// One record per POST.
    Post,
    /// `--batch` records per POST to /batch.
    Batch,
    /// Random point reads of records written before with the same --ts-base/--count.
    Get,
    /// One streaming query over the whole entry.
    Query,
}

#[derive(Debug, clap::Args)]
pub struct LoadArgs {
    #[arg(long, value_enum)]
    pub mode: Mode,
    #[arg(long, default_value = "loadgen")]
    pub bucket: String,
    #[arg(long, default_value = "e")]
    pub entry: String,
    /// Payload size of each record.
    #[arg(long, default_value = "1KiB", value_parser = parse_size)]
    pub size: u64,
    /// Concurrent connections.
    #[arg(long, default_value_t = 1)]
    pub conns: usize,
    /// Records to write (post, batch) or requests to make (get).
    #[arg(long, default_value_t = 10_000)]
    pub count: u64,
    /// Records per batch request.
    #[arg(long, default_value_t = 1000)]
    pub batch: u64,
    /// Timestamp of record i is ts_base + i.
    #[arg(long, default_value_t = 1_000_000)]
    pub ts_base: u64,
    /// Report this process's peak RSS (the server's pid).
    #[arg(long)]
    pub server_pid: Option<u32>,
}

/// Runs the load `args` describe against the server `client` talks to.
pub async fn run(client: Client, args: LoadArgs) -> anyhow::Result<()> {
    let client = Arc::new(client);
    let entry_path = tsblob_proto::client::entry_path(&args.bucket, &args.entry);
    if matches!(args.mode, Mode::Post | Mode::Batch) {
        // Create the bucket if needed; an existing one is fine.
        let r = client
            .request(
                Method::POST,
                &tsblob_proto::client::bucket_path(&args.bucket),
            )
            .send()
            .await
            .context("cannot reach the server")?;
        if !(r.status().is_success() || r.status().as_u16() == 409) {
            bail!("cannot create bucket {}: {}", args.bucket, r.status());
        }
    }
    let peak = Arc::new(AtomicU64::new(0));
    let sampler = args.server_pid.map(|pid| {
        let peak = peak.clone();
        tokio::spawn(async move {
            loop {
                if let Some(rss) = rss_of(pid) {
                    peak.fetch_max(rss.now, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    });
    let payload = bytes::Bytes::from((0..args.size).map(|i| (i % 251) as u8).collect::<Vec<u8>>());
    let started = Instant::now();
    let (records, bytes, lat) = match args.mode {
        Mode::Query => query(&client, &entry_path).await?,
        _ => workers(&args, client.clone(), &entry_path, payload).await?,
    };
    let elapsed = started.elapsed().as_secs_f64();
    if let Some(s) = sampler {
        s.abort();
    }
    println!(
        "mode={:?} size={} conns={} records={records} time={elapsed:.2}s rate={:.0} rec/s throughput={:.1} MB/s",
        args.mode,
        if args.mode == Mode::Query { "as stored".to_string() } else { args.size.to_string() },
        if args.mode == Mode::Query { 1 } else { args.conns },
        records as f64 / elapsed,
        bytes as f64 / elapsed / 1e6
    );
    let lat = &lat.latency;
    if !lat.is_empty() {
        println!(
            "latency per request: p50={}µs p95={}µs p99={}µs max={}µs (n={})",
            lat.value_at_quantile(0.50),
            lat.value_at_quantile(0.95),
            lat.value_at_quantile(0.99),
            lat.max(),
            lat.len()
        );
    }
    if let Some(pid) = args.server_pid {
        let rss = rss_of(pid).unwrap_or_default();
        println!(
            "server pid {pid}: RSS now {:.1} MB ({}), peak sampled {:.1} MB, VmHWM {:.1} MB",
            rss.now as f64 / 1e6,
            rss_parts(pid),
            peak.load(Ordering::Relaxed) as f64 / 1e6,
            rss.peak as f64 / 1e6
        );
    }
    Ok(())
}

/// Records, payload bytes, and the requests' latencies (µs, hdrhistogram).
type Outcome = (u64, u64, Stats);

async fn workers(
    args: &LoadArgs,
    client: Arc<Client>,
    entry_path: &str,
    payload: bytes::Bytes,
) -> anyhow::Result<Outcome> {
    let conns = args.conns.max(1) as u64;
    let per_request = if args.mode == Mode::Batch {
        args.batch.max(1)
    } else {
        1
    };
    let requests = args.count.div_ceil(per_request);
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for w in 0..conns {
        let (client, next, payload) = (client.clone(), next.clone(), payload.clone());
        let (mode, ts_base, count, path) =
            (args.mode, args.ts_base, args.count, entry_path.to_string());
        let (bucket, entry) = (args.bucket.clone(), args.entry.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Stats::default();
            let (mut records, mut bytes) = (0u64, 0u64);
            let mut rng = rng(0x5EED ^ w);
            loop {
                let r = next.fetch_add(1, Ordering::Relaxed);
                if r >= requests {
                    break;
                }
                let t0 = Instant::now();
                match mode {
                    Mode::Post => {
                        let req = client
                            .request(Method::POST, &path)
                            .query(&[("ts", ts_base + r)])
                            .body(payload.clone());
                        client.send(req).await?;
                        records += 1;
                        bytes += payload.len() as u64;
                    }
                    Mode::Batch => {
                        let first = r * per_request;
                        let n = per_request.min(count - first);
                        let mut body = BytesMut::with_capacity((n as usize) * (payload.len() + 32));
                        for i in 0..n {
                            put_record(
                                &mut body,
                                ts_base + first + i,
                                "",
                                &tsblob_proto::Labels::new(),
                                &payload,
                            );
                        }
                        put_end(&mut body, n);
                        let v = client.write_batch(&bucket, &entry, body.freeze()).await?;
                        if v["failed"].as_u64() != Some(0) {
                            bail!(
                                "a batch had failures: {}",
                                v["results"]
                                    .as_array()
                                    .and_then(|r| r.iter().find(|x| x["status"] != 201))
                                    .cloned()
                                    .unwrap_or_default()
                            );
                        }
                        records += n;
                        bytes += n * payload.len() as u64;
                    }
                    Mode::Get => {
                        let i = below(&mut rng, count);
                        let resp = client
                            .send(
                                client
                                    .request(Method::GET, &path)
                                    .query(&[("ts", ts_base + i)]),
                            )
                            .await?;
                        let body = resp.bytes().await?;
                        records += 1;
                        bytes += body.len() as u64;
                    }
                    Mode::Query => unreachable!("query runs on its own"),
                }
                lat.latency(t0.elapsed());
            }
            anyhow::Ok((records, bytes, lat))
        }));
    }
    let (mut records, mut bytes, mut lat) = (0, 0, Stats::default());
    for t in tasks {
        let (r, b, l) = t.await.context("a load task panicked")??;
        records += r;
        bytes += b;
        lat.merge(&l);
    }
    Ok((records, bytes, lat))
}

async fn query(client: &Client, entry_path: &str) -> anyhow::Result<Outcome> {
    let t0 = Instant::now();
    let mut stream = client.query(&format!("{entry_path}/query"), &[]).await?;
    let first_byte = t0.elapsed().as_micros() as u64;
    let (mut records, mut bytes) = (0u64, 0u64);
    let mut end = None;
    while let Some(ev) = stream.next_event().await? {
        match ev {
            Event::Record(_) => records += 1,
            Event::Data(d) => bytes += d.len() as u64,
            Event::End(n) => end = Some(n),
            Event::Heartbeat(_) | Event::Skipped(_) => {}
            Event::Error(e) => bail!("query failed: {}", String::from_utf8_lossy(&e)),
        }
    }
    if end != Some(records) {
        bail!("the query stream ended without a matching end frame");
    }
    println!("time to first byte: {first_byte}µs");
    Ok((records, bytes, Stats::default()))
}
