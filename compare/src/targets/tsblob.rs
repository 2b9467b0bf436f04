//! tsblob over its HTTP API (`docs/api.md`): single writes with `?ts=`, batches of record frames,
//! one streaming `GET .../query` per range read.

use std::time::Instant;

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use serde_json::{json, Value};

use super::tsblob_frames::{encode_end, encode_record, Decoder, Event};
use super::{
    http_client, ok_or_error, point_read_from, BatchRecord, PointRead, ReadOutcome, Target,
    TargetKind,
};
use crate::payload::StreamCheck;
use crate::workload::{mismatch, FifoSpec, SizePlan, CONTENT_TYPE};

const LABEL_PREFIX: &str = "x-tsblob-label-";
const FRAMES: &str = "application/x-tsblob-records";

/// A tsblob server at `base` (`http://host:port`), or the `limit` server, which answers the
/// same requests (`crate::limit`): one client for both, so both see the same request bytes.
pub struct Tsblob {
    base: String,
    http: reqwest::Client,
    concurrency: usize,
    kind: TargetKind,
}

impl Tsblob {
    /// A client for the server at `base`.
    pub fn new(base: &str, concurrency: usize) -> Result<Tsblob> {
        Ok(Tsblob {
            base: base.trim_end_matches('/').to_string(),
            http: http_client(concurrency)?,
            concurrency,
            kind: TargetKind::Tsblob,
        })
    }

    /// A client for the `limit` server at `base`.
    pub fn limit(base: &str, concurrency: usize) -> Result<Tsblob> {
        Ok(Tsblob {
            kind: TargetKind::Limit,
            ..Tsblob::new(base, concurrency)?
        })
    }

    fn record_url(&self, bucket: &str, entry: &str) -> String {
        format!("{}/api/v1/b/{bucket}/{entry}", self.base)
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
        let resp = self
            .http
            .get(format!("{}/query", self.record_url(bucket, &name)))
            .query(&[("start", start), ("stop", stop)])
            .query(
                &when
                    .map(|w| vec![("when", w.to_string())])
                    .unwrap_or_default(),
            )
            .send()
            .await?;
        let mut resp = ok_or_error(resp, "tsblob: query").await?;
        let mut out = ReadOutcome {
            requests: 1,
            ..ReadOutcome::default()
        };
        let mut dec = Decoder::default();
        let mut announced = None;
        let mut check: Option<StreamCheck> = None;
        let mut seen = Vec::new();
        while let Some(chunk) = resp.chunk().await? {
            out.ttfb.get_or_insert_with(|| t0.elapsed());
            dec.feed(&chunk, |event| {
                match event {
                    Event::Record { ts, labels, len } => {
                        if ts < start || ts >= stop {
                            return Err(mismatch(format!(
                                "tsblob returned {name} @ {ts} outside [{start}, {stop})"
                            )));
                        }
                        check = Some(plan.stream_check(entry, ts, len, Some(&labels))?);
                        seen.push(ts);
                        out.bytes += len;
                    }
                    Event::Payload(piece) => check
                        .as_mut()
                        .context("tsblob query stream: payload before a record head")?
                        .feed(piece)?,
                    Event::RecordDone => {
                        check
                            .take()
                            .context("tsblob query stream: record end without a head")?
                            .finish()?;
                        out.records += 1;
                    }
                    Event::End(n) => announced = Some(n),
                }
                Ok(())
            })?;
        }
        match announced {
            Some(n) if n == out.records && dec.pending() == 0 => Ok((out, seen)),
            Some(n) => bail!(
                "tsblob query stream: end frame says {n} records, {} received ({} bytes pending)",
                out.records,
                dec.pending()
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
            TargetKind::Limit => Err("the limit server has no index to filter on"),
            _ => Ok(()),
        }
    }

    fn fifo_support(&self) -> Result<(), &'static str> {
        match self.kind {
            TargetKind::Limit => Err("the limit server keeps nothing: no quota to hold"),
            _ => Ok(()),
        }
    }

    async fn version(&self) -> Result<String> {
        let resp = self
            .http
            .get(format!("{}/health", self.base))
            .send()
            .await?;
        let body: Value = ok_or_error(resp, "tsblob /health").await?.json().await?;
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
        let resp = self
            .http
            .post(format!("{}/api/v1/b/{bucket}", self.base))
            .json(&settings)
            .send()
            .await?;
        ok_or_error(resp, "tsblob: create bucket").await?;
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
        let mut req = self
            .http
            .post(self.record_url(bucket, entry))
            .query(&[("ts", ts)])
            .header("content-type", CONTENT_TYPE);
        for (k, v) in labels {
            req = req.header(format!("{LABEL_PREFIX}{k}"), v);
        }
        let resp = req.body(payload).send().await?;
        ok_or_error(resp, "tsblob: write").await?;
        Ok(())
    }

    async fn write_batch(
        &self,
        bucket: &str,
        entry: &str,
        records: Vec<BatchRecord>,
    ) -> Result<(u64, Option<String>)> {
        let mut body = Vec::new();
        for r in &records {
            encode_record(&mut body, r.ts, CONTENT_TYPE, &r.labels, &r.payload);
        }
        encode_end(&mut body, records.len() as u64);
        let resp = self
            .http
            .post(format!("{}/batch", self.record_url(bucket, entry)))
            .header("content-type", FRAMES)
            .body(body)
            .send()
            .await?;
        let answer: Value = ok_or_error(resp, "tsblob: batch write")
            .await?
            .json()
            .await?;
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
            .http
            .get(self.record_url(bucket, entry))
            .query(&[("ts", ts)])
            .send()
            .await?;
        point_read_from(resp, t0, "tsblob: read", LABEL_PREFIX).await
    }

    async fn bucket_size(&self, bucket: &str) -> Result<u64> {
        let resp = self
            .http
            .get(format!("{}/api/v1/b/{bucket}", self.base))
            .send()
            .await?;
        let body: Value = ok_or_error(resp, "tsblob: bucket info")
            .await?
            .json()
            .await?;
        body["info"]["size"]
            .as_u64()
            .context("tsblob bucket info has no info.size")
    }
}
