//! Receiving a network body before the engine is asked for anything.
//!
//! A large or chunked single-record body is received asynchronously into a spool (an
//! anonymous temporary file in the data folder), appended in ~1 MiB pieces on the
//! blocking pool, and only once it is complete is it handed to the engine with one call.
//! So a slow client holds no entry mutex, no blocking thread and no quota reservation
//! while it sends, and a body that stops short, stalls or exceeds a limit stores nothing,
//! reserves nothing and evicts nothing.
//!
//! [`open`] and [`write_spooled`] are the only two places that name the engine's spool API
//! (`Store::spool`, `Store::write_spooled`); until it lands, [`Spool`] is a stand-in here
//! with the same shape (an unlinked file in the data folder, handed to `write_stream` with
//! its exact length).

use std::fs::File;
use std::io::{Seek, SeekFrom, Write};

use bytes::BytesMut;
use tokio::task::JoinHandle;
use tsblob_storage::{Error, QuotaType, Result, Store, WriteError, WriteMeta};

use super::body::BodyChunks;
use super::errors::{blocking, AppError};

/// Bytes gathered from the network before one append to the spool.
const PIECE: usize = 1 << 20;

/// A record's payload received so far (stand-in for `tsblob_storage::Spool`).
pub struct Spool {
    file: File,
    len: u64,
    bucket: String,
    /// The HARD quota and the bucket's size when the spool was opened: a body that can no
    /// longer fit is refused while it arrives, not after.
    hard: Option<(u64, u64)>,
}

impl Spool {
    /// Appends `data` (a blocking write to the page cache).
    pub fn append(&mut self, data: &[u8]) -> Result<()> {
        let len = self.len + data.len() as u64;
        if let Some((quota, used)) = self.hard {
            if used + len > quota {
                return Err(WriteError::QuotaExceeded {
                    bucket: self.bucket.clone(),
                    quota,
                    used,
                    needed: len,
                }
                .into());
            }
        }
        self.file
            .write_all(data)
            .map_err(|e| io("writing to a spool file", e))?;
        self.len = len;
        Ok(())
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

fn io(context: &str, source: std::io::Error) -> Error {
    Error::Io {
        context: context.into(),
        source,
    }
}

/// A new, empty spool for a record of `bucket` (which must exist). Blocking.
pub fn open(store: &Store, bucket: &str) -> Result<Spool> {
    let info = store.bucket(bucket)?;
    let hard = (info.settings.quota_type == QuotaType::Hard)
        .then_some((info.settings.quota_size, info.size));
    // `.spool-*` can never be a bucket folder: bucket names may not start with a dot.
    let path = store
        .path()
        .join(format!(".spool-{:016x}", rand::random::<u64>()));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| io("creating a spool file", e))?;
    // Anonymous from now on: its space is freed when it is dropped, even after a crash.
    std::fs::remove_file(&path).map_err(|e| io("unlinking a spool file", e))?;
    Ok(Spool {
        file,
        len: 0,
        bucket: bucket.to_string(),
        hard,
    })
}

/// Writes the spooled payload as one record: the engine reserves exactly its length.
/// Blocking.
pub fn write_spooled(
    store: &Store,
    bucket: &str,
    entry: &str,
    meta: &WriteMeta,
    mut spool: Spool,
) -> Result<u64> {
    spool
        .file
        .seek(SeekFrom::Start(0))
        .map_err(|e| io("rewinding a spool file", e))?;
    let len = spool.len;
    store.write_stream(bucket, entry, meta, &mut spool.file, Some(len))
}

/// Appends `piece` on the blocking pool, handing the spool back.
fn spawn_append(mut spool: Spool, piece: BytesMut) -> JoinHandle<(Spool, Result<()>)> {
    tokio::task::spawn_blocking(move || {
        let r = spool.append(&piece);
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

/// Receives the whole body into a new spool of `bucket`. The network is awaited on the
/// async side only; each ~1 MiB piece is appended on the blocking pool while the next one
/// arrives. Any failure (limit, stall, cut-off, quota, disk) drops the spool: nothing was
/// stored, reserved or evicted.
pub async fn receive(
    store: &Store,
    bucket: &str,
    mut chunks: BodyChunks,
) -> Result<Spool, AppError> {
    let (s, b) = (store.clone(), bucket.to_string());
    let mut spool = Some(blocking(move || Ok(open(&s, &b)?)).await?);
    let mut in_flight: Option<JoinHandle<(Spool, Result<()>)>> = None;
    let mut piece = BytesMut::new();
    loop {
        let done = match chunks.next().await {
            Ok(Some(bytes)) => {
                piece.extend_from_slice(&bytes);
                false
            }
            Ok(None) => true,
            Err(e) => {
                // A running append finishes before the spool is dropped with its task.
                let _ = idle(&mut spool, &mut in_flight).await;
                return Err(e);
            }
        };
        if piece.len() >= PIECE || (done && !piece.is_empty()) {
            let s = idle(&mut spool, &mut in_flight).await?;
            in_flight = Some(spawn_append(s, std::mem::take(&mut piece)));
        }
        if done {
            return idle(&mut spool, &mut in_flight).await;
        }
    }
}
