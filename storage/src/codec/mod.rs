//! Every on-disk encoding of the engine, and nothing else: bytes in, values out.
//!
//! `docs/storage-format.md` draws each layout as a table; this module tree is the code of
//! those tables, one file per section of the document, kept in step with it:
//!
//! | module | encodes | section of `storage-format.md` |
//! |---|---|---|
//! | [`bytes`] | varints, padded varints, zigzag, the bounds-checked [`Reader`] | the preamble |
//! | [`block`] | the block file header | "Block header" |
//! | [`frame`] | the record frame's head, labels, content types | "Record frame" |
//! | [`chunk`] | the values of the index's `chunks` table | "`chunks`" |
//! | [`index`] | the other index tables' keys and values: `metas` ([`Attrs`]), `blocks` ([`BlockState`](crate::codec::index::BlockState)), `entries` | "`metas`", "`blocks`", "`entries`" |
//! | [`heads`] | the heads sidecar of a tiered block | "Heads sidecar" |
//! | [`feed`] | the change feed's keys and values (`feed`, `feed_state`) | "`feed` and `feed_state`" |
//! | [`attachments`] | an entry's attachments file | "Attachments file" |
//!
//! The files that read and write these bytes (`block.rs`, `write.rs`, `read.rs`,
//! `recover.rs`, `index.rs`, `tier/`) keep their logic and call in here. A decoder given
//! damaged or truncated bytes returns a [`DecodeError`], never panics (each codec's unit
//! tests feed it truncations and flipped bytes; the `block_parser` fuzz target does the
//! same to the block and frame decoders).

pub mod attachments;
pub mod block;
pub mod bytes;
pub mod chunk;
pub mod feed;
pub mod frame;
pub mod heads;
pub mod index;

pub use bytes::Reader;
pub use index::Attrs;

/// Why bytes do not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// More bytes are needed than were given (a torn tail, a cut copy).
    #[error("truncated: the bytes end early")]
    Short,
    /// The bytes are not what the format says (a bad magic, an impossible length...).
    #[error("not a valid encoding: {0}")]
    Garbage(&'static str),
    /// The bytes parse but their CRC32C does not match.
    #[error("CRC32C mismatch")]
    Crc,
}
