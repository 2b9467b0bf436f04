//! The public face of the engine. (Skeleton: bodies arrive in the next commits.)
#![allow(unused_variables)]

use std::path::Path;

use crate::*;

/// An opened data folder. Cheap to clone; share it between threads.
#[derive(Clone)]
pub struct Store {}

/// Totals of the whole store, for metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreStats {
    pub bucket_count: u64,
    pub record_count: u64,
    /// Bytes of block files on disk.
    pub disk_bytes: u64,
    /// Blocks deleted by FIFO quotas since open.
    pub evicted_blocks: u64,
    /// Free bytes on the data folder's file system.
    pub free_bytes: u64,
}

/// One record found by a query: its metadata now, its payload on demand.
pub struct QueryItem {
    pub meta: RecordMeta,
}

impl QueryItem {
    /// The whole payload, CRC-checked.
    pub fn data(&self) -> Result<Vec<u8>> {
        todo!()
    }
    /// The payload as a stream (for large records); the CRC is checked at its end.
    pub fn reader(&self) -> Result<RecordReader> {
        todo!()
    }
}

/// Iterates the records of a query, holding O(1) records in memory.
pub struct QueryIter {}

impl Iterator for QueryIter {
    type Item = Result<QueryItem>;
    fn next(&mut self) -> Option<Self::Item> {
        todo!()
    }
}

impl Store {
    pub fn open(path: impl AsRef<Path>, opts: StoreOptions) -> Result<Store> {
        todo!()
    }
    pub fn path(&self) -> &Path {
        todo!()
    }
    pub fn options(&self) -> &StoreOptions {
        todo!()
    }
    /// What opening found and repaired.
    pub fn recovery_report(&self) -> &RecoveryReport {
        todo!()
    }
    pub fn create_bucket(&self, name: &str, settings: BucketSettings) -> Result<BucketInfo> {
        todo!()
    }
    pub fn bucket(&self, name: &str) -> Result<BucketInfo> {
        todo!()
    }
    pub fn list_buckets(&self) -> Result<Vec<BucketInfo>> {
        todo!()
    }
    pub fn update_bucket(&self, name: &str, update: &BucketSettingsUpdate) -> Result<BucketInfo> {
        todo!()
    }
    pub fn remove_bucket(&self, name: &str) -> Result<()> {
        todo!()
    }
    pub fn list_entries(&self, bucket: &str) -> Result<Vec<EntryInfo>> {
        todo!()
    }
    pub fn entry(&self, bucket: &str, entry: &str) -> Result<EntryInfo> {
        todo!()
    }
    pub fn remove_entry(&self, bucket: &str, entry: &str) -> Result<()> {
        todo!()
    }
    /// Writes one record; returns its timestamp.
    pub fn write(&self, bucket: &str, entry: &str, meta: &WriteMeta, data: &[u8]) -> Result<u64> {
        todo!()
    }
    /// Writes one record from a reader without holding it in memory. `len`, when given,
    /// must match what the reader yields (`WriteError::LengthMismatch` otherwise).
    pub fn write_stream(
        &self,
        bucket: &str,
        entry: &str,
        meta: &WriteMeta,
        reader: &mut dyn std::io::Read,
        len: Option<u64>,
    ) -> Result<u64> {
        todo!()
    }
    /// Writes many records with one index commit; one result per record, in order.
    /// The outer error is for failures of the whole batch (unknown bucket, disk full...).
    pub fn write_batch(
        &self,
        bucket: &str,
        entry: &str,
        records: Vec<BatchRecord>,
    ) -> Result<Vec<Result<u64>>> {
        todo!()
    }
    /// Reads a record (`ts = None`: the latest).
    pub fn read(&self, bucket: &str, entry: &str, ts: Option<u64>) -> Result<Record> {
        todo!()
    }
    pub fn head(&self, bucket: &str, entry: &str, ts: Option<u64>) -> Result<RecordMeta> {
        todo!()
    }
    pub fn open_record(&self, bucket: &str, entry: &str, ts: Option<u64>) -> Result<RecordReader> {
        todo!()
    }
    pub fn query(&self, bucket: &str, entry: &str, query: &Query) -> Result<QueryIter> {
        todo!()
    }
    /// Sets `set` and removes `remove` labels of a record.
    pub fn update_labels(
        &self,
        bucket: &str,
        entry: &str,
        ts: u64,
        set: &Labels,
        remove: &[String],
    ) -> Result<RecordMeta> {
        todo!()
    }
    pub fn remove_record(&self, bucket: &str, entry: &str, ts: u64) -> Result<()> {
        todo!()
    }
    /// Removes records with `start <= ts < stop`; returns how many.
    pub fn remove_range(&self, bucket: &str, entry: &str, start: u64, stop: u64) -> Result<u64> {
        todo!()
    }
    /// Forces everything written so far to stable storage.
    pub fn sync(&self) -> Result<()> {
        todo!()
    }
    pub fn stats(&self) -> StoreStats {
        todo!()
    }
}
