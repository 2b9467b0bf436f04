//! An in-memory S3 endpoint (path-style, one bucket or many) that answers as a working
//! store, except for the operations told to be hostile: an endless body (of a success or
//! of an error document), an error document with a huge `<Message>`, a redirect, or
//! listing pages that hold nothing and always say more follow. A real engine sends none of
//! these, so the tier's bounds against them are tested here (the security probe's
//! `s3fake.py`, in Rust on the test's runtime). It keeps connections alive as S3 does,
//! and counts the requests of each operation and the body bytes it sent.
#![allow(clippy::unwrap_used, dead_code)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// The S3 operations the tier calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    HeadBucket,
    CreateBucket,
    List,
    Put,
    HeadObject,
    Get,
    Delete,
    Other,
}

/// How a hostile operation is answered.
#[derive(Debug, Clone)]
pub enum Hostility {
    /// `status` with a chunked body that never ends (64 KiB chunks as fast as they go; an
    /// error status starts an S3 error document whose `<Message>` never ends).
    Endless { status: u16 },
    /// `500` with an S3 error document whose `<Message>` is `len` bytes.
    HugeMessage { len: usize },
    /// `307` to `location`.
    Redirect { location: String },
    /// A listing page without keys, `IsTruncated` and a new continuation token each time.
    EmptyPagesForever,
    /// `status` with an S3 error document (code `AccessDenied`).
    Refuse { status: u16 },
    /// A PUT answered 200 (with its checksum) without storing anything.
    Dropped,
    /// A ranged GET answered 206 with the first half of the range, `Content-Length` saying
    /// so (a consistent, short answer).
    ShortRange,
}

/// An object: its body, its `x-amz-checksum-crc32c`, its `x-amz-meta-tsblob-crc32c`.
type Object = (Vec<u8>, String, String);

#[derive(Default)]
struct State {
    /// By `bucket/key`.
    objects: Mutex<HashMap<String, Object>>,
    hostile: Mutex<HashMap<Op, Hostility>>,
    requests: Mutex<HashMap<Op, u64>>,
    sent: AtomicU64,
    tokens: AtomicU64,
}

pub struct FakeS3 {
    addr: String,
    state: Arc<State>,
    accept: tokio::task::JoinHandle<()>,
}

impl FakeS3 {
    /// Starts on a free loopback port, on the calling test's runtime, with `hostile`
    /// operations answered so.
    pub fn start(hostile: &[(Op, Hostility)]) -> FakeS3 {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        std_listener.set_nonblocking(true).unwrap();
        let addr = std_listener.local_addr().unwrap().to_string();
        let listener = TcpListener::from_std(std_listener).unwrap();
        let state = Arc::new(State::default());
        state
            .hostile
            .lock()
            .unwrap()
            .extend(hostile.iter().cloned());
        let st = state.clone();
        let accept = tokio::spawn(async move {
            loop {
                let Ok((conn, _)) = listener.accept().await else {
                    continue;
                };
                tokio::spawn(serve(conn, st.clone()));
            }
        });
        FakeS3 {
            addr,
            state,
            accept,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Requests of `op` received so far.
    pub fn requests(&self, op: Op) -> u64 {
        self.state
            .requests
            .lock()
            .unwrap()
            .get(&op)
            .copied()
            .unwrap_or(0)
    }

    /// Answers `op` as `hostile` from now on (`None`: as a working store).
    pub fn set(&self, op: Op, hostile: Option<Hostility>) {
        let mut map = self.state.hostile.lock().unwrap();
        match hostile {
            Some(h) => map.insert(op, h),
            None => map.remove(&op),
        };
    }

    /// Body bytes of hostile answers sent so far.
    pub fn sent(&self) -> u64 {
        self.state.sent.load(Ordering::Relaxed)
    }

    /// Objects stored whose key ends with `suffix`.
    pub fn objects_ending(&self, suffix: &str) -> usize {
        self.state
            .objects
            .lock()
            .unwrap()
            .keys()
            .filter(|k| k.ends_with(suffix))
            .count()
    }
}

impl Drop for FakeS3 {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

struct Request {
    method: String,
    path: String,
    query: String,
    headers: HashMap<String, String>,
}

fn op_of(r: &Request) -> (Op, String) {
    let path = percent_encoding::percent_decode_str(&r.path)
        .decode_utf8_lossy()
        .into_owned();
    let path = path.trim_start_matches('/').to_string();
    let is_bucket = !path.contains('/') || path.ends_with('/') && path.matches('/').count() == 1;
    let op = match (r.method.as_str(), is_bucket) {
        ("HEAD", true) => Op::HeadBucket,
        ("PUT", true) => Op::CreateBucket,
        ("GET", true) if r.query.contains("list-type=2") => Op::List,
        ("PUT", false) => Op::Put,
        ("HEAD", false) => Op::HeadObject,
        ("GET", false) => Op::Get,
        ("DELETE", false) => Op::Delete,
        _ => Op::Other,
    };
    (op, path)
}

fn query_value(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == name).then(|| {
            percent_encoding::percent_decode_str(v)
                .decode_utf8_lossy()
                .into_owned()
        })
    })
}

async fn serve(conn: TcpStream, state: Arc<State>) {
    let (r, mut w) = conn.into_split();
    let mut r = BufReader::new(r);
    loop {
        // The request head.
        let mut line = String::new();
        if r.read_line(&mut line).await.unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let method = parts.next().unwrap_or_default().to_string();
        let target = parts.next().unwrap_or_default().to_string();
        let mut headers = HashMap::new();
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).await.unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
            }
        }
        let (path, query) = target.split_once('?').unwrap_or((&target, ""));
        let req = Request {
            method,
            path: path.to_string(),
            query: query.to_string(),
            headers,
        };
        if req
            .headers
            .get("expect")
            .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"))
            && w.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await.is_err()
        {
            return;
        }
        let Some(body) = read_body(&mut r, &req.headers).await else {
            return;
        };
        let (op, path) = op_of(&req);
        *state.requests.lock().unwrap().entry(op).or_insert(0) += 1;
        let hostile = state.hostile.lock().unwrap().get(&op).cloned();
        let keep_on = match hostile {
            Some(Hostility::Dropped) => {
                let mut h = vec![("ETag", "\"e\"".to_string())];
                if let Some(crc) = req.headers.get("x-amz-checksum-crc32c") {
                    h.push(("x-amz-checksum-crc32c", crc.clone()));
                }
                w.write_all(head(200, &h, 0).as_bytes()).await.is_ok()
            }
            Some(Hostility::ShortRange) => short_range(&mut w, &state, &path, &req).await,
            Some(h) => answer_hostile(&mut w, &state, h).await,
            None => answer(&mut w, &state, op, &path, &req, body).await,
        };
        if !keep_on {
            let _ = w.shutdown().await;
            return;
        }
    }
}

/// The request's body (`Content-Length`, chunked, and `aws-chunked` content decoded).
async fn read_body<R: AsyncBufReadExt + Unpin>(
    r: &mut R,
    headers: &HashMap<String, String>,
) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    if let Some(n) = headers.get("content-length") {
        let n: usize = n.parse().ok()?;
        body.resize(n, 0);
        r.read_exact(&mut body).await.ok()?;
    } else if headers
        .get("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        loop {
            let mut size = String::new();
            r.read_line(&mut size).await.ok()?;
            let n = usize::from_str_radix(size.trim().split(';').next()?, 16).ok()?;
            if n == 0 {
                loop {
                    let mut t = String::new();
                    r.read_line(&mut t).await.ok()?;
                    if t.trim_end().is_empty() {
                        break;
                    }
                }
                break;
            }
            let at = body.len();
            body.resize(at + n, 0);
            r.read_exact(&mut body[at..]).await.ok()?;
            let mut crlf = [0u8; 2];
            r.read_exact(&mut crlf).await.ok()?;
        }
    }
    if headers
        .get("content-encoding")
        .is_some_and(|v| v.contains("aws-chunked"))
    {
        let mut out = Vec::new();
        let mut at = 0;
        loop {
            let end = at + body[at..].windows(2).position(|w| w == b"\r\n")?;
            let size = std::str::from_utf8(&body[at..end]).ok()?;
            let n = usize::from_str_radix(size.split(';').next()?, 16).ok()?;
            if n == 0 {
                break;
            }
            out.extend_from_slice(body.get(end + 2..end + 2 + n)?);
            at = end + 2 + n + 2;
        }
        body = out;
    }
    Some(body)
}

fn head(status: u16, headers: &[(&str, String)], len: usize) -> String {
    let mut h = format!("HTTP/1.1 {status} X\r\nx-amz-request-id: 1\r\nContent-Length: {len}\r\n");
    for (k, v) in headers {
        h.push_str(&format!("{k}: {v}\r\n"));
    }
    h.push_str("\r\n");
    h
}

/// A working store's answer; false if the connection is to end.
async fn answer<W: AsyncWriteExt + Unpin>(
    w: &mut W,
    state: &State,
    op: Op,
    path: &str,
    req: &Request,
    body: Vec<u8>,
) -> bool {
    let xml = || ("Content-Type", "application/xml".to_string());
    let (status, headers, out): (u16, Vec<(&str, String)>, Vec<u8>) = match op {
        Op::HeadBucket | Op::CreateBucket => (200, vec![], vec![]),
        Op::Put => {
            let crc = req
                .headers
                .get("x-amz-checksum-crc32c")
                .cloned()
                .unwrap_or_default();
            let meta = req
                .headers
                .get("x-amz-meta-tsblob-crc32c")
                .cloned()
                .unwrap_or_default();
            state
                .objects
                .lock()
                .unwrap()
                .insert(path.to_string(), (body, crc.clone(), meta));
            let mut h = vec![("ETag", "\"e\"".to_string())];
            if !crc.is_empty() {
                h.push(("x-amz-checksum-crc32c", crc));
            }
            (200, h, vec![])
        }
        Op::HeadObject => {
            let found = state.objects.lock().unwrap().get(path).cloned();
            match found {
                Some((b, crc, meta)) => {
                    let mut h = vec![("ETag", "\"e\"".to_string())];
                    if !crc.is_empty() {
                        h.push(("x-amz-checksum-crc32c", crc));
                    }
                    if !meta.is_empty() {
                        h.push(("x-amz-meta-tsblob-crc32c", meta));
                    }
                    // A HEAD's Content-Length is the object's, with no body.
                    return w.write_all(head(200, &h, b.len()).as_bytes()).await.is_ok();
                }
                None => (404, vec![], vec![]),
            }
        }
        Op::Get => match state.objects.lock().unwrap().get(path) {
            Some((b, _, _)) => match req.headers.get("range").and_then(|r| {
                let (a, z) = r.strip_prefix("bytes=")?.split_once('-')?;
                Some((a.parse::<usize>().ok()?, z.parse::<usize>().ok()?))
            }) {
                Some((a, z)) if a < b.len() => (206, vec![], b[a..(z + 1).min(b.len())].to_vec()),
                Some(_) => (416, vec![], vec![]),
                None => (200, vec![], b.clone()),
            },
            None => (
                404,
                vec![xml()],
                b"<Error><Code>NoSuchKey</Code><Message>no</Message></Error>".to_vec(),
            ),
        },
        Op::Delete => {
            state.objects.lock().unwrap().remove(path);
            (204, vec![], vec![])
        }
        Op::List => {
            let bucket = path.trim_end_matches('/');
            let prefix = query_value(&req.query, "prefix").unwrap_or_default();
            let items: String = state
                .objects
                .lock()
                .unwrap()
                .iter()
                .filter_map(|(k, (b, _, _))| {
                    let key = k.strip_prefix(&format!("{bucket}/"))?;
                    key.starts_with(&prefix).then(|| {
                        format!(
                            "<Contents><Key>{key}</Key><Size>{}</Size><ETag>&quot;e&quot;</ETag></Contents>",
                            b.len()
                        )
                    })
                })
                .collect();
            (200, vec![xml()], list_page(bucket, &prefix, &items, None))
        }
        Op::Other => (501, vec![], vec![]),
    };
    let mut a = head(status, &headers, out.len()).into_bytes();
    a.extend_from_slice(&out);
    w.write_all(&a).await.is_ok()
}

fn list_page(bucket: &str, prefix: &str, items: &str, token: Option<String>) -> Vec<u8> {
    let (truncated, next) = match token {
        Some(t) => (
            "true",
            format!("<NextContinuationToken>{t}</NextContinuationToken>"),
        ),
        None => ("false", String::new()),
    };
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListBucketResult><Name>{bucket}</Name><Prefix>{prefix}</Prefix><MaxKeys>1000</MaxKeys><IsTruncated>{truncated}</IsTruncated>{next}{items}</ListBucketResult>"
    )
    .into_bytes()
}

/// A GET of a range answered with the first half of it (206, `Content-Length` and
/// `Content-Range` saying so); false if the connection is to end.
async fn short_range<W: AsyncWriteExt + Unpin>(
    w: &mut W,
    state: &State,
    path: &str,
    req: &Request,
) -> bool {
    let found = state.objects.lock().unwrap().get(path).map(|o| o.0.clone());
    let range = req.headers.get("range").and_then(|r| {
        let (a, z) = r.strip_prefix("bytes=")?.split_once('-')?;
        Some((a.parse::<usize>().ok()?, z.parse::<usize>().ok()?))
    });
    let (status, headers, out) = match (found, range) {
        (Some(b), Some((a, z))) if a < b.len() => {
            let z = z.min(b.len() - 1);
            let half = (z + 1 - a) / 2;
            let out = b[a..a + half].to_vec();
            let cr = format!("bytes {a}-{}/{}", (a + half).saturating_sub(1), b.len());
            (206, vec![("Content-Range", cr)], out)
        }
        (Some(b), None) => (200, vec![], b[..b.len() / 2].to_vec()),
        (Some(_), Some(_)) => (416, vec![], vec![]),
        (None, _) => (404, vec![], vec![]),
    };
    let mut a = head(status, &headers, out.len()).into_bytes();
    a.extend_from_slice(&out);
    w.write_all(&a).await.is_ok()
}

/// A hostile answer; false if the connection is to end.
async fn answer_hostile<W: AsyncWriteExt + Unpin>(
    w: &mut W,
    state: &State,
    hostility: Hostility,
) -> bool {
    match hostility {
        Hostility::Endless { status } => {
            let h = format!(
                "HTTP/1.1 {status} X\r\nContent-Type: application/xml\r\nETag: \"e\"\r\nTransfer-Encoding: chunked\r\n\r\n"
            );
            if w.write_all(h.as_bytes()).await.is_err() {
                return false;
            }
            let first: &[u8] = if status >= 300 {
                b"<?xml version=\"1.0\"?><Error><Code>InternalError</Code><Message>"
            } else {
                b"<?xml version=\"1.0\"?><ListBucketResult><Name>"
            };
            let mut c = format!("{:x}\r\n", first.len()).into_bytes();
            c.extend_from_slice(first);
            c.extend_from_slice(b"\r\n");
            if w.write_all(&c).await.is_err() {
                return false;
            }
            let chunk = {
                let mut c = format!("{:x}\r\n", 64 << 10).into_bytes();
                c.extend_from_slice(&vec![b'M'; 64 << 10]);
                c.extend_from_slice(b"\r\n");
                c
            };
            while w.write_all(&chunk).await.is_ok() {
                state.sent.fetch_add(64 << 10, Ordering::Relaxed);
            }
            false
        }
        Hostility::HugeMessage { len } => {
            let mut body =
                b"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>InternalError</Code><Message>"
                    .to_vec();
            body.extend(std::iter::repeat_n(b'M', len));
            body.extend_from_slice(b"</Message><RequestId>1</RequestId></Error>");
            let mut a = head(
                500,
                &[("Content-Type", "application/xml".to_string())],
                body.len(),
            )
            .into_bytes();
            a.extend_from_slice(&body);
            state.sent.fetch_add(body.len() as u64, Ordering::Relaxed);
            w.write_all(&a).await.is_ok()
        }
        Hostility::Redirect { location } => {
            let a = head(307, &[("Location", location)], 0);
            w.write_all(a.as_bytes()).await.is_ok()
        }
        Hostility::Refuse { status } => {
            let body = b"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>AccessDenied</Code><Message>Access Denied.</Message><RequestId>1</RequestId></Error>";
            let mut a = head(
                status,
                &[("Content-Type", "application/xml".to_string())],
                body.len(),
            )
            .into_bytes();
            a.extend_from_slice(body);
            w.write_all(&a).await.is_ok()
        }
        // Answered in `serve` (they need the request).
        Hostility::Dropped | Hostility::ShortRange => false,
        Hostility::EmptyPagesForever => {
            let n = state.tokens.fetch_add(1, Ordering::Relaxed);
            let page = list_page("b", "", "", Some(format!("t{n}")));
            let mut a = head(
                200,
                &[("Content-Type", "application/xml".to_string())],
                page.len(),
            )
            .into_bytes();
            a.extend_from_slice(&page);
            w.write_all(&a).await.is_ok()
        }
    }
}
