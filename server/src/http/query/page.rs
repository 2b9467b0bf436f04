//! The buffers a query step gathers its heads and small records in, recycled: a page the
//! connection has written goes back to a small process-wide pool, and the next step (of
//! any query) takes it from there instead of allocating a fresh one.
//!
//! Why: a step's page is ~276 KiB, allocated on the blocking pool and freed by the
//! connection's task once written. The allocator hands such a freed page back to the
//! system after a short delay, so each new page was memory the kernel had to fault in and
//! zero again (a 2 MiB huge page at a time): 27 % of the server's CPU in range reads of
//! 10 KiB records (`docs/benchmarks/range-pages-2026-11-26.md`). A recycled page is
//! already there.

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;

/// Pages kept idle at most, over every query (so at most `IDLE × CAPACITY`, ~2.2 MiB,
/// outside the memory budget; a page in flight is counted there as before).
const IDLE: usize = 8;

/// Frames are gathered into chunks of about this size, one per step on the blocking pool
/// (large enough that the hand-off to the pool costs little per byte). A mapped payload
/// (`tsblob_storage::Payload::Mapped`, up to `MAP_MAX`) is one piece however large: it
/// holds page-cache pages, not memory of ours, and counts towards `produce::STEP` instead.
pub(super) const CHUNK: usize = 256 << 10;

/// Payloads at least this long are sent as their own piece, straight from the buffer the
/// engine read them into; shorter ones are copied next to their heads (one piece per record
/// would cost more in chunk framing and syscalls than the copy).
pub(super) const OWN_PIECE: usize = 16 << 10;

/// Mapped payloads (slices of their block's window, page cache) at least this long are
/// sent as their own piece, not copied next to their heads. The connection writes a whole
/// step as one HTTP chunk of its pieces (`body::step_body`), so a piece costs an `iovec`
/// in a `writev`, not a chunk and a frame of its own (which is what made this cost
/// records/s before: `docs/benchmarks/range-slices-2026-11-26.md`). Shorter ones are
/// still copied: hyper gathers 64 `iovec`s per `writev`, two per record here.
pub(super) const MAPPED_PIECE: usize = 4 << 10;

/// The capacity of a step's page: a step's `CHUNK` and the record that ends it.
pub(super) const CAPACITY: usize = CHUNK + OWN_PIECE + 4096;

static POOL: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// An empty page of `CAPACITY` bytes: a recycled one if there is one.
pub(super) fn take() -> BytesMut {
    let recycled = POOL.lock().pop();
    match recycled {
        // (An empty `Vec` with room becomes a `BytesMut` over the same allocation.)
        Some(v) => match Bytes::from(v).try_into_mut() {
            Ok(b) => b,
            Err(_) => BytesMut::with_capacity(CAPACITY),
        },
        None => BytesMut::with_capacity(CAPACITY),
    }
}

/// `buf` as one piece whose buffer goes back to the pool once the last clone is dropped
/// (once the connection wrote it).
pub(super) fn freeze(buf: BytesMut) -> Bytes {
    Bytes::from_owner(Page(Vec::from(buf)))
}

/// Whether a page is idle in the pool: the next [`take`] will not allocate one.
pub(super) fn spare() -> bool {
    !POOL.lock().is_empty()
}

/// Gives back a page that was not handed over (emptied).
pub(super) fn give_back(buf: BytesMut) {
    recycle(Vec::from(buf));
}

fn recycle(mut v: Vec<u8>) {
    // Only whole pages: a buffer that was grown or shrunk is dropped.
    if v.capacity() != CAPACITY {
        return;
    }
    v.clear();
    let mut pool = POOL.lock();
    if pool.len() < IDLE {
        pool.push(v);
    }
}

/// A page handed to the connection.
struct Page(Vec<u8>);

impl AsRef<[u8]> for Page {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        recycle(std::mem::take(&mut self.0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_page_is_reused_by_the_next_step_not_allocated_again() {
        // (Other tests may take pages from the same pool: look for ours among a few.)
        let mut page = take();
        assert!(page.capacity() >= CAPACITY);
        page.extend_from_slice(b"some frames");
        let at = page.as_ptr() as usize;
        let piece = freeze(page);
        assert_eq!(&piece[..], b"some frames");
        assert_eq!(piece.as_ptr() as usize, at, "frozen without a copy");
        drop(piece);
        let again: Vec<BytesMut> = (0..IDLE).map(|_| take()).collect();
        assert!(
            again.iter().any(|b| b.as_ptr() as usize == at),
            "the page came back"
        );
        for b in &again {
            assert!(b.is_empty());
            assert!(b.capacity() >= CAPACITY);
        }
        for b in again {
            give_back(b);
        }
    }
}
