//! Request bodies as bounded, time-limited streams, and response bodies fed by a blocking
//! producer through a bounded channel (the backpressure of every large transfer).

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tsblob_proto::ErrorCode;

use axum::body::{Body, BodyDataStream};
use axum::http::StatusCode;
use bytes::{Buf, Bytes};
use futures_util::task::AtomicWaker;
use futures_util::StreamExt;
use http_body::Frame;

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

/// What a stream of steps carries: each step's pieces in order, or the error that cuts it.
pub type StepItem = Result<Vec<Bytes>, std::io::Error>;

/// The receiving side of a [`step_body`].
pub type StepRx = tokio::sync::mpsc::Receiver<StepItem>;

/// A response body fed a step (many pieces) at a time, for the connection to write each
/// step as ONE HTTP chunk of many slices.
///
/// Why: axum's `Body` carries `Bytes` frames, and hyper writes each frame as a chunk of its
/// own (a size line and a CRLF around it) and flushes its write queue every 16 frames. A
/// query step of heads and payload slices sent frame by frame cost records/s (a `writev`
/// per 16 pieces, a chunk per piece for the client to parse:
/// `docs/benchmarks/range-slices-2026-11-26.md`); copied into one buffer, it costs a copy of
/// every payload. [`answer`] (applied to every response in `serve.rs`) hands hyper the
/// step itself as one frame whose [`Buf`](bytes::Buf) is the step's slices: one chunk,
/// gathered by `writev` straight from the pages and mappings they are in.
///
/// The returned `Body` works on its own too (a response not passed through [`answer`],
/// as the in-process router of the tests): it yields the pieces one frame each.
pub fn step_body(depth: usize, sent: prometheus::IntCounter) -> (StepTx, Body, StepAnswer) {
    let (tx, rx) = tokio::sync::mpsc::channel(depth);
    let slot = Arc::new(parking_lot::Mutex::new(Some(rx)));
    let queued = Arc::<Queued>::default();
    let body = Body::new(PieceByPiece {
        slot: Arc::clone(&slot),
        rx: None,
        taken: false,
        queue: VecDeque::new(),
        queued: Arc::clone(&queued),
    });
    let steps = StepAnswer {
        slot,
        sent,
        queued: Arc::clone(&queued),
    };
    (StepTx { tx, queued }, body, steps)
}

/// The sending side of a [`step_body`]: counts the bytes of the steps it sends until the
/// connection has written them ([`StepTx::drained`]).
pub struct StepTx {
    tx: tokio::sync::mpsc::Sender<StepItem>,
    queued: Arc<Queued>,
}

impl StepTx {
    /// Sends a step (waiting for room in the channel); `Err` once the body is gone (the
    /// client left).
    pub async fn send(
        &self,
        item: StepItem,
    ) -> Result<(), tokio::sync::mpsc::error::SendError<StepItem>> {
        let n = item_bytes(&item);
        self.queued.unwritten.fetch_add(n, Ordering::AcqRel);
        self.tx.send(item).await.inspect_err(|_| {
            self.queued.unwritten.fetch_sub(n, Ordering::AcqRel);
        })
    }

    /// Sends a step if the channel has room now; gives it back otherwise.
    pub fn try_send(
        &self,
        item: StepItem,
    ) -> Result<(), tokio::sync::mpsc::error::TrySendError<StepItem>> {
        let n = item_bytes(&item);
        self.queued.unwritten.fetch_add(n, Ordering::AcqRel);
        self.tx.try_send(item).inspect_err(|_| {
            self.queued.unwritten.fetch_sub(n, Ordering::AcqRel);
        })
    }

    /// Whether the body is gone (the client left).
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// Resolves once the body is gone.
    pub async fn closed(&self) {
        self.tx.closed().await
    }

    /// Bytes of the steps sent that the connection has not written yet (queued in the
    /// channel or in the connection's write queue).
    pub fn unwritten(&self) -> u64 {
        self.queued.unwritten.load(Ordering::Acquire)
    }

    /// Waits until at most `most` bytes sent are unwritten: `true`, or `false` once the
    /// body is gone.
    pub async fn drained(&self, most: u64) -> bool {
        let drained = std::future::poll_fn(|cx| {
            self.queued.drained.register(cx.waker());
            if self.unwritten() <= most {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        });
        tokio::select! {
            _ = drained => true,
            _ = self.tx.closed() => false,
        }
    }
}

/// The bytes of a step.
fn item_bytes(item: &StepItem) -> u64 {
    match item {
        Ok(pieces) => pieces.iter().map(|b| b.len() as u64).sum(),
        Err(_) => 0,
    }
}

/// The response extension of a [`step_body`] answer: [`answer`] takes its steps from it.
#[derive(Clone)]
pub struct StepAnswer {
    slot: Arc<parking_lot::Mutex<Option<StepRx>>>,
    /// `tsblob_http_sent_bytes_total` (which the metrics' wrapper of the `Body` would
    /// count, and does not see here).
    sent: prometheus::IntCounter,
    queued: Arc<Queued>,
}

/// The body of every response as hyper sees it: axum's, or the steps of a [`step_body`].
pub enum Answer {
    Axum(Body),
    Steps(Steps),
}

/// Every response on its way to the connection: one fed by a [`step_body`] is answered
/// from its steps, a frame per step ([`Steps`]); any other as axum built it.
pub fn answer(resp: axum::response::Response) -> axum::http::Response<Answer> {
    let (mut parts, body) = resp.into_parts();
    if let Some(a) = parts.extensions.remove::<StepAnswer>() {
        if let Some(rx) = a.slot.lock().take() {
            let steps = Steps {
                rx,
                sent: a.sent,
                queued: a.queued,
            };
            return axum::http::Response::from_parts(parts, Answer::Steps(steps));
        }
    }
    axum::http::Response::from_parts(parts, Answer::Axum(body))
}

impl http_body::Body for Answer {
    type Data = Chunk;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Chunk>, axum::Error>>> {
        match self.get_mut() {
            Answer::Axum(b) => Pin::new(b)
                .poll_frame(cx)
                .map(|f| f.map(|f| f.map(|f| f.map_data(Chunk::Bytes)))),
            Answer::Steps(s) => Pin::new(s).poll_frame(cx).map(|f| {
                f.map(|f| {
                    f.map(|f| f.map_data(Chunk::Slices))
                        .map_err(axum::Error::new)
                })
            }),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Answer::Axum(b) => b.is_end_stream(),
            Answer::Steps(_) => false,
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match self {
            Answer::Axum(b) => b.size_hint(),
            Answer::Steps(_) => http_body::SizeHint::default(),
        }
    }
}

/// A frame of an [`Answer`].
pub enum Chunk {
    Bytes(Bytes),
    Slices(Slices),
}

impl Buf for Chunk {
    fn remaining(&self) -> usize {
        match self {
            Chunk::Bytes(b) => b.remaining(),
            Chunk::Slices(s) => s.remaining(),
        }
    }

    fn chunk(&self) -> &[u8] {
        match self {
            Chunk::Bytes(b) => b.chunk(),
            Chunk::Slices(s) => s.chunk(),
        }
    }

    fn advance(&mut self, n: usize) {
        match self {
            Chunk::Bytes(b) => b.advance(n),
            Chunk::Slices(s) => s.advance(n),
        }
    }

    fn chunks_vectored<'a>(&'a self, dst: &mut [std::io::IoSlice<'a>]) -> usize {
        match self {
            Chunk::Bytes(b) => b.chunks_vectored(dst),
            Chunk::Slices(s) => s.chunks_vectored(dst),
        }
    }
}

/// Frames of [`Steps`] handed to the connection and not yet written whole. hyper queues up
/// to 16 frames (or ~400 KiB) before it writes: a step may be small and keep several
/// mappings alive (`query/produce.rs`, `WINDOWS`), so the body waits for its older frames
/// to be written instead, and a query's pieces stay bounded however slowly its client
/// reads.
const FRAMES_QUEUED: usize = 2;

/// The body of a [`step_body`] answer as hyper sees it: a frame per step.
pub struct Steps {
    rx: StepRx,
    sent: prometheus::IntCounter,
    queued: Arc<Queued>,
}

/// The frames of a [`Steps`] not yet written whole, and the task waiting for one to be;
/// the bytes its sender sent and the connection has not written, and the producer waiting
/// for them to be ([`StepTx::drained`]).
#[derive(Default)]
struct Queued {
    frames: AtomicUsize,
    waker: AtomicWaker,
    unwritten: AtomicU64,
    drained: AtomicWaker,
}

impl Queued {
    /// `n` bytes were written (or dropped unwritten with their frame).
    fn written(&self, n: usize) {
        if n > 0 {
            self.unwritten.fetch_sub(n as u64, Ordering::AcqRel);
            self.drained.wake();
        }
    }
}

impl http_body::Body for Steps {
    type Data = Slices;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Slices>, std::io::Error>>> {
        let this = self.get_mut();
        if this.queued.frames.load(Ordering::Acquire) >= FRAMES_QUEUED {
            this.queued.waker.register(cx.waker());
            if this.queued.frames.load(Ordering::Acquire) >= FRAMES_QUEUED {
                return Poll::Pending;
            }
        }
        loop {
            let pieces = match std::task::ready!(this.rx.poll_recv(cx)) {
                None => return Poll::Ready(None),
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                Some(Ok(pieces)) => pieces,
            };
            let slices = Slices::new(pieces, &this.queued);
            if slices.remaining() == 0 {
                continue;
            }
            this.sent.inc_by(slices.remaining() as u64);
            return Poll::Ready(Some(Ok(Frame::data(slices))));
        }
    }
}

/// One step's pieces as one frame: a [`Buf`] of many slices, each dropped (its memory
/// given back, its mapping released) as soon as it is written.
pub struct Slices {
    parts: VecDeque<Bytes>,
    left: usize,
    _queued: InQueue,
}

impl Slices {
    fn new(pieces: Vec<Bytes>, queued: &Arc<Queued>) -> Slices {
        let parts: VecDeque<Bytes> = pieces.into_iter().filter(|b| !b.is_empty()).collect();
        let left = parts.iter().map(Bytes::len).sum();
        queued.frames.fetch_add(1, Ordering::AcqRel);
        Slices {
            parts,
            left,
            _queued: InQueue(Arc::clone(queued)),
        }
    }
}

/// A frame counted in its body's [`Queued`] until it is dropped.
struct InQueue(Arc<Queued>);

impl Drop for Slices {
    fn drop(&mut self) {
        // What was not written is dropped with the frame (the connection closed).
        self._queued.0.written(self.left);
    }
}

impl Drop for InQueue {
    fn drop(&mut self) {
        self.0.frames.fetch_sub(1, Ordering::AcqRel);
        self.0.waker.wake();
    }
}

impl Buf for Slices {
    fn remaining(&self) -> usize {
        self.left
    }

    fn chunk(&self) -> &[u8] {
        self.parts.front().map_or(&[], |b| b)
    }

    fn advance(&mut self, mut n: usize) {
        assert!(n <= self.left, "advanced past the end of a step");
        self.left -= n;
        self._queued.0.written(n);
        while n > 0 {
            let Some(front) = self.parts.front_mut() else {
                return;
            };
            if n < front.len() {
                front.advance(n);
                return;
            }
            n -= front.len();
            self.parts.pop_front();
        }
    }

    fn chunks_vectored<'a>(&'a self, dst: &mut [std::io::IoSlice<'a>]) -> usize {
        let mut n = 0;
        for (slot, part) in dst.iter_mut().zip(&self.parts) {
            *slot = std::io::IoSlice::new(part);
            n += 1;
        }
        n
    }
}

/// A [`step_body`] answer as an axum `Body` of its own: a frame per piece (from the channel
/// unless [`answer`] took it first).
struct PieceByPiece {
    slot: Arc<parking_lot::Mutex<Option<StepRx>>>,
    rx: Option<StepRx>,
    taken: bool,
    queue: VecDeque<Bytes>,
    queued: Arc<Queued>,
}

impl Drop for PieceByPiece {
    fn drop(&mut self) {
        let left = self.queue.iter().map(Bytes::len).sum();
        self.queued.written(left);
    }
}

impl http_body::Body for PieceByPiece {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let this = self.get_mut();
        loop {
            if let Some(piece) = this.queue.pop_front() {
                // (Handed to the connection: counted as written.)
                this.queued.written(piece.len());
                return Poll::Ready(Some(Ok(Frame::data(piece))));
            }
            if !std::mem::replace(&mut this.taken, true) {
                this.rx = this.slot.lock().take();
            }
            let Some(rx) = this.rx.as_mut() else {
                return Poll::Ready(None);
            };
            match std::task::ready!(rx.poll_recv(cx)) {
                None => return Poll::Ready(None),
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                Some(Ok(pieces)) => this
                    .queue
                    .extend(pieces.into_iter().filter(|b| !b.is_empty())),
            }
        }
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

    /// A response of `step_body` as the connection gets it ([`answer`]).
    fn served(sent: prometheus::IntCounter) -> (StepTx, Answer) {
        let (tx, body, steps) = step_body(4, sent);
        let mut resp = axum::response::Response::new(body);
        resp.extensions_mut().insert(steps);
        (tx, answer(resp).into_body())
    }

    fn step(pieces: &[&'static [u8]]) -> StepItem {
        Ok(pieces.iter().map(|p| Bytes::from_static(p)).collect())
    }

    #[tokio::test]
    async fn a_step_is_one_frame_of_its_pieces_gathered_without_a_copy() {
        use http_body_util::BodyExt;
        let sent = prometheus::IntCounter::new("sent", "sent").unwrap();
        let (tx, mut body) = served(sent.clone());
        let (a, b) = (Bytes::from_static(b"head"), Bytes::from_static(b"payload"));
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        tx.send(Ok(vec![a, Bytes::new(), b])).await.unwrap();
        tx.send(step(&[b"end"])).await.unwrap();
        drop(tx);
        let first = body
            .frame()
            .await
            .unwrap()
            .unwrap()
            .into_data()
            .ok()
            .unwrap();
        let Chunk::Slices(mut first) = first else {
            panic!("not a frame of slices");
        };
        assert_eq!(first.remaining(), 11);
        let mut io = [std::io::IoSlice::new(&[]); 4];
        assert_eq!(
            first.chunks_vectored(&mut io),
            2,
            "the empty piece left out"
        );
        assert_eq!((io[0].as_ptr(), io[1].as_ptr()), (pa, pb), "no copy");
        first.advance(6);
        assert_eq!(first.chunk(), b"yload");
        assert_eq!(first.parts.len(), 1, "a written piece is dropped at once");
        first.advance(5);
        assert_eq!(first.remaining(), 0);
        let second = body
            .frame()
            .await
            .unwrap()
            .unwrap()
            .into_data()
            .ok()
            .unwrap();
        assert_eq!(second.chunk(), b"end");
        // (Written: two frames not yet written would hold back even the end.)
        drop((first, second));
        assert!(body.frame().await.is_none());
        assert_eq!(sent.get(), 14, "the bytes sent counted");
    }

    #[tokio::test]
    async fn a_step_answer_waits_while_two_of_its_frames_are_unwritten() {
        use http_body_util::BodyExt;
        let sent = prometheus::IntCounter::new("sent", "sent").unwrap();
        let (tx, mut body) = served(sent);
        for _ in 0..3 {
            tx.send(step(&[b"a step"])).await.unwrap();
        }
        // The connection's side: frames handed over, kept until "written" (dropped).
        let (out, mut handed) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(Ok(frame)) = body.frame().await {
                if out.send(frame).is_err() {
                    return;
                }
            }
        });
        let one = handed.recv().await.unwrap();
        let two = handed.recv().await.unwrap();
        // Both still queued in the connection: the third waits, though it is there.
        let waiting = tokio::time::timeout(Duration::from_millis(200), handed.recv()).await;
        assert!(waiting.is_err(), "a third frame handed over");
        drop(one);
        let three = tokio::time::timeout(Duration::from_secs(5), handed.recv()).await;
        assert!(three.is_ok(), "not woken once a frame was written");
        drop((two, tx));
    }

    #[tokio::test]
    async fn a_step_body_not_passed_through_answer_yields_its_pieces() {
        let (tx, body, _steps) = step_body(4, prometheus::IntCounter::new("s", "s").unwrap());
        tx.send(step(&[b"ab", b"", b"c"])).await.unwrap();
        tx.send(step(&[b"d"])).await.unwrap();
        drop(tx);
        let all = axum::body::to_bytes(body, 1 << 10).await.unwrap();
        assert_eq!(&all[..], b"abcd");
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
