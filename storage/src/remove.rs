//! Removing records and ranges.
//!
//! A removed record gets the `deleted` flag in its frame header (the one byte of a block
//! that changes after it is written) and leaves the index. A block whose records are all
//! removed is deleted whole (`quota.rs`, `delete_block`), unless it is the block being
//! appended to. Everything happens under the entry's lock, with the record's location read
//! under that lock: a removal and a label update of one record are serialized, so neither
//! can retire a frame the other already moved, nor bring back one the other removed.
