//! The index's `metas` table in memory ([`Interner`]): each entry's interned attrs (content
//! type and labels) both ways, filled lazily, bounded in bytes over all entries.

use std::collections::HashMap;
use std::sync::Arc;

use crate::codec::Attrs;

/// The most the interner keeps in memory, over all entries. Each entry keeps at most
/// [`crate::index::MAX_ATTRS`] sets of at most 64 KiB of labels (16 MiB), but entries are
/// unbounded in number: a writer giving 256 records of each of many entries a 60 KB label
/// set of its own made the server hold all of them (+322 MB of anonymous memory for 20
/// entries; 16 GB for a thousand).
pub const INTERNER_MAX_BYTES: usize = 32 << 20;

/// One entry's interned attrs, both ways.
#[derive(Default)]
struct EntryAttrs {
    by_id: HashMap<u32, Arc<Attrs>>,
    ids: HashMap<Arc<Attrs>, u32>,
    /// The next id to assign (valid once `loaded`).
    next: u32,
    /// The whole `metas` range of the entry was read (by a writer): `ids` and `next` are
    /// complete. Readers only ever add single `by_id` entries.
    loaded: bool,
    /// Bytes counted for the attrs in `by_id`.
    bytes: usize,
}

/// The `metas` table in memory, per entry id, at most [`INTERNER_MAX_BYTES`]: past it,
/// other entries are dropped (they reload from the table on their next use) until half of
/// it is left.
#[derive(Default)]
pub(crate) struct Interner {
    entries: HashMap<u32, EntryAttrs>,
    bytes: usize,
}

/// Bytes an attrs value is counted for (its strings, and a share for the maps' slots).
pub(crate) fn attrs_bytes(a: &Attrs) -> usize {
    let labels: usize = a.labels.iter().map(|(k, v)| k.len() + v.len() + 64).sum();
    a.content_type.len() + labels + 128
}

impl Interner {
    /// The attrs of `id` in an entry, if kept.
    pub(crate) fn attrs(&self, entry_id: u32, id: u32) -> Option<Arc<Attrs>> {
        self.entries.get(&entry_id)?.by_id.get(&id).cloned()
    }

    /// The id of `meta` in an entry whose ids are all kept (`None` also when they are not).
    pub(crate) fn id_of(&self, entry_id: u32, meta: &Attrs) -> Option<u32> {
        let em = self.entries.get(&entry_id).filter(|em| em.loaded)?;
        em.ids.get(meta).copied()
    }

    /// Whether every id of the entry is kept (after [`Interner::loaded`]).
    pub(crate) fn is_loaded(&self, entry_id: u32) -> bool {
        self.entries.get(&entry_id).is_some_and(|em| em.loaded)
    }

    /// Notes an id a reader resolved.
    pub(crate) fn resolved(&mut self, entry_id: u32, id: u32, a: Arc<Attrs>) {
        self.insert(entry_id, id, a, false);
    }

    /// Replaces what is kept of an entry by all of its ids, as read from the table.
    pub(crate) fn loaded(&mut self, entry_id: u32, all: Vec<(u32, Arc<Attrs>)>) {
        self.remove(entry_id);
        let next = all
            .iter()
            .map(|(id, _)| id.saturating_add(1))
            .max()
            .unwrap_or(0);
        for (id, a) in all {
            self.insert(entry_id, id, a, true);
        }
        let em = self.entries.entry(entry_id).or_default();
        em.next = next;
        em.loaded = true;
    }

    /// Assigns the next id of a loaded entry to `meta`, or `None` once it has `max` ids.
    pub(crate) fn assign(&mut self, entry_id: u32, meta: &Arc<Attrs>, max: u32) -> Option<u32> {
        let em = self.entries.get_mut(&entry_id).filter(|em| em.loaded)?;
        if em.next >= max {
            return None;
        }
        let id = em.next;
        em.next += 1;
        self.insert(entry_id, id, meta.clone(), true);
        Some(id)
    }

    fn insert(&mut self, entry_id: u32, id: u32, a: Arc<Attrs>, both: bool) {
        let em = self.entries.entry(entry_id).or_default();
        let n = attrs_bytes(&a);
        if both {
            em.ids.insert(a.clone(), id);
        }
        if em.by_id.insert(id, a).is_none() {
            em.bytes += n;
            self.bytes += n;
        }
        if self.bytes > INTERNER_MAX_BYTES {
            self.shrink(entry_id);
        }
    }

    /// Drops entries other than `keep` until at most half the bound is left.
    fn shrink(&mut self, keep: u32) {
        let others: Vec<u32> = self
            .entries
            .keys()
            .copied()
            .filter(|e| *e != keep)
            .collect();
        for e in others {
            if self.bytes <= INTERNER_MAX_BYTES / 2 {
                break;
            }
            self.remove(e);
        }
    }

    pub(crate) fn remove(&mut self, entry_id: u32) {
        if let Some(em) = self.entries.remove(&entry_id) {
            self.bytes -= em.bytes;
        }
    }

    pub(crate) fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }

    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn big(i: usize) -> Arc<Attrs> {
        Arc::new(Attrs {
            content_type: String::new(),
            labels: (0..15)
                .map(|k| (format!("l{k}"), format!("{i}-{}", "x".repeat(3990))))
                .collect(),
        })
    }

    /// Bug: the interner kept every entry's attrs: 20 entries of 256 label sets of 60 KB
    /// held 322 MB. It stays within its bound now, keeping the entry in use whole.
    #[test]
    fn interner_stays_within_its_bound() {
        let mut i = Interner::default();
        for e in 0..40u32 {
            i.loaded(e, Vec::new());
            for n in 0..256 {
                let a = big(e as usize * 1000 + n);
                assert_eq!(i.assign(e, &a, 256), Some(n as u32));
                assert!(i.bytes() <= INTERNER_MAX_BYTES, "{} bytes", i.bytes());
            }
            assert!(i.is_loaded(e), "the entry in use is kept");
            assert_eq!(i.id_of(e, &big(e as usize * 1000 + 7)), Some(7));
            assert_eq!(i.assign(e, &big(0), 256), None, "256 ids at most");
        }
        // Dropped entries say so: a writer reloads them from the table.
        assert!(!i.is_loaded(0));
        assert_eq!(i.id_of(0, &big(7)), None);
        i.clear();
        assert_eq!(i.bytes(), 0);
    }
}
