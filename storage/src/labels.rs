//! Label updates. (Of a record whose block is tiered: `store/tier.rs`.) Blocks are
//! append-only, so a record with new labels is a new frame: the
//! old frame's stored bytes are copied as they are (still compressed, never decompressed,
//! never held whole in memory) behind a new head, the index is pointed at the copy, and the
//! old frame is retired. All of it under the entry's lock, with the record's location read
//! under that lock, so concurrent updates and removals of one record are serialized and
//! never retire a frame twice (which once deleted a block with a live neighbour in it).

use crate::record::Labels;
use crate::record::WriteMeta;

pub(crate) fn merged(old: &Labels, set: &Labels, remove: &[String]) -> Labels {
    let mut labels = old.clone();
    for k in remove {
        labels.remove(k);
    }
    for (k, v) in set {
        labels.insert(k.clone(), v.clone());
    }
    labels
}

pub(crate) fn meta_bytes(meta: &WriteMeta) -> u64 {
    crate::write::frame_need(meta, 0)
}
