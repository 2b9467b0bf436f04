//! ReductStore through its HTTP API v1, used as its documentation describes: single records by
//! `POST /api/v1/b/{bucket}/{entry}?ts=`, batches by `POST .../batch` with one
//! `x-reduct-time-<ts>: <size>,<content-type>,<labels>` header per record and the payloads
//! concatenated in time order, range reads by `POST .../q` then `GET .../batch?q=<id>` until
//! `x-reduct-last: true` (or 204).

use std::time::Instant;

use anyhow::{bail, Context, Result};
use bytes::{Bytes, BytesMut};
use serde_json::{json, Value};

use super::{
    http_client, labels_from_headers, ok_or_error, point_read_from, BatchRecord, PointRead,
    ReadOutcome, Target, TargetKind,
};
use crate::payload::StreamCheck;
use crate::workload::{mismatch, FifoSpec, SizePlan, CONTENT_TYPE};

const LABEL_PREFIX: &str = "x-reduct-label-";
const TIME_PREFIX: &str = "x-reduct-time-";
const ERROR_PREFIX: &str = "x-reduct-error-";

/// A ReductStore server at `base`.
pub struct Reductstore {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
    concurrency: usize,
}

impl Reductstore {
    /// A client for the server at `base`, with an API token when auth is on.
    pub fn new(base: &str, token: Option<String>, concurrency: usize) -> Result<Reductstore> {
        Ok(Reductstore {
            base: base.trim_end_matches('/').to_string(),
            token,
            http: http_client(concurrency)?,
            concurrency,
        })
    }

    fn req(&self, method: reqwest::Method, url: String) -> reqwest::RequestBuilder {
        let req = self.http.request(method, url);
        match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    fn entry_url(&self, bucket: &str, entry: &str) -> String {
        format!("{}/api/v1/b/{bucket}/{entry}", self.base)
    }
}

/// A record announced by a batched read's headers: timestamp, size, labels.
type BatchedMeta = (u64, u64, Vec<(String, String)>);

/// Parses a batched-record header value: `<size>,<content type>[,k=v | k="v,w"]*`.
fn parse_record_header(value: &str) -> Result<(u64, Vec<(String, String)>)> {
    let (size, rest) = value.split_once(',').unwrap_or((value, ""));
    let size: u64 = size
        .trim()
        .parse()
        .with_context(|| format!("ReductStore batch header {value:?}: bad size"))?;
    let mut labels = Vec::new();
    let mut rest = rest.split_once(',').map(|(_, r)| r).unwrap_or("");
    while let Some((key, value)) = rest.split_once('=') {
        let key = key.trim().to_string();
        if let Some(quoted) = value.strip_prefix('"') {
            let (v, r) = quoted.split_once('"').unwrap_or((quoted, ""));
            labels.push((key, v.to_string()));
            rest = r.trim_start_matches(',');
        } else {
            let (v, r) = value.split_once(',').unwrap_or((value, ""));
            labels.push((key, v.trim().to_string()));
            rest = r;
        }
    }
    // Computed labels (`@name`) are the server's, not the record's.
    labels.retain(|(k, _)| !k.starts_with('@'));
    Ok((size, labels))
}

impl Reductstore {
    /// One query (its batches read in turn), every record verified; with `when`, a
    /// condition. Answers the outcome and the timestamps returned.
    async fn batched_query(
        &self,
        bucket: &str,
        plan: &SizePlan,
        entry: u32,
        (start, stop): (u64, u64),
        when: Option<&Value>,
    ) -> Result<(ReadOutcome, Vec<u64>)> {
        let t0 = Instant::now();
        let name = plan.entry_name(entry);
        let url = self.entry_url(bucket, &name);
        let resp = self
            .req(reqwest::Method::POST, format!("{url}/q"))
            .json(&match when {
                None => json!({"query_type": "QUERY", "start": start, "stop": stop}),
                Some(w) => json!({"query_type": "QUERY", "start": start, "stop": stop, "when": w}),
            })
            .send()
            .await?;
        let info: Value = ok_or_error(resp, "ReductStore: query")
            .await?
            .json()
            .await?;
        let id = info["id"]
            .as_u64()
            .context("ReductStore query answer has no id")?;
        let mut out = ReadOutcome {
            requests: 1,
            ..ReadOutcome::default()
        };
        let mut seen = Vec::new();
        loop {
            let resp = self
                .req(reqwest::Method::GET, format!("{url}/batch"))
                .query(&[("q", id)])
                .send()
                .await?;
            out.requests += 1;
            if resp.status() == reqwest::StatusCode::NO_CONTENT {
                break;
            }
            let mut resp = ok_or_error(resp, "ReductStore: batched read").await?;
            let last = resp
                .headers()
                .get("x-reduct-last")
                .is_some_and(|v| v.as_bytes() == b"true");
            let mut records: Vec<BatchedMeta> = Vec::new();
            for (key, value) in resp.headers() {
                let Some(ts) = key.as_str().strip_prefix(TIME_PREFIX) else {
                    continue;
                };
                let ts: u64 = ts.parse().with_context(|| format!("bad header {key}"))?;
                let (size, labels) = parse_record_header(value.to_str().unwrap_or_default())?;
                records.push((ts, size, labels));
            }
            // Headers come as a map; the body follows time order.
            records.sort_by_key(|r| r.0);
            seen.extend(records.iter().map(|r| r.0));
            let mut split = BodySplit::new(&records, plan, entry, start..stop);
            while let Some(chunk) = resp.chunk().await? {
                out.ttfb.get_or_insert_with(|| t0.elapsed());
                split.feed(&chunk, &mut out)?;
            }
            split.finish(&mut out)?;
            if last {
                break;
            }
        }
        Ok((out, seen))
    }
}

impl Target for Reductstore {
    fn kind(&self) -> TargetKind {
        TargetKind::Reductstore
    }

    async fn version(&self) -> Result<String> {
        let resp = self
            .req(reqwest::Method::GET, format!("{}/api/v1/info", self.base))
            .send()
            .await?;
        let body: Value = ok_or_error(resp, "ReductStore /api/v1/info")
            .await?
            .json()
            .await?;
        Ok(body["version"].as_str().unwrap_or("unknown").to_string())
    }

    fn client_settings(&self) -> String {
        format!(
            "HTTP API v1 through reqwest 0.13, HTTP/1.1, pool of {} idle connections per host; \
             batches POST .../batch with x-reduct-time-* headers; range reads POST .../q then \
             GET .../batch?q= until x-reduct-last; auth {}",
            self.concurrency,
            if self.token.is_some() {
                "bearer token"
            } else {
                "off"
            }
        )
    }

    async fn create_bucket(&self, bucket: &str, fifo: Option<&FifoSpec>) -> Result<()> {
        let settings = match fifo {
            Some(f) => json!({"quota_type": "FIFO", "quota_size": f.quota_bytes,
                              "max_block_size": f.block_bytes}),
            None => json!({}),
        };
        let url = format!("{}/api/v1/b/{bucket}", self.base);
        let resp = self
            .req(reqwest::Method::POST, url)
            .json(&settings)
            .send()
            .await?;
        ok_or_error(resp, "ReductStore: create bucket").await?;
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
            .req(reqwest::Method::POST, self.entry_url(bucket, entry))
            .query(&[("ts", ts)])
            .header("content-type", CONTENT_TYPE);
        for (k, v) in labels {
            req = req.header(format!("{LABEL_PREFIX}{k}"), v);
        }
        let resp = req.body(payload).send().await?;
        ok_or_error(resp, "ReductStore: write").await?;
        Ok(())
    }

    async fn write_batch(
        &self,
        bucket: &str,
        entry: &str,
        mut records: Vec<BatchRecord>,
    ) -> Result<(u64, Option<String>)> {
        // The server reads the body in the order of the timestamps in the headers.
        records.sort_by_key(|r| r.ts);
        let mut req = self
            .req(
                reqwest::Method::POST,
                format!("{}/batch", self.entry_url(bucket, entry)),
            )
            .header("content-type", "application/octet-stream");
        let mut body = BytesMut::with_capacity(records.iter().map(|r| r.payload.len()).sum());
        for r in &records {
            let mut value = format!("{},{CONTENT_TYPE}", r.payload.len());
            for (k, v) in &r.labels {
                value.push_str(&format!(",{k}={v}"));
            }
            req = req.header(format!("{TIME_PREFIX}{}", r.ts), value);
            body.extend_from_slice(&r.payload);
        }
        let resp = req.body(body.freeze()).send().await?;
        let resp = ok_or_error(resp, "ReductStore: batch write").await?;
        let errors = labels_from_headers(resp.headers(), ERROR_PREFIX);
        let first = errors
            .first()
            .map(|(ts, e)| format!("ReductStore: batch record {ts} failed: {e}"));
        Ok((errors.len() as u64, first))
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
            .batched_query(bucket, plan, entry, (start, stop), None)
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
        when: &Value,
    ) -> Result<(ReadOutcome, Vec<u64>)> {
        self.batched_query(bucket, plan, entry, (start, stop), Some(when))
            .await
    }

    async fn read_point(&self, bucket: &str, entry: &str, ts: u64) -> Result<PointRead> {
        let t0 = Instant::now();
        let resp = self
            .req(reqwest::Method::GET, self.entry_url(bucket, entry))
            .query(&[("ts", ts)])
            .send()
            .await?;
        point_read_from(resp, t0, "ReductStore: read", LABEL_PREFIX).await
    }

    async fn bucket_size(&self, bucket: &str) -> Result<u64> {
        let url = format!("{}/api/v1/b/{bucket}", self.base);
        let resp = self.req(reqwest::Method::GET, url).send().await?;
        let body: Value = ok_or_error(resp, "ReductStore: bucket info")
            .await?
            .json()
            .await?;
        body["info"]["size"]
            .as_u64()
            .context("ReductStore bucket info has no info.size")
    }
}

/// Splits a batched-read body into the records its headers announced (in time order) and
/// checks each payload as its pieces arrive, without copying them.
struct BodySplit<'a> {
    records: &'a [BatchedMeta],
    plan: &'a SizePlan,
    entry: u32,
    span: std::ops::Range<u64>,
    next: usize,
    check: Option<StreamCheck>,
    extra: usize,
}

impl<'a> BodySplit<'a> {
    fn new(
        records: &'a [BatchedMeta],
        plan: &'a SizePlan,
        entry: u32,
        span: std::ops::Range<u64>,
    ) -> Self {
        BodySplit {
            records,
            plan,
            entry,
            span,
            next: 0,
            check: None,
            extra: 0,
        }
    }

    fn feed(&mut self, mut chunk: &[u8], out: &mut ReadOutcome) -> Result<()> {
        loop {
            if self.check.is_none() {
                let Some((ts, size, labels)) = self.records.get(self.next) else {
                    self.extra += chunk.len();
                    return Ok(());
                };
                if !self.span.contains(ts) {
                    return Err(mismatch(format!(
                        "ReductStore returned {} @ {ts} outside {:?}",
                        self.plan.entry_name(self.entry),
                        self.span
                    )));
                }
                self.check = Some(
                    self.plan
                        .stream_check(self.entry, *ts, *size, Some(labels))?,
                );
            }
            let Some(check) = self.check.as_mut() else {
                return Ok(());
            };
            let n = check.remaining().min(chunk.len());
            check.feed(&chunk[..n])?;
            chunk = &chunk[n..];
            if check.remaining() > 0 {
                return Ok(());
            }
            if let Some(done) = self.check.take() {
                done.finish()?;
            }
            out.records += 1;
            out.bytes += self.records[self.next].1;
            self.next += 1;
        }
    }

    fn finish(mut self, out: &mut ReadOutcome) -> Result<()> {
        // Zero-length records at the very end complete without a byte.
        self.feed(&[], out)?;
        if self.next != self.records.len() || self.extra > 0 {
            bail!(
                "ReductStore batched read: headers announce {} records, the body held {} \
                 ({} bytes left over)",
                self.records.len(),
                self.next,
                self.extra
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::parse_record_header;

    #[test]
    fn record_headers_parse_with_plain_and_quoted_labels() -> anyhow::Result<()> {
        let (size, labels) = parse_record_header("123,text/plain,a=1,b=\"x,y\",@c=2")?;
        assert_eq!(size, 123);
        assert_eq!(
            labels,
            vec![("a".into(), "1".into()), ("b".into(), "x,y".into())]
        );
        let (size, labels) = parse_record_header("5,application/octet-stream")?;
        assert_eq!((size, labels.len()), (5, 0));
        Ok(())
    }
}
