//! A large record's payload sent in chunks, each read on the blocking pool: between reads
//! the task waits for the receiver asynchronously, so a slow reader holds no blocking
//! thread. Used by streamed reads (`http/records.rs`) and by replication senders, which
//! stream a record too large for a batch from its block.

use bytes::Bytes;
use tokio::sync::mpsc::Sender;

/// Records over `tsblob_storage::MAP_MAX` (and compressed ones over `MEMORY_MAX`) are
/// streamed in chunks of this size.
const READ_CHUNK: usize = 256 << 10;

/// Sends `reader`'s payload to `tx` in chunks. `allowed` is asked before each chunk: an
/// error (a client's token removed, say) cuts the body short with it. A read error cuts
/// it short too: the headers are gone, so the receiver sees a length mismatch, never
/// wrong bytes.
pub async fn stream_record(
    mut reader: tsblob_storage::RecordReader,
    tx: Sender<Result<Bytes, std::io::Error>>,
    mut allowed: impl FnMut() -> Result<(), String>,
) {
    loop {
        if let Err(e) = allowed() {
            tracing::info!("record stream cut: {e}");
            let _ = tx.send(Err(std::io::Error::other(e))).await;
            return;
        }
        let read = tokio::task::spawn_blocking(move || {
            let r = reader.read_chunk(READ_CHUNK);
            (reader, r)
        })
        .await;
        let (back, chunk) = match read {
            Ok((back, Ok(buf))) if !buf.is_empty() => (back, buf),
            Ok((_, Ok(_))) => return, // the end
            Ok((_, Err(e))) => {
                crate::throttled!(
                    warn,
                    "record_stream_failed",
                    "streaming a record failed: {e}"
                );
                let _ = tx.send(Err(e)).await;
                return;
            }
            Err(e) => {
                let _ = tx.send(Err(std::io::Error::other(e.to_string()))).await;
                return;
            }
        };
        reader = back;
        if tx.send(Ok(Bytes::from(chunk))).await.is_err() {
            return; // the receiver went away
        }
    }
}
