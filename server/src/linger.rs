//! A request body its handler let go of unread is read on and thrown away, a little, so its
//! client's send completes and it reads the answer.
//!
//! Bug "an early answer is lost to a reset" (races probe of 2026-11-28): a chunked write
//! to a bucket that did not exist was answered 404 `bucket_not_found` before its body was
//! read, and hyper, its body dropped, closed the connection with the body's bytes unread.
//! A socket closed with unread bytes sends a reset: a client that sends its whole body
//! before reading the answer (Python's `http.client`, so `requests`) got `BrokenPipeError`
//! in place of the 404 (98–131 of ~1,700 such writes a run), and on some systems a reset
//! also discards an answer the client had received but not read. So a body dropped before
//! its end is handed to a task that reads it to its end (hyper then keeps the connection)
//! for at most [`LINGER_BYTES`] and [`LINGER_TIME`], as a web server's lingering close does;
//! a body announced longer than that is let go at once (hyper closes the connection, as
//! before: its 413 says `Connection: close`).

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

/// The most of an unread body read on after its handler let it go.
pub const LINGER_BYTES: u64 = 1 << 20;
/// The longest an unread body is read on after its handler let it go.
pub const LINGER_TIME: Duration = Duration::from_secs(2);

/// A request's body, read on when dropped before its end.
pub struct Lingering {
    body: Option<Incoming>,
    /// The body ended (or failed): nothing is left to read.
    ended: bool,
}

impl Lingering {
    pub fn new(body: Incoming) -> Lingering {
        Lingering {
            body: Some(body),
            ended: false,
        }
    }
}

impl Body for Lingering {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        let Some(body) = this.body.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = Pin::new(body).poll_frame(cx);
        if matches!(polled, Poll::Ready(None | Some(Err(_)))) {
            this.ended = true;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.body
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Body::size_hint)
    }
}

impl Drop for Lingering {
    fn drop(&mut self) {
        let Some(body) = self.body.take() else {
            return;
        };
        if self.ended || body.is_end_stream() || body.size_hint().lower() > LINGER_BYTES {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(read_on(body));
        }
    }
}

/// Reads `body` to its end, at most [`LINGER_BYTES`] of it within [`LINGER_TIME`].
async fn read_on(mut body: Incoming) {
    let _ = tokio::time::timeout(LINGER_TIME, async {
        let mut read = 0u64;
        while let Some(Ok(frame)) =
            std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await
        {
            read += frame.data_ref().map_or(0, |d| d.len() as u64);
            if read > LINGER_BYTES {
                return;
            }
        }
    })
    .await;
}
