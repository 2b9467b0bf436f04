//! Entry attachments: small documents (bytes; the server keeps JSON in them) kept with an
//! entry under a name, never visible as records. ReductStore's attachments (`<entry>/$meta`)
//! mapped onto the engine.
//!
//! All of an entry's attachments live in one file of its folder, `attachments`
//! (`codec/attachments.rs`), so they move with the folder on a rename and go with it to the
//! trash on a removal, and the index never holds them (a rebuilt index loses nothing). A
//! change rewrites the file whole: the new version is written to `attachments.tmp` (synced
//! under `SyncPolicy::Always`), then renamed over the old one (atomic; the folder synced
//! under `Always`). A crash leaves the old file or the new one, never a mix; a leftover
//! `attachments.tmp` is deleted at open. The caller holds the entry's mutex from the read to
//! the rename, so concurrent changes of one entry are serialized (no lost update).
//!
//! Bounded: at most [`AttachmentLimits::max_count`] attachments per entry and
//! [`AttachmentLimits::max_size`] bytes each, so a file never exceeds their product.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use crate::codec::attachments::{decode, encode, Stored};
use crate::error::{AttachmentError, Error, Result};
use crate::files::sync_dir;
use crate::layout::{ATTACHMENTS_FILE, ATTACHMENTS_TMP};

/// One attachment of an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    pub name: String,
    /// When it was written (µs since the Unix epoch), unique within its entry: a newer
    /// write of the same name has a larger one.
    pub ts: u64,
    pub data: Vec<u8>,
}

pub use crate::settings::{AttachmentLimits, DEFAULT_MAX_ATTACHMENTS, DEFAULT_MAX_ATTACHMENT_SIZE};

/// The attachments of the entry whose folder is `dir`, by name (none without a file).
pub(crate) fn load(dir: &Path, bucket: &str, entry: &str) -> Result<BTreeMap<String, Stored>> {
    let path = dir.join(ATTACHMENTS_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(e) => return Err(Error::io(format!("reading {path:?}"), e)),
    };
    let items = decode(&bytes).map_err(|e| AttachmentError::Damaged {
        bucket: bucket.to_string(),
        entry: entry.to_string(),
        reason: e.to_string(),
    })?;
    Ok(items.into_iter().map(|a| (a.name.clone(), a)).collect())
}

/// Replaces the entry's attachments file with `items` (removes it when there are none).
pub(crate) fn save(dir: &Path, items: &BTreeMap<String, Stored>, sync: bool) -> Result<()> {
    let path = dir.join(ATTACHMENTS_FILE);
    if items.is_empty() {
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io(format!("removing {path:?}"), e)),
        }
        crate::crash_point("attachments-unlinked");
        if sync {
            sync_dir(dir)?;
        }
        return Ok(());
    }
    let list: Vec<Stored> = items.values().cloned().collect();
    let bytes = encode(&list);
    let tmp = dir.join(ATTACHMENTS_TMP);
    let written = std::fs::File::create(&tmp).and_then(|mut f| {
        f.write_all(&bytes)?;
        if sync {
            f.sync_all()?;
        }
        Ok(())
    });
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::io(format!("writing {tmp:?}"), e));
    }
    crate::crash_point("attachments-written");
    if let Err(e) = std::fs::rename(&tmp, &path) {
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::io(format!("renaming {tmp:?}"), e));
    }
    crate::crash_point("attachments-renamed");
    if sync {
        sync_dir(dir)?;
    }
    Ok(())
}

/// Deletes an `attachments.tmp` a crash left in an entry folder; whether there was one.
pub(crate) fn clear_leftover(dir: &Path) -> bool {
    std::fs::remove_file(dir.join(ATTACHMENTS_TMP)).is_ok()
}

impl From<Stored> for Attachment {
    fn from(s: Stored) -> Attachment {
        Attachment {
            name: s.name,
            ts: s.ts,
            data: s.data,
        }
    }
}
