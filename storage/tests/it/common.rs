//! Helpers shared by the engine's integration tests.
#![allow(dead_code, clippy::unwrap_used)]

use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use tsblob_storage::*;

pub fn open(dir: &std::path::Path) -> Store {
    Store::open(dir, opts()).unwrap()
}

pub fn opts() -> StoreOptions {
    StoreOptions {
        free_space_reserve: 0,
        map_size: 1 << 30,
        when_parser: Some(when_parser()),
        ..StoreOptions::default()
    }
}

/// The tests' stand-in for the server's `when` parser (the engine reads no JSON): `all`
/// keeps every record, `label=value` those whose label has that text, `each:N` every N-th.
pub fn when_parser() -> WhenParser {
    WhenParser(std::sync::Arc::new(|text: &str| {
        if text == "all" {
            return Ok(Condition::And(vec![]));
        }
        if let Some(n) = text.strip_prefix("each:") {
            return n.parse().map(Condition::EachN).map_err(|e| format!("{e}"));
        }
        let (k, v) = text
            .split_once('=')
            .ok_or_else(|| format!("{text:?} is not all, each:N or label=value"))?;
        Ok(Condition::Compare(
            CmpOp::Eq,
            Operand::Label(k.into()),
            Operand::Const(Value::Str(v.into())),
        ))
    }))
}

pub fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub fn meta(ts: u64) -> WriteMeta {
    WriteMeta::at(ts)
}

/// Deterministic payload for (ts, len): a reader can check any record without a copy.
pub fn payload(ts: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0; len];
    Xoshiro256PlusPlus::seed_from_u64(ts).fill_bytes(&mut out);
    out
}

pub fn all_ts(store: &Store, bucket: &str, entry: &str, q: &Query) -> Vec<u64> {
    store
        .query(bucket, entry, q)
        .unwrap()
        .map(|r| r.unwrap().meta.ts)
        .collect()
}

/// parking_lot's deadlock detector, run every 100 ms until dropped: a test that holds one
/// fails (at `finish`) if any cycle of engine locks was seen while it ran. The engine's own
/// lock ranks (`storage/src/lock.rs`) catch a wrong order at once in debug builds; this
/// catches a real cycle whatever its cause.
pub struct DeadlockWatch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: Option<std::thread::JoinHandle<Vec<String>>>,
}

impl DeadlockWatch {
    pub fn start() -> DeadlockWatch {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut found = Vec::new();
            while !s.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(std::time::Duration::from_millis(100));
                for cycle in parking_lot::deadlock::check_deadlock() {
                    let threads: Vec<String> = cycle
                        .iter()
                        .map(|t| format!("thread {:?}:\n{:?}", t.thread_id(), t.backtrace()))
                        .collect();
                    found.push(threads.join("\n"));
                }
            }
            found
        });
        DeadlockWatch {
            stop,
            handle: Some(handle),
        }
    }

    /// Stops the watch; the cycles it saw, if any, fail the caller.
    pub fn finish(mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let found = self
            .handle
            .take()
            .map(|h| h.join().unwrap())
            .unwrap_or_default();
        assert!(
            found.is_empty(),
            "deadlock detected:\n{}",
            found.join("\n---\n")
        );
    }
}

/// Runs the calling test (`module::name`) again in a child process of this test binary and
/// fails if it fails there: for a test whose outcome depends on the process (its open files,
/// a process-wide detector). Returns `true` in the child, where the test body runs, and
/// `false` in the parent once the child passed.
pub fn own_process(test: &str) -> bool {
    if std::env::var("TSBLOB_TEST_CHILD").as_deref() == Ok(test) {
        return true;
    }
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env("TSBLOB_TEST_CHILD", test)
        .status()
        .unwrap();
    assert!(status.success(), "{test} failed in its own process");
    false
}

/// For a test on a file system of its own, in a process of its own (a child another test
/// forks holds copies of open block files until it execs, so deleted blocks may not free
/// their space at once): the tmpfs in the test's own process, `None` in the parent (which
/// ran it) or where mounting is not allowed (said, and the test passes).
pub fn own_tmpfs(test: &str, size: &str) -> Option<Tmpfs> {
    if !own_process(test) {
        return None;
    }
    let fs = Tmpfs::mount(size);
    if fs.is_none() {
        println!("SKIPPED: cannot mount a {size} tmpfs here (needs root)");
    }
    fs
}

/// A tmpfs mounted on a fresh temporary folder for one test, unmounted when dropped: a file
/// system of the test's own, whose free space no other process moves. `None` where mounting
/// is not allowed (not root): the caller prints why it skips and passes.
pub struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// `size` as `mount -o size=` takes it (`32m`).
    pub fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        mounted.then_some(Tmpfs { dir })
    }

    pub fn path(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// Bytes free for an unprivileged writer, as `df` reports them (what the engine's
    /// free-space guard reads too: `f_bavail`).
    pub fn free(&self) -> u64 {
        let out = std::process::Command::new("df")
            .args(["-B1", "--output=avail"])
            .arg(self.dir.path())
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        text.lines().nth(1).unwrap().trim().parse().unwrap()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.dir.path())
            .status();
    }
}
