//! Receiving a network body before the engine is asked for anything.
//!
//! A large or chunked single-record body is received asynchronously into a spool (an
//! anonymous temporary file in the data folder), appended in ~128 KiB pieces on the
//! blocking pool, and only once it is complete is it handed to the engine with one call.
//! So a slow client holds no entry mutex, no blocking thread and no quota reservation
//! while it sends, and a body that stops short, stalls or exceeds a limit stores nothing,
//! reserves nothing and evicts nothing.
//!
//! The spool is the engine's ([`tsblob_storage::Spool`]): its appends pass the free-space
//! guard and refuse early a body that a HARD quota can no longer fit.

use bytes::Bytes;
use tokio::task::JoinHandle;
use tsblob_storage::{Result, Spool, Store, WriteMeta};

use super::body::BodyChunks;
use super::errors::{blocking, AppError};

/// Bytes gathered from the network before one append to the spool. Small enough that a
/// piece is still in the CPU's cache when the blocking pool copies it into the page cache:
/// against 1 MiB, 10 MiB single writes took ~7 % less server CPU (median of 8 and 12 runs)
/// and ran ~40 % faster (docs/benchmarks/limit-store-2026-11-23.md); more, smaller
/// hand-offs to the blocking pool cost less than copying out of memory twice.
const PIECE: usize = 128 << 10;

/// Writes the spooled payload as one record: the engine reserves exactly its length
/// (evicting, in a FIFO bucket, only for that). Blocking.
pub fn write_spooled(
    store: &Store,
    bucket: &str,
    entry: &str,
    meta: &WriteMeta,
    spool: Spool,
) -> Result<u64> {
    store.write_spooled(bucket, entry, meta, spool)
}

/// Appends the received pieces on the blocking pool (one `pwritev`, no gathering copy),
/// handing the spool back.
fn spawn_append(mut spool: Spool, pieces: Vec<Bytes>) -> JoinHandle<(Spool, Result<()>)> {
    tokio::task::spawn_blocking(move || {
        let slices: Vec<&[u8]> = pieces.iter().map(|b| b.as_ref()).collect();
        let r = spool.append_pieces(&slices);
        (spool, r)
    })
}

async fn settle(handle: JoinHandle<(Spool, Result<()>)>) -> Result<Spool, AppError> {
    match handle.await {
        Ok((spool, Ok(()))) => Ok(spool),
        Ok((_, Err(e))) => Err(e.into()),
        Err(e) => Err(AppError::internal(format!(
            "a spool append failed to run: {e}"
        ))),
    }
}

/// The spool, once no append is running on it.
async fn idle(
    spool: &mut Option<Spool>,
    in_flight: &mut Option<JoinHandle<(Spool, Result<()>)>>,
) -> Result<Spool, AppError> {
    if let Some(h) = in_flight.take() {
        return settle(h).await;
    }
    spool
        .take()
        .ok_or_else(|| AppError::internal("the spool of a request went missing"))
}

/// A payload being spooled as it arrives: pieces are gathered to ~128 KiB and appended on
/// the blocking pool while the next ones arrive (one append at a time). Used for a large
/// single-record body ([`receive`]) and for a large record inside a batch.
pub struct SpoolSink {
    spool: Option<Spool>,
    in_flight: Option<JoinHandle<(Spool, Result<()>)>>,
    piece: Vec<Bytes>,
    piece_len: usize,
}

impl SpoolSink {
    /// A new spool of `bucket` for the record `meta` of `entry` (fails for an unknown
    /// bucket): a large one becomes its own block, uncopied ([`Store::spool_for`]).
    /// `announced`: the payload's length when the client gave it, so that a FIFO bucket
    /// refuses a payload it could never hold before evicting for its first bytes
    /// ([`Spool::announce`]).
    pub async fn new(
        store: &Store,
        bucket: &str,
        entry: &str,
        meta: &WriteMeta,
        announced: Option<u64>,
    ) -> Result<SpoolSink, AppError> {
        let (s, b, e, m) = (
            store.clone(),
            bucket.to_string(),
            entry.to_string(),
            meta.clone(),
        );
        let spool = blocking(move || {
            let mut spool = s.spool_for(&b, &e, &m)?;
            if let Some(n) = announced {
                spool.announce(n);
            }
            Ok(spool)
        })
        .await?;
        Ok(SpoolSink {
            spool: Some(spool),
            in_flight: None,
            piece: Vec::new(),
            piece_len: 0,
        })
    }

    /// Adds received bytes; appends when ~128 KiB is gathered.
    pub async fn push(&mut self, bytes: Bytes) -> Result<(), AppError> {
        self.piece_len += bytes.len();
        self.piece.push(bytes);
        if self.piece_len >= PIECE {
            self.append().await?;
        }
        Ok(())
    }

    async fn append(&mut self) -> Result<(), AppError> {
        let s = idle(&mut self.spool, &mut self.in_flight).await?;
        self.in_flight = Some(spawn_append(s, std::mem::take(&mut self.piece)));
        self.piece_len = 0;
        Ok(())
    }

    /// The spool with everything pushed, and the CRC32C of its bytes (the spool's own, taken
    /// as its appends ran: computing a second one here cost a pass over every payload byte,
    /// half the CRC work of a large write).
    pub async fn finish(mut self) -> Result<(Spool, u32), AppError> {
        if self.piece_len > 0 {
            self.append().await?;
        }
        let spool = idle(&mut self.spool, &mut self.in_flight).await?;
        let crc = spool.crc();
        Ok((spool, crc))
    }

    /// As [`SpoolSink::finish`], then `then` with the spool and its CRC: the last piece's
    /// append and `then` (the engine's write) run in **one** blocking call, where `finish`
    /// and a second blocking call handed off to the pool and back twice after the last
    /// byte (docs/benchmarks/write-large-2026-11-26.md). On the blocking pool, not on this
    /// worker with `block_in_place`: that made every such write hand the worker's tasks to
    /// another pool thread, which then ran as a worker and kept its allocator's pages
    /// (docs/benchmarks/rss-2026-11-27.md).
    pub async fn finish_then<T, F>(mut self, then: F) -> Result<T, AppError>
    where
        F: FnOnce(Spool, u32) -> Result<T, AppError> + Send + 'static,
        T: Send + 'static,
    {
        let mut spool = idle(&mut self.spool, &mut self.in_flight).await?;
        let rest = std::mem::take(&mut self.piece);
        blocking(move || {
            if !rest.is_empty() {
                let slices: Vec<&[u8]> = rest.iter().map(|b| b.as_ref()).collect();
                spool.append_pieces(&slices)?;
            }
            let crc = spool.crc();
            then(spool, crc)
        })
        .await
    }

    /// Gives up: a running append finishes before the spool is dropped with its task.
    pub async fn abandon(mut self) {
        let _ = idle(&mut self.spool, &mut self.in_flight).await;
    }
}

/// A single body on its way to a spool: the length its request announced (if any), the
/// chunks received already, and the rest.
pub struct Incoming {
    pub announced: Option<u64>,
    pub arrived: Vec<Bytes>,
    pub chunks: BodyChunks,
}

/// Receives the whole body (`arrived`, the chunks received already, then the rest of
/// `chunks`) into a new spool for the record `meta` of `bucket`/`entry`, then
/// runs `then` with the spool and the body's CRC32C (for `if_exists=compare`) in the same
/// engine call as the last append ([`SpoolSink::finish_then`]). The network is awaited on
/// the async side only; each ~128 KiB piece is appended on the blocking pool while the next
/// one arrives. Any failure (limit, stall, cut-off, quota, disk) drops the spool: nothing
/// was stored, reserved or evicted.
pub async fn receive_then<T, F>(
    store: &Store,
    bucket: &str,
    entry: &str,
    meta: &WriteMeta,
    body: Incoming,
    then: F,
) -> Result<T, AppError>
where
    F: FnOnce(Spool, u32) -> Result<T, AppError> + Send + 'static,
    T: Send + 'static,
{
    let Incoming {
        announced,
        arrived,
        mut chunks,
    } = body;
    let mut sink = SpoolSink::new(store, bucket, entry, meta, announced).await?;
    for bytes in arrived {
        if let Err(e) = sink.push(bytes).await {
            sink.abandon().await;
            return Err(e);
        }
    }
    loop {
        let pushed = match chunks.next().await {
            Ok(Some(bytes)) => sink.push(bytes).await,
            Ok(None) => return sink.finish_then(then).await,
            Err(e) => Err(e),
        };
        if let Err(e) = pushed {
            sink.abandon().await;
            return Err(e);
        }
    }
}
