//! The change feed (`storage/src/feed.rs`): what replication reads.
#![allow(clippy::unwrap_used)]

use crate::common;
use common::*;
use tsblob_storage::*;

fn all() -> FeedFilter {
    FeedFilter::new(EntrySelection::all(), None)
}

/// Writes in any timestamp order reach the feed in commit order, only for the watched
/// bucket, and only after the reader exists; positions and the backlog survive a reopen.
#[test]
fn feed_lists_puts_of_watched_buckets_in_commit_order_and_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.create_bucket("a", BucketSettings::default()).unwrap();
    store.create_bucket("b", BucketSettings::default()).unwrap();
    store.write("a", "e", &meta(5), b"before").unwrap();
    assert_eq!(store.feed_subscribe("t", "a").unwrap(), (0, true));
    // Out of timestamp order, a new entry, and another bucket.
    store.write("a", "e", &meta(100), b"x100").unwrap();
    store.write("a", "e", &meta(50), b"x50").unwrap();
    store.write("b", "e", &meta(60), b"other").unwrap();
    store.write("a", "new/one", &meta(7), b"x7").unwrap();
    let page = store
        .feed_read("t", 0, &mut all(), FeedLimits::new(100, u64::MAX))
        .unwrap();
    let got: Vec<(String, u64, Vec<u8>)> = page
        .records
        .iter()
        .map(|r| (r.entry.clone(), r.ts, r.whole().unwrap().data.clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("e".into(), 100, b"x100".to_vec()),
            ("e".into(), 50, b"x50".to_vec()),
            ("new/one".into(), 7, b"x7".to_vec()),
        ]
    );
    assert!(!page.more);
    let pending = store.feed_pending("t", &all()).unwrap();
    assert_eq!((pending.records, pending.bytes), (3, 9));
    let second = page.records[1].seq;
    store.feed_ack("t", second).unwrap();
    drop(store);

    let store = open(dir.path());
    assert_eq!(
        store.feed_readers().unwrap(),
        vec![("t".into(), "a".into(), second)]
    );
    // Watching resumes at open: a write after the reopen is fed too.
    store.write("a", "e", &meta(200), b"x200").unwrap();
    let page = store
        .feed_read("t", second, &mut all(), FeedLimits::new(100, u64::MAX))
        .unwrap();
    let ts: Vec<u64> = page.records.iter().map(|r| r.ts).collect();
    assert_eq!(ts, vec![7, 200]);
    // Entry globs and conditions filter.
    let mut only_e = FeedFilter::new(EntrySelection::new(&["e".into()]).unwrap(), None);
    let page = store
        .feed_read("t", second, &mut only_e, FeedLimits::new(100, u64::MAX))
        .unwrap();
    assert_eq!(page.records.len(), 1);
    assert_eq!(page.end, page.records[0].seq);
    // Unsubscribing stops the feed and empties it.
    store.feed_unsubscribe("t").unwrap();
    store.write("a", "e", &meta(300), b"x300").unwrap();
    assert!(store.feed_readers().unwrap().is_empty());
    store.feed_subscribe("t2", "a").unwrap();
    let page = store
        .feed_read("t2", 0, &mut all(), FeedLimits::new(100, u64::MAX))
        .unwrap();
    assert!(page.records.is_empty(), "{page:?}");
}

/// A record the FIFO quota evicted before it was read is reported gone (`record: None`),
/// never skipped silently.
#[test]
fn evicted_before_read_is_reported_gone() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let settings = BucketSettings {
        quota_type: QuotaType::Fifo,
        quota_size: 64 << 10,
        max_block_size: 16 << 10,
        ..BucketSettings::default()
    };
    store.create_bucket("a", settings).unwrap();
    store.feed_subscribe("t", "a").unwrap();
    for ts in 1..=40u64 {
        store
            .write("a", "e", &meta(ts), &payload(ts, 4096))
            .unwrap();
    }
    let page = store
        .feed_read("t", 0, &mut all(), FeedLimits::new(1000, u64::MAX))
        .unwrap();
    assert_eq!(page.records.len(), 40);
    let gone = page.records.iter().filter(|r| r.meta().is_none()).count();
    assert!(gone > 0, "the quota evicted nothing");
    for r in page.records.iter().filter_map(|r| r.whole()) {
        assert_eq!(r.data, payload(r.meta.ts, 4096));
    }
    // The oldest are the ones gone.
    assert!(page.records[..gone].iter().all(|r| r.meta().is_none()));
}

/// The byte bound ends a page after the record that reached it; the next read resumes there.
#[test]
fn pages_are_bounded_and_resume() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.create_bucket("a", BucketSettings::default()).unwrap();
    store.feed_subscribe("t", "a").unwrap();
    for ts in 1..=10u64 {
        store.write("a", "e", &meta(ts), &payload(ts, 100)).unwrap();
    }
    let mut seen = Vec::new();
    let mut pos = 0;
    loop {
        let page = store
            .feed_read("t", pos, &mut all(), FeedLimits::new(3, 250))
            .unwrap();
        seen.extend(page.records.iter().map(|r| r.ts));
        pos = page.end;
        if !page.more {
            break;
        }
    }
    assert_eq!(seen, (1..=10).collect::<Vec<_>>());
}

/// Records above the read's inline bound come back as metadata only (the replication
/// sender streams them from the block): a page never holds a large payload in memory.
#[test]
fn large_payloads_stay_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.create_bucket("a", BucketSettings::default()).unwrap();
    store.feed_subscribe("t", "a").unwrap();
    store.write("a", "e", &meta(1), &payload(1, 100)).unwrap();
    store.write("a", "e", &meta(2), &payload(2, 5000)).unwrap();
    let limits = FeedLimits {
        records: 10,
        bytes: u64::MAX,
        inline: 1000,
    };
    let page = store.feed_read("t", 0, &mut all(), limits).unwrap();
    assert_eq!(page.records.len(), 2);
    assert_eq!(page.records[0].whole().unwrap().data, payload(1, 100));
    match &page.records[1].payload {
        FeedPayload::Large(m) => assert_eq!((m.ts, m.size), (2, 5000)),
        other => panic!("expected metadata only, got {other:?}"),
    }
}

/// Bug: a reader's `$limit` counted the records of all its entries together (a task
/// limited to 2 sent two records in all); ReductStore keeps one filter per entry, so each
/// entry gives its own 2. `!` patterns exclude entries a glob names.
#[test]
fn feed_limit_counts_per_entry_and_exclusions_drop_entries() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.create_bucket("a", BucketSettings::default()).unwrap();
    store.feed_subscribe("t", "a").unwrap();
    for ts in 1..=5u64 {
        for e in ["cam-1", "cam-2", "cam-debug"] {
            store.write("a", e, &meta(ts), b"x").unwrap();
        }
    }
    let cond = Condition::Limit(2);
    let mut f = FeedFilter::new(
        EntrySelection::new(&["cam*".into(), "!cam-debug".into()]).unwrap(),
        Some(&cond),
    );
    assert!(f.wants_entry("cam-1") && !f.wants_entry("cam-debug"));
    let page = store
        .feed_read("t", 0, &mut f, FeedLimits::new(100, u64::MAX))
        .unwrap();
    let mut got: Vec<(String, u64)> = page
        .records
        .iter()
        .map(|r| (r.entry.clone(), r.ts))
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            ("cam-1".into(), 1),
            ("cam-1".into(), 2),
            ("cam-2".into(), 1),
            ("cam-2".into(), 2)
        ]
    );
}

/// Bug: a bucket rename left its feed readers on the old name: the backlog and the next
/// writes were read from a bucket that no longer existed. Now the readers and the pending
/// items follow the bucket, at the same position.
#[test]
fn feed_readers_and_backlog_follow_a_bucket_rename() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.create_bucket("a", BucketSettings::default()).unwrap();
    store.feed_subscribe("t", "a").unwrap();
    store.write("a", "e", &meta(1), b"before").unwrap();
    store.rename_bucket("a", "b").unwrap();
    store.write("b", "e", &meta(2), b"after").unwrap();
    assert_eq!(
        store.feed_readers().unwrap(),
        vec![("t".into(), "b".into(), 0)]
    );
    let page = store
        .feed_read("t", 0, &mut all(), FeedLimits::new(100, u64::MAX))
        .unwrap();
    let got: Vec<(u64, Vec<u8>)> = page
        .records
        .iter()
        .map(|r| (r.ts, r.whole().unwrap().data.clone()))
        .collect();
    assert_eq!(got, vec![(1, b"before".to_vec()), (2, b"after".to_vec())]);
    // After a reopen too.
    drop(store);
    let store = open(dir.path());
    store.write("b", "e", &meta(3), b"later").unwrap();
    let page = store
        .feed_read("t", 0, &mut all(), FeedLimits::new(100, u64::MAX))
        .unwrap();
    assert_eq!(
        page.records.iter().map(|r| r.ts).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
}

/// Bug: a page counted payload bytes only, so records of one byte carrying 60 KB of labels
/// filled a page of 2,000 (120 MB of labels; the replication sender of a device held 310 MB
/// more while it replicated 3,000 of them). Labels and content types count now.
#[test]
fn labels_count_in_the_page_bound() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.create_bucket("a", BucketSettings::default()).unwrap();
    store.feed_subscribe("t", "a").unwrap();
    for ts in 1..=100u64 {
        let mut m = meta(ts);
        for i in 0..15 {
            m.labels
                .insert(format!("l{i}"), format!("{ts}-{}", "x".repeat(3990)));
        }
        store.write("a", "e", &m, b"x").unwrap();
    }
    let page = store
        .feed_read("t", 0, &mut all(), FeedLimits::new(2000, 1 << 20))
        .unwrap();
    // 1 MiB holds 17 records of 60 KB; the page ends after the one that passes it.
    assert_eq!(page.records.len(), 18);
    assert!(page.more);
    let weight: u64 = page
        .records
        .iter()
        .map(|r| r.meta().unwrap().weight())
        .sum();
    assert!((1 << 20..(1 << 20) + 61_000).contains(&weight), "{weight}");
}
