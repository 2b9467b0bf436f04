//! A tiny hostile HTTP server for the outbound and tier tests: it records every request
//! head it gets (to tell whether a token reached it) and answers as told: an endless or
//! trickling body, a redirect, a fixed answer (an internal page with a secret in it), or an
//! S3 listing that never ends.
#![allow(clippy::unwrap_used, dead_code)]

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How the server answers every request.
#[derive(Debug, Clone)]
pub enum Answer {
    /// `status` with a chunked body that never ends (64 KiB chunks as fast as they go).
    Endless { status: u16 },
    /// `302 Found` to `location`, with `body`.
    Redirect { location: String, body: String },
    /// Nothing for `secs` seconds, then an empty 503 (a destination slower than the
    /// sender's timeout).
    Slow { secs: u64 },
    /// `status` with a chunked body of one byte every 100 ms, never ending.
    Dribble { status: u16 },
    /// An S3 store whose ListObjectsV2 always says more pages follow (a new continuation
    /// token, 1000 keys each time); a HEAD or PUT is answered 200, anything else 404.
    EndlessListing,
    /// `status`, `content_type` and `body`.
    Fixed {
        status: u16,
        content_type: String,
        body: String,
    },
}

pub struct Hostile {
    addr: String,
    /// The head (request line and headers) of every request received.
    pub heads: Arc<Mutex<Vec<String>>>,
    /// Bytes of body written to clients in all.
    pub sent: Arc<std::sync::atomic::AtomicU64>,
    accept: tokio::task::JoinHandle<()>,
}

impl Hostile {
    /// Starts on a free loopback port, on the calling test's runtime.
    pub fn start(answer: Answer) -> Hostile {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        std_listener.set_nonblocking(true).unwrap();
        let addr = std_listener.local_addr().unwrap().to_string();
        let listener = TcpListener::from_std(std_listener).unwrap();
        let heads = Arc::new(Mutex::new(Vec::new()));
        let sent = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (h, s) = (heads.clone(), sent.clone());
        let accept = tokio::spawn(async move {
            loop {
                let Ok((conn, _)) = listener.accept().await else {
                    continue;
                };
                tokio::spawn(serve(conn, answer.clone(), h.clone(), s.clone()));
            }
        });
        Hostile {
            addr,
            heads,
            sent,
            accept,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    pub fn requests(&self) -> usize {
        self.heads.lock().unwrap().len()
    }

    /// How many requests of `method` had `needle` in their request line.
    pub fn requests_of(&self, method: &str, needle: &str) -> usize {
        self.heads
            .lock()
            .unwrap()
            .iter()
            .filter_map(|h| h.lines().next())
            .filter(|l| l.starts_with(&format!("{method} ")) && l.contains(needle))
            .count()
    }

    /// Whether any request carried `needle` in its head (a token, say).
    pub fn saw(&self, needle: &str) -> bool {
        self.heads
            .lock()
            .unwrap()
            .iter()
            .any(|h| h.contains(needle))
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn serve(
    conn: TcpStream,
    answer: Answer,
    heads: Arc<Mutex<Vec<String>>>,
    sent: Arc<std::sync::atomic::AtomicU64>,
) {
    let (mut r, mut w) = conn.into_split();
    // One request per connection: its head, then the rest is read and dropped while the
    // answer goes out (a client still sending its body is not blocked).
    let mut head = Vec::new();
    let mut buf = [0u8; 8192];
    while !head.windows(4).any(|x| x == b"\r\n\r\n") {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    heads
        .lock()
        .unwrap()
        .push(String::from_utf8_lossy(&head).into_owned());
    let drain = tokio::spawn(async move {
        let mut buf = [0u8; 8192];
        while let Ok(n) = r.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
    });
    match answer {
        Answer::Endless { status } => {
            let head = format!(
                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            );
            if w.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            let chunk = {
                let data = vec![b' '; 64 << 10];
                let mut c = format!("{:x}\r\n", data.len()).into_bytes();
                c.extend_from_slice(&data);
                c.extend_from_slice(b"\r\n");
                c
            };
            while w.write_all(&chunk).await.is_ok() {
                sent.fetch_add(64 << 10, std::sync::atomic::Ordering::Relaxed);
            }
        }
        Answer::Dribble { status } => {
            let head = format!("HTTP/1.1 {status} X\r\nTransfer-Encoding: chunked\r\n\r\n");
            if w.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            while w.write_all(b"1\r\nx\r\n").await.is_ok() {
                sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
        Answer::EndlessListing => {
            let request = String::from_utf8_lossy(&head).into_owned();
            let line = request.lines().next().unwrap_or_default().to_string();
            let a = if line.starts_with("HEAD ") || line.starts_with("PUT ") {
                "HTTP/1.1 200 OK\r\nETag: \"e\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    .to_string()
            } else if line.starts_with("GET ") && line.contains("list-type=2") {
                let page = heads.lock().unwrap().len();
                let keys: String = (0..1000)
                    .map(|i| {
                        format!("<Contents><Key>junk/{page:08}-{i:04}</Key><Size>1</Size><ETag>\"e\"</ETag></Contents>")
                    })
                    .collect();
                let xml = format!(
                    "<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListBucketResult><Name>b</Name><KeyCount>1000</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>true</IsTruncated><NextContinuationToken>t{page}</NextContinuationToken>{keys}</ListBucketResult>"
                );
                sent.fetch_add(xml.len() as u64, std::sync::atomic::Ordering::Relaxed);
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{xml}",
                    xml.len()
                )
            } else {
                "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    .to_string()
            };
            let _ = w.write_all(a.as_bytes()).await;
        }
        Answer::Redirect { location, body } => {
            let a = format!(
                "HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = w.write_all(a.as_bytes()).await;
        }
        Answer::Slow { secs } => {
            tokio::time::sleep(std::time::Duration::from_secs(secs)).await;
            let _ = w
                .write_all(b"HTTP/1.1 503 X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                .await;
        }
        Answer::Fixed {
            status,
            content_type,
            body,
        } => {
            let a = format!(
                "HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = w.write_all(a.as_bytes()).await;
        }
    }
    let _ = w.shutdown().await;
    drain.abort();
}
