//! Request bodies as bounded, time-limited streams, and response bodies fed by a blocking
//! producer through a bounded channel (the backpressure of every large transfer).

use std::time::Duration;
use tsblob_proto::ErrorCode;

use axum::body::{Body, BodyDataStream};
use axum::http::StatusCode;
use bytes::Bytes;
use futures_util::StreamExt;

use super::errors::AppError;
use super::Limits;

/// How long a whole request body may take: `base`, plus one second for every `min_rate`
/// bytes received so far. A client trickling a byte per idle period (which the idle
/// timeout alone never cuts) falls behind it; an upload going at least `min_rate` never
/// does. `min_rate == 0`: the whole body must arrive within `base`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyDeadline {
    pub base: Duration,
    /// Bytes per second.
    pub min_rate: u64,
}

impl Default for BodyDeadline {
    fn default() -> Self {
        BodyDeadline {
            base: Duration::from_secs(60),
            min_rate: 64 << 10,
        }
    }
}

impl BodyDeadline {
    /// The time a body may have taken once `seen` bytes of it arrived.
    pub fn allowed(&self, seen: u64) -> Duration {
        if self.min_rate == 0 {
            return self.base;
        }
        let extra = Duration::from_secs_f64(seen as f64 / self.min_rate as f64);
        self.base.saturating_add(extra)
    }
}

/// Chunks of a request body, refusing more than `limit` bytes in total, a client that
/// sends nothing for the idle timeout, and one slower than the body deadline.
pub struct BodyChunks {
    stream: BodyDataStream,
    seen: u64,
    limit: u64,
    idle: Duration,
    deadline: BodyDeadline,
    started: tokio::time::Instant,
}

impl BodyChunks {
    /// `limit` bytes at most; time limits from `limits`.
    pub fn new(body: Body, limit: u64, limits: &Limits) -> BodyChunks {
        BodyChunks {
            stream: body.into_data_stream(),
            seen: 0,
            limit,
            idle: limits.idle_timeout,
            deadline: limits.body_deadline,
            started: tokio::time::Instant::now(),
        }
    }

    /// Bytes received so far.
    pub fn seen(&self) -> u64 {
        self.seen
    }

    /// The most bytes it accepts.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The next chunk; `Ok(None)` at the end of the body.
    pub async fn next(&mut self) -> Result<Option<Bytes>, AppError> {
        let by_deadline = (self.started + self.deadline.allowed(self.seen))
            .saturating_duration_since(tokio::time::Instant::now());
        let wait = self.idle.min(by_deadline);
        match tokio::time::timeout(wait, self.stream.next()).await {
            Err(_) if wait < self.idle => Err(AppError::new(
                StatusCode::REQUEST_TIMEOUT,
                ErrorCode::RequestTimeout,
                format!(
                    "the request body arrived too slowly: {} bytes in {} s, under the server's body deadline (--body-deadline {} s plus 1 s per --body-min-rate {} bytes): send it faster",
                    self.seen,
                    self.started.elapsed().as_secs(),
                    self.deadline.base.as_secs(),
                    self.deadline.min_rate
                ),
            )),
            Err(_) => Err(AppError::new(
                StatusCode::REQUEST_TIMEOUT,
                ErrorCode::RequestTimeout,
                format!(
                    "the request body stalled for {} s: send it faster, or start the server with a longer --idle-timeout",
                    self.idle.as_secs()
                ),
            )),
            Ok(None) => Ok(None),
            Ok(Some(Err(e))) => Err(AppError::bad_request(format!(
                "the request body could not be read ({e}): the upload was cut off"
            ))),
            Ok(Some(Ok(chunk))) => {
                self.seen += chunk.len() as u64;
                if self.seen > self.limit {
                    return Err(AppError::too_large(self.limit));
                }
                Ok(Some(chunk))
            }
        }
    }

    /// The whole body as the pieces it arrived in (no copy into one buffer).
    pub async fn pieces(mut self) -> Result<Vec<Bytes>, AppError> {
        let mut out = Vec::new();
        while let Some(chunk) = self.next().await? {
            out.push(chunk);
        }
        Ok(out)
    }

    /// Collects a small body whole.
    pub async fn collect(mut self, expected: usize) -> Result<Vec<u8>, AppError> {
        let mut out = Vec::with_capacity(expected);
        while let Some(chunk) = self.next().await? {
            out.extend_from_slice(&chunk);
        }
        Ok(out)
    }
}

/// A JSON request body read whole into a `T`: at most `limit` bytes (413 past it; 408 for
/// one that stalls or trickles, as [`BodyChunks`]). `bad` makes the 4xx for a body that is
/// not a `T`: it says what was expected, with an example ([`not_like`] for the usual 400).
pub async fn json<T: serde::de::DeserializeOwned>(
    body: Body,
    limit: u64,
    limits: &Limits,
    bad: impl FnOnce(serde_json::Error) -> AppError,
) -> Result<T, AppError> {
    json_else(body, limit, limits, None, bad).await
}

/// [`json`] where an empty body (or one of white space only) is `T::default()`.
pub async fn json_or_default<T: serde::de::DeserializeOwned + Default>(
    body: Body,
    limit: u64,
    limits: &Limits,
    bad: impl FnOnce(serde_json::Error) -> AppError,
) -> Result<T, AppError> {
    json_else(body, limit, limits, Some(T::default), bad).await
}

/// [`json`], with what an empty body gives (`None`: it is parsed, and fails, as any other).
async fn json_else<T: serde::de::DeserializeOwned>(
    body: Body,
    limit: u64,
    limits: &Limits,
    empty: Option<fn() -> T>,
    bad: impl FnOnce(serde_json::Error) -> AppError,
) -> Result<T, AppError> {
    let bytes = BodyChunks::new(body, limit, limits).collect(1024).await?;
    match empty {
        Some(empty) if bytes.iter().all(u8::is_ascii_whitespace) => Ok(empty()),
        _ => serde_json::from_slice(&bytes).map_err(bad),
    }
}

/// The 400 for a body that is not JSON like `example`.
pub fn not_like(example: &str) -> impl FnOnce(serde_json::Error) -> AppError + '_ {
    move |e| AppError::bad_request(format!("the body must be JSON like {example}: {e}"))
}

/// A response body fed by a blocking producer: it sends chunks with `blocking_send`, which
/// waits while the client is slower than the disk, so at most `depth` chunks are queued.
pub fn channel_body(
    depth: usize,
) -> (
    tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
    Body,
) {
    let (tx, rx) = tokio::sync::mpsc::channel(depth);
    (
        tx,
        Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx)),
    )
}

/// The `Content-Length` of a request, if it has a valid one.
pub fn content_length(headers: &axum::http::HeaderMap) -> Result<Option<u64>, AppError> {
    match headers.get(axum::http::header::CONTENT_LENGTH) {
        None => Ok(None),
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .map(Some)
            .ok_or_else(|| AppError::bad_request("the Content-Length header is not a number")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A body sending one byte every 50 ms, forever: never idle, never done.
    fn trickle() -> Body {
        let s = futures_util::stream::unfold((), |()| async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            Some((Ok::<_, std::io::Error>(Bytes::from_static(b"x")), ()))
        });
        Body::from_stream(s)
    }

    #[tokio::test]
    async fn a_trickle_is_cut_by_the_body_deadline_not_only_the_idle_timeout() {
        let limits = Limits {
            idle_timeout: Duration::from_secs(5),
            body_deadline: BodyDeadline {
                base: Duration::from_millis(400),
                min_rate: 100,
            },
            ..Limits::default()
        };
        let started = std::time::Instant::now();
        let err = BodyChunks::new(trickle(), u64::MAX, &limits)
            .collect(0)
            .await
            .unwrap_err();
        // 20 B/s against 400 ms + 1 s per 100 B: late after about 0.5 s.
        assert_eq!(
            (err.status.as_u16(), err.code.as_str()),
            (408, "request_timeout")
        );
        assert!(err.message.contains("--body-deadline"), "{}", err.message);
        let took = started.elapsed();
        assert!(took < Duration::from_secs(4), "cut after {took:?}");
    }

    #[test]
    fn the_deadline_grows_with_what_arrived() {
        let d = BodyDeadline {
            base: Duration::from_secs(60),
            min_rate: 1 << 20,
        };
        assert_eq!(d.allowed(0), Duration::from_secs(60));
        assert_eq!(d.allowed(10 << 20), Duration::from_secs(70));
        let whole = BodyDeadline { min_rate: 0, ..d };
        assert_eq!(whole.allowed(u64::MAX), Duration::from_secs(60));
    }
}
