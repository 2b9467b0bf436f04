//! Request bodies as bounded, time-limited streams, and response bodies fed by a blocking
//! producer through a bounded channel (the backpressure of every large transfer).

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, BodyDataStream};
use axum::http::StatusCode;
use bytes::Bytes;
use futures_util::StreamExt;
use parking_lot::Mutex;

use super::errors::AppError;

/// Chunks of a request body, refusing more than `limit` bytes in total and a client that
/// sends nothing for `idle`.
pub struct BodyChunks {
    stream: BodyDataStream,
    seen: u64,
    limit: u64,
    idle: Duration,
}

impl BodyChunks {
    pub fn new(body: Body, limit: u64, idle: Duration) -> BodyChunks {
        BodyChunks {
            stream: body.into_data_stream(),
            seen: 0,
            limit,
            idle,
        }
    }

    /// Bytes received so far.
    pub fn seen(&self) -> u64 {
        self.seen
    }

    /// The next chunk; `Ok(None)` at the end of the body.
    pub async fn next(&mut self) -> Result<Option<Bytes>, AppError> {
        match tokio::time::timeout(self.idle, self.stream.next()).await {
            Err(_) => Err(AppError::new(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
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

    /// Collects a small body whole.
    pub async fn collect(mut self, expected: usize) -> Result<Vec<u8>, AppError> {
        let mut out = Vec::with_capacity(expected);
        while let Some(chunk) = self.next().await? {
            out.extend_from_slice(&chunk);
        }
        Ok(out)
    }

    /// The body as an `AsyncRead` for `SyncIoBridge`. Why it failed (size, stall, cut-off)
    /// is left in the returned slot, because the engine only sees an `io::Error`.
    pub fn into_reader(
        self,
    ) -> (
        impl tokio::io::AsyncRead + Send + Unpin + 'static,
        Arc<Mutex<Option<AppError>>>,
    ) {
        let slot: Arc<Mutex<Option<AppError>>> = Arc::new(Mutex::new(None));
        let s = slot.clone();
        let stream = futures_util::stream::unfold((self, s), |(mut chunks, slot)| async move {
            match chunks.next().await {
                Ok(Some(bytes)) => Some((Ok(bytes), (chunks, slot))),
                Ok(None) => None,
                Err(e) => {
                    let io = std::io::Error::other(e.message.clone());
                    *slot.lock() = Some(e);
                    Some((Err(io), (chunks, slot)))
                }
            }
        });
        (tokio_util::io::StreamReader::new(Box::pin(stream)), slot)
    }
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
