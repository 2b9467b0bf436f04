//! The per-record results of the routes that answer one result per record (batch writes,
//! bulk label updates and removals), kept within bounds (hostile probe of 2026-11-28): a
//! batch of 100,000 records that all failed answered 45 MB (each message repeated the
//! bucket and entry names), from a 102 KB zstd body, outside `--memory-budget`, and held
//! it for `--send-timeout` when its client did not read: 64 connections took the server
//! from 46 MB to 2.95 GB.
//!
//! [`Tally`]: the first [`FULL_MESSAGES`] failures of each code keep their message, later
//! ones a short one (their `ts`, `status` and `code` say the rest), and the answer's bytes
//! are counted as results arrive, for the route to cover in the memory budget.
//! [`held_json`]: the answer is sent in pieces, its room in the budget given back once the
//! last piece is taken.

use std::collections::HashMap;

use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

use super::budget::Held;
use crate::answers::RecordResult;

/// Failures of one code whose messages are kept whole in an answer; later ones get
/// [`REPEATED`].
pub const FULL_MESSAGES: u32 = 16;
/// The message of a failure past the first [`FULL_MESSAGES`] of its code.
pub const REPEATED: &str = "as the first results with this code say";
/// A result's bytes in the answer besides its error (`{"ts":…,"status":…}`).
const RESULT_BYTES: u64 = 48;
/// The pieces an answer is sent in: hyper asks for the next once it has room for it.
const PIECE: usize = 64 << 10;

/// Results counted so far: their bytes in the answer, and failures per code.
#[derive(Default)]
pub struct Tally {
    counted: usize,
    bytes: u64,
    codes: HashMap<String, u32>,
}

impl Tally {
    /// Counts the results not counted yet, shortening the messages of repeated codes.
    pub fn take(&mut self, results: &mut [RecordResult]) {
        for r in results.iter_mut().skip(self.counted) {
            self.bytes += RESULT_BYTES;
            if let Some(e) = r.error.as_mut() {
                let n = self.codes.entry(e.code.clone()).or_insert(0);
                *n += 1;
                if *n > FULL_MESSAGES {
                    e.message = REPEATED.to_string();
                }
                self.bytes += (e.code.len() + e.message.len()) as u64 + 32;
            }
        }
        self.counted = results.len();
    }

    /// The answer's bytes for the results counted (about: escapes not counted).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// `json` as a JSON answer with `status`, its body sent in [`PIECE`]s (with its
/// `Content-Length`: the body's size is exact); `held`, its room in the memory budget
/// (resized to its length when the budget has room, kept as it is otherwise), is given back
/// once hyper has taken the last piece (a client that does not read keeps it, up to
/// `--send-timeout`). `None` for a short answer made before anything was reserved.
pub fn held_json(status: StatusCode, json: Vec<u8>, mut held: Option<Held>) -> Response {
    if let Some(h) = held.as_mut() {
        let _ = h.try_resize(json.len() as u64);
    }
    let body = Body::new(HeldBody {
        rest: Bytes::from(json),
        held,
    });
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

struct HeldBody {
    rest: Bytes,
    held: Option<Held>,
}

impl http_body::Body for HeldBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        if self.rest.is_empty() {
            self.held = None;
            return std::task::Poll::Ready(None);
        }
        let n = self.rest.len().min(PIECE);
        let piece = self.rest.split_to(n);
        if self.rest.is_empty() {
            self.held = None;
        }
        std::task::Poll::Ready(Some(Ok(http_body::Frame::data(piece))))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.rest.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::answers::ErrorDetail;

    #[test]
    fn repeated_failures_of_a_code_keep_their_message_only_at_first() {
        let failed = |code: &str, ts: u64| RecordResult {
            ts: Some(ts),
            status: 409,
            error: Some(ErrorDetail {
                code: code.into(),
                message: format!("a long message naming bucket and entry for {ts}"),
            }),
        };
        let mut results: Vec<RecordResult> = (0..40).map(|ts| failed("a", ts)).collect();
        let mut tally = Tally::default();
        tally.take(&mut results[..10]);
        results.push(failed("b", 99));
        tally.take(&mut results);
        let full: Vec<bool> = results
            .iter()
            .map(|r| r.error.as_ref().is_some_and(|e| e.message != REPEATED))
            .collect();
        assert!(full[..16].iter().all(|f| *f));
        assert!(full[16..40].iter().all(|f| !*f));
        assert!(full[40], "another code keeps its message");
        let json = serde_json::to_vec(&results).unwrap().len() as u64;
        assert!(tally.bytes() >= json, "{} < {json}", tally.bytes());
    }
}
