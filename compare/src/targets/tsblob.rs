//! tsblob over its HTTP API (`docs/api.md`): single writes with `?ts=`, batches of record frames,
//! one streaming `GET .../query` per range read.

use std::time::Instant;

use anyhow::{bail, Context, Result};
use bytes::{Bytes, BytesMut};
use serde_json::json;
use tsblob_proto::client::{entry_path, Client};
use tsblob_proto::framing::{put_end, put_record, Event, MEDIA_TYPE as FRAMES};
use tsblob_proto::headers::LABEL_PREFIX;

use super::{
    http_client, point_read_from, BatchRecord, PointRead, ReadOutcome, Target, TargetKind,
};
use crate::payload::StreamCheck;
use crate::workload::{mismatch, FifoSpec, SizePlan, CONTENT_TYPE};

/// A tsblob server at `base` (`http://host:port`).
/// A tsblob server, or the `limit` server, which answers the same requests
/// (`crate::limit`): one client for both, so both see the same request bytes.
pub struct Tsblob {
    client: Client,
    concurrency: usize,
    kind: TargetKind,
}

impl Tsblob {
    /// A client for the server at `base` (tsblob-proto's, over a pool sized to the load).
    pub fn new(base: &str, concurrency: usize) -> Result<Tsblob> {
        Ok(Tsblob {
            client: Client::with_http(http_client(concurrency)?, base, None),
            concurrency,
            kind: TargetKind::Tsblob,
        })
    }

    /// A client for a limit server (`kind`: `limit` or `limit-store`) at `base`.
    pub fn limit(kind: TargetKind, base: &str, concurrency: usize) -> Result<Tsblob> {
        Ok(Tsblob {
            kind,
            ..Tsblob::new(base, concurrency)?
        })
    }
}

impl Tsblob {
    /// One streamed query, every record verified; with `when`, a condition. Answers the
    /// outcome and the timestamps returned.
    async fn stream_query(
        &self,
        bucket: &str,
        plan: &SizePlan,
        entry: u32,
        (start, stop): (u64, u64),
        when: Option<&serde_json::Value>,
    ) -> Result<(ReadOutcome, Vec<u64>)> {
        let t0 = Instant::now();
        let name = plan.entry_name(entry);
        let mut params = vec![
            ("start".to_string(), start.to_string()),
            ("stop".to_string(), stop.to_string()),
        ];
        if let Some(w) = when {
            params.push(("when".to_string(), w.to_string()));
        }
        let path = format!("{}/query", entry_path(bucket, &name));
        let mut stream = self
            .client
            .query(&path, &params)
            .await
            .context("tsblob: query")?;
        let mut out = ReadOutcome {
            requests: 1,
            ..ReadOutcome::default()
        };
        let mut announced = None;
        let mut check: Option<StreamCheck> = None;
        let mut seen = Vec::new();
        while let Some(event) = stream.next_event().await? {
            out.ttfb.get_or_insert_with(|| t0.elapsed());
            match event {
                Event::Record(head) => {
                    let ts = head.ts;
                    if ts < start || ts >= stop {
                        return Err(mismatch(format!(
                            "tsblob returned {name} @ {ts} outside [{start}, {stop})"
                        )));
                    }
                    let labels: Vec<(String, String)> = head.labels.into_iter().collect();
                    check = Some(plan.stream_check(entry, ts, head.payload_len, Some(&labels))?);
                    seen.push(ts);
                    out.bytes += head.payload_len;
                }
                Event::Data(piece) => check
                    .as_mut()
                    .context("tsblob query stream: payload before a record head")?
                    .feed(&piece)?,
                Event::End(n) => announced = Some(n),
                Event::Heartbeat(_) | Event::Skipped(_) => {}
                Event::Error(json) => bail!(
                    "tsblob ended the query stream with an error frame: {}",
                    String::from_utf8_lossy(&json)
                ),
            }
            // A record is complete when its payload is: at the next frame boundary.
            if stream.at_frame_boundary() {
                if let Some(c) = check.take() {
                    c.finish()?;
                    out.records += 1;
                }
            }
        }
        match announced {
            Some(n) if n == out.records && stream.buffered() == 0 => Ok((out, seen)),
            Some(n) => bail!(
                "tsblob query stream: end frame says {n} records, {} received ({} bytes pending)",
                out.records,
                stream.buffered()
            ),
            None => bail!("tsblob query stream ended without an end frame (truncated response)"),
        }
    }
}

impl Target for Tsblob {
    fn kind(&self) -> TargetKind {
        self.kind
    }

    fn when_support(&self) -> Result<(), &'static str> {
        match self.kind {
            k if k.is_limit() => Err("the limit server has no index to filter on"),
            _ => Ok(()),
        }
    }

    fn fifo_support(&self) -> Result<(), &'static str> {
        match self.kind {
            k if k.is_limit() => Err("the limit server has no quota to hold"),
            _ => Ok(()),
        }
    }

    async fn version(&self) -> Result<String> {
        let body = self.client.health().await.context("tsblob /health")?;
        Ok(body["version"].as_str().unwrap_or("unknown").to_string())
    }

    fn client_settings(&self) -> String {
        format!(
            "reqwest 0.13, HTTP/1.1, pool of {} idle connections per host; single writes POST \
             ?ts= with x-tsblob-label-* headers; batches POST .../batch ({FRAMES}); range reads \
             one streaming GET .../query",
            self.concurrency
        )
    }

    async fn create_bucket(&self, bucket: &str, fifo: Option<&FifoSpec>) -> Result<()> {
        let settings = match fifo {
            Some(f) => json!({"quota_type": "fifo", "quota_size": f.quota_bytes,
                              "max_block_size": f.block_bytes, "compression": "none"}),
            None => json!({"quota_type": "none", "compression": "none"}),
        };
        self.client
            .create_bucket(bucket, &settings)
            .await
            .context("tsblob: create bucket")?;
        Ok(())
    }

    async fn write_one(
        &self,
        bucket: &str,
        entry: &str,
        ts: u64,
        labels: &[(String, String)],
        payload: Bytes,
    ) -> Result<()> {
        self.client
            .write(bucket, entry, Some(ts), CONTENT_TYPE, labels, payload)
            .await
            .context("tsblob: write")?;
        Ok(())
    }

    async fn write_batch(
        &self,
        bucket: &str,
        entry: &str,
        records: Vec<BatchRecord>,
    ) -> Result<(u64, Option<String>)> {
        let size: usize = records.iter().map(|r| 64 + r.payload.len()).sum();
        let mut body = BytesMut::with_capacity(size);
        for r in &records {
            put_record(&mut body, r.ts, CONTENT_TYPE, &r.labels, &r.payload);
        }
        put_end(&mut body, records.len() as u64);
        let answer = self
            .client
            .write_batch(bucket, entry, body.freeze())
            .await
            .context("tsblob: batch write")?;
        let failed = answer["failed"]
            .as_u64()
            .context("tsblob batch answer has no `failed` count")?;
        let first = answer["results"]
            .as_array()
            .and_then(|r| r.iter().find(|x| x.get("error").is_some()))
            .map(|x| format!("tsblob: batch record failed: {x}"));
        Ok((failed, first))
    }

    async fn query(
        &self,
        bucket: &str,
        plan: &SizePlan,
        entry: u32,
        start: u64,
        stop: u64,
        _parallel: usize,
    ) -> Result<ReadOutcome> {
        Ok(self
            .stream_query(bucket, plan, entry, (start, stop), None)
            .await?
            .0)
    }

    async fn query_when(
        &self,
        bucket: &str,
        plan: &SizePlan,
        entry: u32,
        start: u64,
        stop: u64,
        when: &serde_json::Value,
    ) -> Result<(ReadOutcome, Vec<u64>)> {
        self.stream_query(bucket, plan, entry, (start, stop), Some(when))
            .await
    }

    async fn read_point(&self, bucket: &str, entry: &str, ts: u64) -> Result<PointRead> {
        let t0 = Instant::now();
        let resp = self
            .client
            .read(bucket, entry, Some(ts))
            .await
            .context("tsblob: read")?;
        point_read_from(resp, t0, "tsblob: read", LABEL_PREFIX).await
    }

    async fn bucket_size(&self, bucket: &str) -> Result<u64> {
        let body = self
            .client
            .bucket(bucket)
            .await
            .context("tsblob: bucket info")?;
        body["info"]["size"]
            .as_u64()
            .context("tsblob bucket info has no info.size")
    }
}
