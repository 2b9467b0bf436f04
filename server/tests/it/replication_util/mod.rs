//! Support for the replication tests: HTTP helpers over two real servers, a dump of a
//! bucket (every record, byte for byte, from a multi-entry query) to compare both sides,
//! and the fault-injecting TCP proxy ([`proxy`]).
#![allow(clippy::unwrap_used, dead_code)]

pub mod proxy;
pub mod tls_proxy;

use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use serde_json::{json, Value};
use tsblob_proto::framing::{put_end, put_record, Decoder, Event, MEDIA_TYPE};
use tsblob_storage::Labels;

use crate::common::Server;

/// Every record of a bucket: (entry, ts) → (content type, labels, payload).
pub type Dump = BTreeMap<(String, u64), (String, Labels, Vec<u8>)>;

pub struct Api {
    pub http: reqwest::Client,
    pub base: String,
    pub token: Option<String>,
}

/// Fast retries so the tests do not wait long after a fault.
pub const FAST_RETRY: &[&str] = &[
    "--replication-timeout",
    "3s",
    "--replication-max-backoff",
    "500ms",
    "--free-space-reserve",
    "0",
];

/// A `tsblob serve` in `dir` whose replication tasks retry fast.
pub fn start(dir: &std::path::Path) -> Server {
    Server::start_in(dir, FAST_RETRY)
}

/// Waits until task `name` has a `last_error` for which `ok` holds; returns the task.
pub async fn wait_error(src: &Api, name: &str, ok: impl Fn(&str) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let v = src.task(name).await;
        if let Some(m) = v["status"]["last_error"]["message"].as_str() {
            if ok(m) {
                return v;
            }
        }
        assert!(Instant::now() < deadline, "no such error: {v:#}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs the `tsblob` CLI with `args`, none of the environment's tokens, CA or URL:
/// (succeeded, stdout + stderr).
pub fn tsblob_cli(args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tsblob"))
        .args(args)
        .env_remove("TSBLOB_SRC_TOKEN")
        .env_remove("TSBLOB_DST_TOKEN")
        .env_remove("TSBLOB_CA")
        .env_remove("TSBLOB_URL")
        .env_remove("TSBLOB_TOKEN")
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// A payload that depends on (entry, ts) only, `len` bytes; compressible when `text`.
pub fn payload(entry: &str, ts: u64, len: usize, text: bool) -> Vec<u8> {
    let mut x = ts.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ entry.len() as u64 ^ 0x5555;
    for b in entry.bytes() {
        x = x.rotate_left(5) ^ b as u64;
    }
    let mut out = Vec::with_capacity(len);
    if text {
        let line = format!("{entry} {ts} sensor reading ok\n");
        while out.len() < len {
            out.extend_from_slice(line.as_bytes());
        }
        out.truncate(len);
    } else {
        out.resize(len, 0);
        Xoshiro256PlusPlus::seed_from_u64(x).fill_bytes(&mut out);
    }
    out
}

pub fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

impl Api {
    pub fn new(base: &str, token: Option<&str>) -> Api {
        Api {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .unwrap(),
            base: base.trim_end_matches('/').to_string(),
            token: token.map(String::from),
        }
    }

    fn req(&self, m: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let r = self.http.request(m, format!("{}{path}", self.base));
        match &self.token {
            Some(t) => r.bearer_auth(t),
            None => r,
        }
    }

    pub async fn json(&self, m: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut r = self.req(m, path);
        if let Some(b) = body {
            r = r.json(&b);
        }
        let resp = r.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    pub async fn create_bucket(&self, name: &str, settings: Value) {
        let (s, v) = self
            .json(
                reqwest::Method::POST,
                &format!("/api/v1/b/{name}"),
                Some(settings),
            )
            .await;
        assert!(s == 200 || s == 201, "create bucket {name}: {s} {v}");
    }

    /// Writes records to one entry with one batch; returns each record's status.
    pub async fn write(
        &self,
        bucket: &str,
        entry: &str,
        recs: &[(u64, &str, Labels, Vec<u8>)],
    ) -> Result<Vec<u16>, String> {
        let mut body = BytesMut::new();
        for (ts, ct, l, d) in recs {
            put_record(&mut body, *ts, ct, l, d);
        }
        put_end(&mut body, recs.len() as u64);
        let resp = self
            .req(
                reqwest::Method::POST,
                &format!("/api/v1/b/{bucket}/{entry}/batch"),
            )
            .header("content-type", MEDIA_TYPE)
            .body(body.freeze())
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = resp.status();
        let v: Value = resp.json().await.map_err(|e| e.to_string())?;
        if !status.is_success() {
            return Err(format!("{status} {v}"));
        }
        Ok(v["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["status"].as_u64().unwrap() as u16)
            .collect())
    }

    /// Every record of the bucket.
    pub async fn dump(&self, bucket: &str) -> Dump {
        let resp = self
            .req(
                reqwest::Method::GET,
                &format!("/api/v1/b/{bucket}/query?entries=**"),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200, "dump of {bucket}");
        let body = resp.bytes().await.unwrap();
        let mut buf = BytesMut::from(&body[..]);
        let mut dec = Decoder::new();
        let mut out = Dump::new();
        let mut cur: Option<(String, u64, String, Labels, Vec<u8>)> = None;
        while let Some(ev) = dec.next(&mut buf).unwrap() {
            match ev {
                Event::Record(h) => {
                    if let Some((e, ts, ct, l, d)) = cur.take() {
                        assert!(out.insert((e, ts), (ct, l, d)).is_none(), "a record twice");
                    }
                    cur = Some((h.entry.unwrap(), h.ts, h.content_type, h.labels, Vec::new()));
                }
                Event::Data(d) => cur.as_mut().unwrap().4.extend_from_slice(&d),
                Event::End(_) => break,
                Event::Error(e) => panic!("query error: {}", String::from_utf8_lossy(&e)),
                Event::Heartbeat(_) | Event::Skipped(_) => {}
            }
        }
        if let Some((e, ts, ct, l, d)) = cur.take() {
            assert!(out.insert((e, ts), (ct, l, d)).is_none(), "a record twice");
        }
        out
    }

    pub async fn put_task(&self, name: &str, spec: Value) -> (u16, Value) {
        self.json(
            reqwest::Method::PUT,
            &format!("/api/v1/replications/{name}"),
            Some(spec),
        )
        .await
    }

    pub async fn task(&self, name: &str) -> Value {
        let (s, v) = self
            .json(
                reqwest::Method::GET,
                &format!("/api/v1/replications/{name}"),
                None,
            )
            .await;
        assert_eq!(s, 200, "{v}");
        v
    }

    /// Waits until the task has nothing pending and is idle; panics with its status after
    /// `timeout`.
    pub async fn wait_caught_up(&self, name: &str, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let v = self.task(name).await;
            let st = &v["status"];
            let backfill_done = st["backfill"].is_null() || st["backfill"]["done"] == json!(true);
            if st["pending_records"] == json!(0) && backfill_done && st["phase"] == json!("idle") {
                return v;
            }
            if Instant::now() > deadline {
                panic!("task {name} did not catch up: {v:#}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn metrics(&self) -> String {
        self.req(reqwest::Method::GET, "/metrics")
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }
}

/// The task settings of a test: `dst` is the destination's base URL (often the proxy's).
pub fn task_spec(src: &str, dst: &str, dst_bucket: &str) -> Value {
    json!({"src_bucket": src, "dst_url": dst, "dst_bucket": dst_bucket})
}

/// Asserts the destination holds exactly `want`, byte for byte (a dump cannot hold a
/// record twice: it would have failed).
pub fn assert_same(want: &Dump, got: &Dump) {
    let missing: Vec<_> = want
        .keys()
        .filter(|k| !got.contains_key(*k))
        .take(5)
        .collect();
    let extra: Vec<_> = got
        .keys()
        .filter(|k| !want.contains_key(*k))
        .take(5)
        .collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "destination differs: {} wanted, {} there; missing e.g. {missing:?}; extra e.g. {extra:?}",
        want.len(),
        got.len()
    );
    for (k, v) in want {
        assert!(got[k] == *v, "record {k:?} differs at the destination");
    }
}

pub fn addr_of(url: &str) -> String {
    url.trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string()
}
