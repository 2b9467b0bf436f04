//! `Store`'s point and streamed reads (`read.rs`: where a payload is read from).

use std::sync::Arc;

use crate::block::RecordReader;
use crate::codec::index::IndexValue;
use crate::entry::Entry;
use crate::error::{NotFound, Result};
use crate::payload::Payload;
use crate::read::{
    gone_is_not_found, meta_of, open_value, payload_now, payload_of, read_payload, read_value,
};
use crate::record::{Record, RecordMeta};
use crate::store::Store;
use crate::tier::Access;

impl Store {
    fn locate(
        &self,
        bucket: &str,
        entry: &str,
        ts: Option<u64>,
    ) -> Result<(Arc<Entry>, u64, IndexValue)> {
        let b = self.get_bucket(bucket)?;
        let e = self.get_entry(&b, entry)?;
        let txn = self.inner.index.read_txn()?;
        let (ts, v) = self.find_in(&txn, &e, bucket, entry, ts)?;
        Ok((e, ts, v))
    }

    /// The record of `e` at `ts` (`None`: the latest) in the index as `txn` sees it.
    fn find_in(
        &self,
        txn: &crate::index::Txn<'_>,
        e: &Entry,
        bucket: &str,
        entry: &str,
        ts: Option<u64>,
    ) -> Result<(u64, IndexValue)> {
        let found = match ts {
            Some(ts) => self
                .inner
                .index
                .get_record(txn, e.id(), ts)?
                .map(|v| (ts, v)),
            None => self.inner.index.last(txn, e.id())?,
        };
        found.ok_or_else(|| {
            match ts {
                Some(ts) => NotFound::Record {
                    bucket: bucket.into(),
                    entry: entry.into(),
                    ts,
                },
                None => NotFound::NoRecords {
                    bucket: bucket.into(),
                    entry: entry.into(),
                },
            }
            .into()
        })
    }

    /// Reads a record (`ts = None`: the latest).
    pub fn read(&self, bucket: &str, entry: &str, ts: Option<u64>) -> Result<Record> {
        let (e, ts, v) = self.locate(bucket, entry, ts)?;
        read_value(self.inner.sources(), &e, ts, v)
            .map_err(|err| gone_is_not_found(err, bucket, entry, ts))
    }

    /// A record's metadata and, when its payload is at most `max_inline` bytes, the payload
    /// (a larger one stays on disk: read it with [`Store::open_record`]).
    pub(crate) fn read_bounded(
        &self,
        bucket: &str,
        entry: &str,
        ts: u64,
        max_inline: u64,
    ) -> Result<(RecordMeta, Option<Vec<u8>>)> {
        let (e, ts, v) = self.locate(bucket, entry, Some(ts))?;
        let meta = meta_of(ts, &v);
        if meta.size > max_inline {
            return Ok((meta, None));
        }
        let data = read_payload(self.inner.sources(), &e, ts, &v, Access::Point)
            .map_err(|err| gone_is_not_found(err, bucket, entry, ts))?;
        Ok((meta, Some(data)))
    }

    /// A record's metadata and its CRC-checked payload: mapped from its block when it is
    /// large (no copy: [`Payload::Mapped`]), in memory otherwise. `None` for a payload to
    /// stream with [`Store::open_record`] instead (see `payload_of`).
    pub fn read_payload(
        &self,
        bucket: &str,
        entry: &str,
        ts: Option<u64>,
    ) -> Result<(RecordMeta, Option<Payload>)> {
        let (e, ts, v) = self.locate(bucket, entry, ts)?;
        let p = payload_of(self.inner.sources(), &e, ts, &v, Access::Point, None)
            .map_err(|err| gone_is_not_found(err, bucket, entry, ts))?;
        Ok((meta_of(ts, &v), p))
    }

    /// [`Store::read_payload`] for a point read on a thread that must not wait on the disk
    /// (an async runtime's worker): `Ok(None)` unless every step can be done from memory
    /// (the index's pages and the record's bytes in the page cache, its block file open,
    /// an index of at most `index_max` bytes: see `resident.rs` and `read::payload_now`);
    /// then read it with [`Store::read_payload`] on a thread that may wait. Errors that
    /// need no I/O to find (no such bucket, entry or record) are returned as usual.
    pub fn read_payload_now(
        &self,
        bucket: &str,
        entry: &str,
        ts: Option<u64>,
        index_max: u64,
    ) -> Result<Option<(RecordMeta, Payload)>> {
        let b = self.get_bucket(bucket)?;
        let e = self.get_entry(&b, entry)?;
        let Some(txn) = self.inner.index.read_txn_resident(index_max)? else {
            return Ok(None);
        };
        let (ts, v) = self.find_in(&txn, &e, bucket, entry, ts)?;
        drop(txn);
        let Some(p) = payload_now(self.inner.sources(), &e, ts, &v)
            .map_err(|err| gone_is_not_found(err, bucket, entry, ts))?
        else {
            return Ok(None);
        };
        Ok(Some((meta_of(ts, &v), p)))
    }

    /// The metadata of a record, from the index alone.
    pub fn head(&self, bucket: &str, entry: &str, ts: Option<u64>) -> Result<RecordMeta> {
        let (_, ts, v) = self.locate(bucket, entry, ts)?;
        Ok(meta_of(ts, &v))
    }

    /// A record's payload as a stream, for records too large to hold in memory.
    pub fn open_record(&self, bucket: &str, entry: &str, ts: Option<u64>) -> Result<RecordReader> {
        let (e, ts, v) = self.locate(bucket, entry, ts)?;
        open_value(self.inner.sources(), &e, ts, &v, Access::Point)
            .map_err(|err| gone_is_not_found(err, bucket, entry, ts))
    }
}

#[cfg(test)]
mod mapped_tests {
    use crate::error::Error;
    use crate::payload::{Payload, Windows};
    use crate::record::{Query, WriteMeta};
    use crate::settings::{BucketSettings, Compression, StoreOptions};
    use crate::store::Store;

    fn payload(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i % 253) as u8).collect()
    }

    /// A query's payloads of one block are slices of one mapping (each record's bytes right
    /// after the previous record's frame head), ascending and descending, and are the bytes
    /// written; a payload handed out outlives the removal of its block, and the records of a
    /// block removed while the query runs read as gone (skipped), never as data.
    #[test]
    fn a_query_slices_its_payloads_from_one_window_per_block() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path(), StoreOptions::default()).unwrap();
        s.create_bucket("b", BucketSettings::default()).unwrap();
        let data: Vec<Vec<u8>> = (0..40u64)
            .map(|ts| {
                payload(100 << 10)
                    .into_iter()
                    .map(|b| b ^ ts as u8)
                    .collect()
            })
            .collect();
        for (ts, d) in data.iter().enumerate() {
            s.write("b", "e", &WriteMeta::at(ts as u64), d).unwrap();
        }
        for descending in [false, true] {
            let q = Query {
                descending,
                ..Query::default()
            };
            let mut w = Windows::default();
            let mut prev: Option<(u64, usize, usize)> = None;
            let mut seen = 0;
            for item in s.query("b", "e", &q).unwrap() {
                let item = item.unwrap();
                let p = item.payload_in(&mut w).unwrap().unwrap();
                let Payload::Mapped(m) = &p else {
                    panic!("a 100 KiB payload of a query was not sliced from a window");
                };
                assert!(p.as_ref() == &data[item.meta.ts as usize][..]);
                let here = m.as_ref().as_ptr() as usize;
                if let Some((ts, at, len)) = prev {
                    // same mapping: the next frame starts where this one ended (+ its head)
                    let gap = if descending {
                        at - (here + p.len())
                    } else {
                        here - (at + len)
                    };
                    assert!(gap < 256, "ts {ts} -> {}: {gap} bytes apart", item.meta.ts);
                }
                prev = Some((item.meta.ts, here, p.len()));
                seen += 1;
            }
            assert_eq!(seen, data.len());
        }
        // Removal while a query runs: the handed-out payload stays, the rest is gone.
        let mut w = Windows::default();
        let mut it = s.query("b", "e", &Query::default()).unwrap();
        let first = it.next().unwrap().unwrap();
        let p = first.payload_in(&mut w).unwrap().unwrap();
        let second = it.next().unwrap().unwrap();
        s.remove_bucket("b").unwrap();
        assert!(p.as_ref() == &data[0][..]);
        assert!(matches!(second.payload_in(&mut w), Err(Error::NotFound(_))));
    }

    /// A short query's payloads under READ_BELOW (1 KiB here) are slices of one buffer,
    /// its window read with one `pread` (in the profile of such queries a window's `mmap`,
    /// faults and `munmap` were ~15 % of the server's CPU,
    /// `docs/benchmarks/reads-2-2026-11-26b.md`); a window past READ_WINDOW_MAX is mapped;
    /// the records of a block removed while the query runs read as gone, never as the
    /// bytes read before.
    #[test]
    fn a_short_query_reads_the_window_of_its_small_records_into_one_buffer() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path(), StoreOptions::default()).unwrap();
        s.create_bucket("b", BucketSettings::default()).unwrap();
        let data: Vec<Vec<u8>> = (0..600u64)
            .map(|ts| payload(1 << 10).into_iter().map(|b| b ^ ts as u8).collect())
            .collect();
        for (ts, d) in data.iter().enumerate() {
            s.write("b", "e", &WriteMeta::at(ts as u64), d).unwrap();
        }
        for descending in [false, true] {
            // 40 records (~41 KiB of frames): one read window, one buffer
            let q = Query {
                start: Some(100),
                stop: Some(140),
                descending,
                ..Query::default()
            };
            let mut w = Windows::default();
            let mut prev: Option<(usize, usize)> = None;
            let mut seen = 0;
            for item in s.query("b", "e", &q).unwrap() {
                let item = item.unwrap();
                let p = item.payload_in(&mut w).unwrap().unwrap();
                let Payload::Shared(sp) = &p else {
                    panic!("a 1 KiB payload of a short query was not a slice of its read window");
                };
                assert!(p.as_ref() == &data[item.meta.ts as usize][..]);
                let here = sp.as_ref().as_ptr() as usize;
                if let Some((at, len)) = prev {
                    let gap = if descending {
                        at - (here + p.len())
                    } else {
                        here - (at + len)
                    };
                    assert!(gap < 256, "{gap} bytes apart: not one buffer");
                }
                prev = Some((here, p.len()));
                seen += 1;
            }
            assert_eq!(seen, 40);
            // all 600 (~620 KiB of frames): windows past READ_WINDOW_MAX, mapped
            let q = Query {
                descending,
                ..Query::default()
            };
            let mut w = Windows::default();
            for item in s.query("b", "e", &q).unwrap() {
                let item = item.unwrap();
                let p = item.payload_in(&mut w).unwrap().unwrap();
                assert!(matches!(p, Payload::Mapped(_)), "ts {}", item.meta.ts);
                assert!(p.as_ref() == &data[item.meta.ts as usize][..]);
            }
        }
        // Removal while a query runs: the handed-out payload stays, the rest is gone,
        // also the records already read into the window's buffer.
        let mut w = Windows::default();
        let q = Query {
            start: Some(0),
            stop: Some(10),
            ..Query::default()
        };
        let mut it = s.query("b", "e", &q).unwrap();
        let first = it.next().unwrap().unwrap();
        let p = first.payload_in(&mut w).unwrap().unwrap();
        assert!(matches!(p, Payload::Shared(_)));
        let second = it.next().unwrap().unwrap();
        s.remove_bucket("b").unwrap();
        assert!(p.as_ref() == &data[0][..]);
        assert!(matches!(second.payload_in(&mut w), Err(Error::NotFound(_))));
    }

    /// The same for a query of several entries merged (`query_entries`, what ReductStore's
    /// query sessions read), one window per entry: each small payload was read alone into
    /// a buffer (a `preadv` and a CRC per 100 KiB record), not sliced from its window.
    #[test]
    fn a_multi_entry_query_read_each_small_payload_alone() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path(), StoreOptions::default()).unwrap();
        s.create_bucket("b", BucketSettings::default()).unwrap();
        let data = |e: usize, ts: u64| -> Vec<u8> {
            payload(100 << 10)
                .into_iter()
                .map(|b| b ^ ts as u8 ^ (e as u8) << 7)
                .collect()
        };
        for ts in 0..20u64 {
            for e in 0..2 {
                s.write("b", &format!("e{e}"), &WriteMeta::at(ts), &data(e, ts))
                    .unwrap();
            }
        }
        let names = vec!["e0".to_string(), "e1".to_string()];
        let it = s.query_entries("b", &names, &Query::default()).unwrap();
        let mut windows = [Windows::default(), Windows::default()];
        let mut seen = 0;
        for item in it.windowed() {
            let item = item.unwrap();
            let e = usize::from(item.entry() == "e1");
            let p = item.payload_in(&mut windows[e]).unwrap().unwrap();
            assert!(
                matches!(p, Payload::Mapped(_)),
                "a 100 KiB payload of a multi-entry query was not sliced from a window"
            );
            assert!(p.as_ref() == &data(e, item.meta.ts)[..]);
            seen += 1;
        }
        assert_eq!(seen, 40);
        // Not windowed: each record alone, as before (readers holding one window for all).
        let it = s.query_entries("b", &names, &Query::default()).unwrap();
        let mut w = Windows::default();
        for item in it {
            let item = item.unwrap();
            let p = item.payload_in(&mut w).unwrap().unwrap();
            assert!(matches!(p, Payload::Memory(_)));
        }
    }

    /// Large raw payloads are mapped, small and compressed ones read into memory; all of
    /// them are the bytes written.
    #[test]
    fn large_raw_payloads_are_mapped_the_rest_read() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path(), StoreOptions::default()).unwrap();
        s.create_bucket("b", BucketSettings::default()).unwrap();
        let (big, small) = (payload(crate::MAP_MIN as usize), payload(1000));
        s.write("b", "e", &WriteMeta::at(1), &big).unwrap();
        s.write("b", "e", &WriteMeta::at(2), &small).unwrap();
        let (meta, p) = s.read_payload("b", "e", Some(1)).unwrap();
        assert_eq!(meta.size, big.len() as u64);
        let p = p.unwrap();
        assert!(matches!(p, Payload::Mapped(_)));
        assert!(p.as_ref() == big);
        let p = s.read_payload("b", "e", Some(2)).unwrap().1.unwrap();
        assert!(matches!(p, Payload::Memory(_)));
        assert_eq!(p.as_ref(), &small[..]);
        // Compressed: decompressed into memory.
        let z = BucketSettings {
            compression: Compression::Zstd { level: 3 },
            ..BucketSettings::default()
        };
        s.create_bucket("z", z).unwrap();
        s.write("z", "e", &WriteMeta::at(1), &big).unwrap();
        let p = s.read_payload("z", "e", Some(1)).unwrap().1.unwrap();
        assert!(matches!(p, Payload::Memory(_)));
        assert!(p.as_ref() == big);
        // Over MAP_MAX: streamed instead (None).
        let huge = vec![7u8; (crate::MAP_MAX + 1) as usize];
        s.write("b", "e", &WriteMeta::at(3), &huge).unwrap();
        assert!(s.read_payload("b", "e", Some(3)).unwrap().1.is_none());
    }

    /// A mapping outlives the removal of its record's bucket (the block file is unlinked,
    /// not cut): the bytes handed out stay the bytes written.
    #[test]
    fn a_mapped_payload_survives_the_removal_of_its_block() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path(), StoreOptions::default()).unwrap();
        s.create_bucket("b", BucketSettings::default()).unwrap();
        let big = payload(1 << 20);
        s.write("b", "e", &WriteMeta::at(1), &big).unwrap();
        let (_, p) = s.read_payload("b", "e", Some(1)).unwrap();
        let p = p.unwrap();
        s.remove_bucket("b").unwrap();
        assert!(p.as_ref() == big);
        assert!(s.read_payload("b", "e", Some(1)).is_err());
    }
}

#[cfg(test)]
mod now_tests {
    #![allow(clippy::unwrap_used)]
    use crate::error::Error;
    use crate::payload::Payload;
    use crate::record::WriteMeta;
    use crate::settings::{BucketSettings, Compression, StoreOptions};
    use crate::store::Store;

    fn blocks(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for d in std::fs::read_dir(dir).unwrap() {
            let p = d.unwrap().path();
            if p.is_dir() {
                blocks(&p, out);
            } else if p.extension().is_some_and(|x| x == "blk") {
                out.push(p);
            }
        }
    }

    /// A point read on a thread that must not wait (`read_payload_now`): a small raw record
    /// whose index and bytes are cached is read there, CRC-checked, the bytes written;
    /// everything that could wait on the disk or needs more work is left to the blocking
    /// pool (`None`): a large (mapped) payload, a compressed one, a block not open yet, an
    /// index larger than the bound. Missing records are errors as on the usual path.
    #[test]
    fn a_point_read_was_handed_to_the_blocking_pool_even_when_nothing_could_wait() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path(), StoreOptions::default()).unwrap();
        s.create_bucket("b", BucketSettings::default()).unwrap();
        let small: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
        let big = vec![9u8; crate::MAP_MIN as usize];
        s.write("b", "e", &WriteMeta::at(1), &small).unwrap();
        s.write("b", "e", &WriteMeta::at(2), &big).unwrap();
        let max = 1 << 20;
        let Some((meta, p)) = s.read_payload_now("b", "e", Some(1), max).unwrap() else {
            // Only a kernel without cachestat (before 6.5) says no here.
            assert!(!crate::resident::kernel_has_cachestat());
            return;
        };
        assert_eq!(meta.ts, 1);
        assert!(matches!(p, Payload::Memory(_)));
        assert_eq!(p.as_ref(), &small[..]);
        // the latest record (ts absent) is the large one: mapped on the pool
        assert!(s.read_payload_now("b", "e", None, max).unwrap().is_none());
        // an index larger than the bound
        assert!(s
            .read_payload_now("b", "e", Some(1), 4096)
            .unwrap()
            .is_none());
        // no such record, entry, bucket: errors, as `read_payload` says them
        assert!(matches!(
            s.read_payload_now("b", "e", Some(3), max),
            Err(Error::NotFound(_))
        ));
        assert!(matches!(
            s.read_payload_now("b", "x", Some(1), max),
            Err(Error::NotFound(_))
        ));
        // compressed: decompressed on the pool
        let z = BucketSettings {
            compression: Compression::Zstd { level: 3 },
            ..BucketSettings::default()
        };
        s.create_bucket("z", z).unwrap();
        s.write("z", "e", &WriteMeta::at(1), &vec![5u8; 4000])
            .unwrap();
        assert!(s
            .read_payload_now("z", "e", Some(1), max)
            .unwrap()
            .is_none());
        // after a reopen the block file is not open: opening it may wait, so the pool
        drop(s);
        let s = Store::open(dir.path(), StoreOptions::default()).unwrap();
        assert!(s
            .read_payload_now("b", "e", Some(1), max)
            .unwrap()
            .is_none());
        let (_, p) = s.read_payload("b", "e", Some(1)).unwrap();
        assert_eq!(p.unwrap().as_ref(), &small[..]);
        assert!(s
            .read_payload_now("b", "e", Some(1), max)
            .unwrap()
            .is_some());
    }

    /// Drops `path`'s pages from the page cache (written back first); whether they went.
    fn evict(path: &std::path::Path) -> bool {
        use std::os::unix::io::AsRawFd;
        let f = std::fs::File::open(path).unwrap();
        f.sync_all().unwrap();
        // SAFETY: a valid fd; fadvise only drops clean, unmapped cached pages.
        let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        let len = f.metadata().unwrap().len();
        rc == 0 && !crate::resident::IndexFiles::cached_file(&f, 0..len)
    }

    /// A cold disk never holds up a worker thread: a record whose block bytes or whose
    /// index pages are not in the page cache is left to the blocking pool (`None`), and
    /// read there as usual; once it is cached again, it is read on the worker.
    #[test]
    fn a_cold_record_or_index_is_never_read_on_a_worker() {
        if !crate::resident::kernel_has_cachestat() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path(), StoreOptions::default()).unwrap();
        s.create_bucket("b", BucketSettings::default()).unwrap();
        let small = vec![0x33u8; 3000];
        s.write("b", "e", &WriteMeta::at(1), &small).unwrap();
        let max = 1 << 20;
        assert!(s
            .read_payload_now("b", "e", Some(1), max)
            .unwrap()
            .is_some());
        let mut found = Vec::new();
        blocks(dir.path(), &mut found);
        let cold = evict(&found[0]);
        eprintln!("block evicted from the page cache: {cold}");
        if cold {
            assert!(
                s.read_payload_now("b", "e", Some(1), max)
                    .unwrap()
                    .is_none(),
                "a record not in the page cache was read on the worker"
            );
            let (_, p) = s.read_payload("b", "e", Some(1)).unwrap();
            assert_eq!(p.unwrap().as_ref(), &small[..]);
            assert!(s
                .read_payload_now("b", "e", Some(1), max)
                .unwrap()
                .is_some());
        }
        // The index: LMDB's pages this process has mapped stay cached (they cannot be
        // dropped); a fresh process (a reopen) has mapped few of them.
        drop(s);
        let s = Store::open(dir.path(), StoreOptions::default()).unwrap();
        let _ = s.read_payload("b", "e", Some(1)).unwrap(); // opens the block
        let mut data = None;
        let mut stack = vec![dir.path().to_path_buf()];
        while let Some(d) = stack.pop() {
            for x in std::fs::read_dir(&d).unwrap() {
                let p = x.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.file_name().is_some_and(|n| n == "data.mdb") {
                    data = Some(p);
                }
            }
        }
        let cold = evict(&data.unwrap());
        eprintln!("index evicted from the page cache: {cold}");
        if cold {
            assert!(
                s.read_payload_now("b", "e", Some(1), max)
                    .unwrap()
                    .is_none(),
                "an index not in the page cache was read on the worker"
            );
        }
    }

    /// The CRC is checked on the worker's read as on the pool's: a damaged payload byte is
    /// an error, never the bytes.
    #[test]
    fn a_damaged_payload_read_on_the_worker_is_refused() {
        use std::io::{Read, Seek, SeekFrom, Write};
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path(), StoreOptions::default()).unwrap();
        s.create_bucket("b", BucketSettings::default()).unwrap();
        let small = vec![0x5au8; 2000];
        s.write("b", "e", &WriteMeta::at(1), &small).unwrap();
        if s.read_payload_now("b", "e", Some(1), 1 << 20)
            .unwrap()
            .is_none()
        {
            assert!(!crate::resident::kernel_has_cachestat());
            return; // no cachestat: nothing is read on the worker
        }
        let mut found = Vec::new();
        blocks(dir.path(), &mut found);
        assert_eq!(found.len(), 1);
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&found[0])
            .unwrap();
        let mut all = Vec::new();
        f.read_to_end(&mut all).unwrap();
        let at = all.iter().rposition(|&b| b == 0x5a).unwrap();
        f.seek(SeekFrom::Start(at as u64)).unwrap();
        f.write_all(&[0x5b]).unwrap();
        drop(f);
        assert!(matches!(
            s.read_payload_now("b", "e", Some(1), 1 << 20),
            Err(Error::Corrupt(_))
        ));
    }
}
