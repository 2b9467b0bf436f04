//! `Store`'s change feed for replication (`feed.rs`: the feed's tables and watched set).

use std::collections::HashMap;
use std::ops::Bound;

use crate::codec::feed::seq_key;
use crate::error::{Error, NotFound, Result};
use crate::feed::{
    decode_item, reader_key, Feed, FeedFilter, FeedLimits, FeedPage, FeedPayload, FeedPending,
    FeedRecord, PENDING_SCAN_LIMIT, SCAN_LIMIT,
};
use crate::record::Record;
use crate::settings::SyncPolicy;
use crate::store::Store;

impl Store {
    fn feed(&self) -> &Feed {
        &self.inner.feed
    }

    /// Loads the watched set at open.
    pub(crate) fn feed_load(&self) -> Result<()> {
        let txn = self.inner.index.read_txn()?;
        self.feed().rewatch(&self.inner.index, &txn)
    }

    /// Registers reader `name` on `bucket` (a replication task): from now on every record
    /// put into the bucket is in the feed for it. Returns its position and whether it was
    /// created now: a new reader starts at the current end of the feed, one that exists
    /// with the same bucket keeps its stored position (a reader moved to another bucket
    /// starts again at the end).
    pub fn feed_subscribe(&self, name: &str, bucket: &str) -> Result<(u64, bool)> {
        self.get_bucket(bucket)?;
        let index = &self.inner.index;
        let feed = self.feed();
        let mut txn = index.write_txn()?;
        let (pos, created) = match feed.reader(&txn, name)? {
            Some((pos, b)) if b == bucket => (pos, false),
            _ => {
                let pos = feed.next(&txn)?;
                feed.put_reader(&mut txn, name, pos, bucket)?;
                (pos, true)
            }
        };
        // The watched set changes under the write transaction: the next group commit sees it.
        feed.rewatch(index, &txn)?;
        feed.trim(&mut txn)?;
        txn.commit()?;
        Ok((pos, created))
    }

    /// Removes reader `name` (no error if there is none) and trims what only it needed.
    pub fn feed_unsubscribe(&self, name: &str) -> Result<()> {
        let index = &self.inner.index;
        let feed = self.feed();
        let mut txn = index.write_txn()?;
        feed.state.delete(&mut txn, &reader_key(name))?;
        feed.rewatch(index, &txn)?;
        feed.trim(&mut txn)?;
        txn.commit()?;
        Ok(())
    }

    /// Every reader: (name, bucket, position).
    pub fn feed_readers(&self) -> Result<Vec<(String, String, u64)>> {
        let txn = self.inner.index.read_txn()?;
        Ok(self
            .feed()
            .readers(&txn)?
            .into_iter()
            .map(|(n, p, b)| (n, b, p))
            .collect())
    }

    /// Moves reader `name`'s durable position to `seq` (never back) and trims the feed.
    /// Call it once everything up to `seq` is delivered.
    pub fn feed_ack(&self, name: &str, seq: u64) -> Result<()> {
        let index = &self.inner.index;
        let feed = self.feed();
        let mut txn = index.write_txn()?;
        let Some((pos, bucket)) = feed.reader(&txn, name)? else {
            return Ok(()); // removed meanwhile
        };
        if seq > pos {
            feed.put_reader(&mut txn, name, seq, &bucket)?;
            feed.trim(&mut txn)?;
            txn.commit()?;
            if self.inner.opts.sync == SyncPolicy::Always {
                index.force_sync()?;
            }
        }
        Ok(())
    }

    /// Items after `after` for reader `name`'s bucket that `filter` wants, with their
    /// records read (payloads of at most `max_inline` bytes in memory, larger ones as
    /// [`FeedPayload::Large`]): at most `max_records`, and stopping once the records
    /// reach `max_bytes` of payload, content types and labels ([`crate::RecordMeta::weight`]).
    pub fn feed_read(
        &self,
        name: &str,
        after: u64,
        filter: &mut FeedFilter,
        limits: FeedLimits,
    ) -> Result<FeedPage> {
        let FeedLimits {
            records: max_records,
            bytes: max_bytes,
            inline: max_inline,
        } = limits;
        let feed = self.feed();
        let txn = self.inner.index.read_txn()?;
        let Some((_, bucket)) = feed.reader(&txn, name)? else {
            return Err(NotFound::FeedReader(name.to_string()).into());
        };
        let mut page = FeedPage {
            end: after,
            ..FeedPage::default()
        };
        let lo = seq_key(after.saturating_add(1));
        let mut bytes = 0u64;
        let mut wanted: Vec<(u64, u64, String, u64)> = Vec::new();
        for (scanned, item) in feed
            .items
            .range(&txn, &(Bound::Included(&lo[..]), Bound::Unbounded))?
            .enumerate()
        {
            let (k, v) = item?;
            if scanned >= SCAN_LIMIT || wanted.len() >= max_records {
                page.more = true;
                break;
            }
            let it = decode_item(k, v)?;
            page.end = it.seq;
            if it.bucket != bucket.as_bytes() {
                continue;
            }
            let entry = String::from_utf8_lossy(it.entry).into_owned();
            if filter.wants_entry(&entry) {
                wanted.push((it.seq, it.ts, entry, it.written_us));
            }
        }
        drop(txn);
        for (seq, ts, entry, written_us) in wanted {
            let payload = match self.read_bounded(&bucket, &entry, ts, max_inline) {
                Ok((meta, data)) => {
                    if !filter.wants_in(&entry, ts, &meta.labels) {
                        continue;
                    }
                    bytes += meta.weight();
                    match data {
                        Some(data) => FeedPayload::Whole(Record { meta, data }),
                        None => FeedPayload::Large(meta),
                    }
                }
                Err(Error::NotFound(_)) => FeedPayload::Gone,
                Err(e) => return Err(e),
            };
            page.records.push(FeedRecord {
                seq,
                entry,
                ts,
                written_us,
                payload,
            });
            if bytes >= max_bytes {
                // Stop after this one: the page ends at its sequence number.
                page.end = seq;
                page.more = true;
                break;
            }
        }
        Ok(page)
    }

    /// Reader `name`'s backlog: items after its position in its bucket and the entries
    /// `filter` names (the condition is not evaluated: an upper bound of what will be sent).
    pub fn feed_pending(&self, name: &str, filter: &FeedFilter) -> Result<FeedPending> {
        let feed = self.feed();
        let index = &self.inner.index;
        let txn = index.read_txn()?;
        let Some((pos, bucket)) = feed.reader(&txn, name)? else {
            return Ok(FeedPending::default());
        };
        let lo = seq_key(pos.saturating_add(1));
        let mut out = FeedPending::default();
        let mut ids: HashMap<Vec<u8>, Option<u32>> = HashMap::new();
        let entries = index.entries(&txn)?;
        for (n, item) in feed
            .items
            .range(&txn, &(Bound::Included(&lo[..]), Bound::Unbounded))?
            .enumerate()
        {
            if n >= PENDING_SCAN_LIMIT {
                out.truncated = true;
                break;
            }
            let (k, v) = item?;
            let it = decode_item(k, v)?;
            if it.bucket != bucket.as_bytes() {
                continue;
            }
            let entry = String::from_utf8_lossy(it.entry);
            if !filter.wants_entry(&entry) {
                continue;
            }
            out.records += 1;
            out.oldest_written_us = Some(out.oldest_written_us.unwrap_or(it.written_us));
            let id = *ids.entry(it.entry.to_vec()).or_insert_with(|| {
                entries
                    .iter()
                    .find(|(b, e, _)| *b == bucket && *e == entry)
                    .map(|(_, _, id)| *id)
            });
            if let Some(id) = id {
                if let Some(v) = index.get_record(&txn, id, it.ts)? {
                    out.bytes += v.size;
                }
            }
        }
        Ok(out)
    }
}
