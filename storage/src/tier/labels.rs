//! Label updates of tiered records.
//!
//! A tiered record's frame is in the object store and its labels in the index; the index
//! is the truth for labels (reads take them from there, never from the frame). An update
//! therefore commits the record's index value with the new labels, pointing at the same
//! frame, and the block's heads sidecar (which carries every live record's labels) is
//! uploaded again, so `--restore-from` and read replicas see the new labels:
//!
//! 1. under the entry lock (updates and removals of one record are serialized, and the tier
//!    thread's commit of an upload waits for it), the block is noted dirty *on disk* —
//!    before the index commit, so a kill -9 between the commit and the upload of the
//!    sidecar leaves the note and the next start uploads it;
//! 2. the index commit;
//! 3. the block is noted dirty again: a sidecar upload that read the index between 1 and 2
//!    (without the new labels) is followed by another.
//!
//! A block whose upload is in flight is not tiered yet: its records are updated as local
//! ones (a new frame in the active block), which changes the block's record count, so the
//! upload's commit sees the change and the block is uploaded again with the new sidecar.
