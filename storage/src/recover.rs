//! Opening a data folder: the lock, the index, start-up checks and the full rebuild.
//!
//! The block files are the truth. At open, every block file is compared with what the
//! index knows of it: bytes past the indexed length are scanned, CRC-valid frames are
//! re-indexed and a torn or garbage tail is cut; a block shorter than the index thinks, or
//! unknown to it, is re-indexed whole; the state of a vanished block is dropped. A missing,
//! unopenable, foreign-version or inconsistent index is rebuilt from scratch by the same
//! scan. Every repair is logged and listed in the [`RecoveryReport`].

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use heed::RwTxn;

use crate::ballast;
use crate::block::{
    head_crc, header_cut_short, open_block, parse_block_name, read_head, verify_frame, OpenedBlock,
};
use crate::bucket::Bucket;
use crate::codec::frame::{FLAG_DELETED, FRAME_MAGIC};
use crate::codec::index::{Attrs, BlockState, IndexValue};
use crate::entry::{Entry, EntryState};
use crate::error::{Error, OpenError, Result};
use crate::index::{version_number, Index, RecChange, INDEX_VERSION, INDEX_VERSION_NO_OPEN};
use crate::layout::{INDEX_DIR, LOCK_FILE, SETTINGS_FILE};
use crate::names::{entry_dir_name, entry_from_dir_name};
use crate::names::{validate_bucket_name, validate_entry_name};
use crate::now_micros;
use crate::record::RecoveryReport;
use crate::settings::{BucketSettings, StoreOptions, SyncPolicy};
use crate::trash::Trash;

/// What opening a data folder found: built by this module, turned into the store's `Inner` by `Store::open`.
pub(crate) struct Loaded {
    pub path: PathBuf,
    pub lock: FolderLock,
    pub index: Index,
    pub buckets: BTreeMap<String, Arc<Bucket>>,
    pub next_block: u64,
    pub next_entry: u32,
    pub trash: Trash,
    pub report: RecoveryReport,
    /// The ballast is missing for want of room: the store makes it once there is.
    pub ballast_owed: bool,
}

/// The locks a process holds on a data folder it has open: `tsblob.lock` (the documented
/// one) and the folder itself. Bug "a deleted lock file lets a second server in": an
/// operator (or a clean-up script) removing `tsblob.lock` under a running server let a second
/// `tsblob serve` create a new one, lock it and write into the same buckets and index. The
/// folder cannot be swapped under a running server the same way, so its lock holds.
pub(crate) struct FolderLock {
    _folder: File,
    _file: File,
}

/// Creates a data folder, if missing, readable by its owner only (`0700`; its parents as
/// `create_dir_all` makes them): every record and the index are in it, and with the usual
/// umask its files were readable by every user of the machine (hostile probe of
/// 2026-11-28). An existing folder keeps its mode (the server warns when others can read it).
pub fn create_data_folder(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if path.exists() {
        return Ok(());
    }
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(path) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        other => other,
    }
}

fn lock_folder(path: &Path) -> Result<FolderLock> {
    create_data_folder(path).map_err(|e| OpenError::Folder(path.to_path_buf(), e.to_string()))?;
    if !path.is_dir() {
        return Err(OpenError::Folder(path.to_path_buf(), "not a directory".into()).into());
    }
    let folder = File::open(path)
        .map_err(|e| OpenError::Folder(path.to_path_buf(), format!("cannot open it: {e}")))?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path.join(LOCK_FILE))
        .map_err(|e| OpenError::Folder(path.to_path_buf(), format!("cannot write in it: {e}")))?;
    // The folder first: a holder whose lock file was deleted still holds it.
    try_lock(path, &folder)?;
    try_lock(path, &file)?;
    Ok(FolderLock {
        _folder: folder,
        _file: file,
    })
}

fn try_lock(path: &Path, lock: &File) -> Result<()> {
    // A store dropped a moment ago may still hold the lock for a few milliseconds: its last
    // reference can be in a background thread (sync, retention) finishing a pass, and a child
    // process that this process forks keeps the lock's file description until it execs. Bug
    // seen: a reopen right after `drop` answered `Locked` when the engine's tests ran in one
    // binary beside tests that spawn children. So a busy lock is retried for up to a second
    // before `Locked` is the answer.
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    loop {
        match lock.try_lock() {
            Ok(()) => return Ok(()),
            Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(OpenError::Locked(path.to_path_buf()).into())
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(
                    OpenError::Folder(path.to_path_buf(), format!("cannot lock: {e}")).into(),
                )
            }
        }
    }
}

/// How long `open` waits for a folder lock that another holder is releasing.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Bug "a bucket without its settings file vanishes": a bucket folder whose `settings` file
/// was lost (deleted by hand, a backup restored without it) was not loaded as a bucket, its
/// entries were dropped from the index as "removed", and creating the bucket again hid its
/// records until the next open brought them back beside the new ones. A folder that holds
/// an entry with block files is a bucket: its settings are restored (from a whole
/// `settings.tmp` if one was left, else the store's default bucket settings) and said so.
fn restore_lost_settings(
    path: &Path,
    defaults: &BucketSettings,
    report: &mut RecoveryReport,
) -> Result<()> {
    let rd = std::fs::read_dir(path).map_err(|e| Error::io(format!("listing {path:?}"), e))?;
    for d in rd.flatten() {
        let dir = d.path();
        let name = d.file_name().to_string_lossy().to_string();
        if name == INDEX_DIR
            || !dir.is_dir()
            || dir.join(SETTINGS_FILE).exists()
            || validate_bucket_name(&name).is_err()
        {
            continue;
        }
        let mut holds_blocks = false;
        for (_, e) in entry_dirs(&dir)? {
            if !block_files(&e)?.is_empty() {
                holds_blocks = true;
                break;
            }
        }
        if !holds_blocks {
            continue;
        }
        let left = std::fs::read_to_string(dir.join(format!("{SETTINGS_FILE}.tmp")))
            .ok()
            .and_then(|t| BucketSettings::from_file_text(&t).ok());
        let (settings, from) = match left {
            Some(s) => (s, "the settings.tmp left beside it"),
            None => (defaults.clone(), "the default bucket settings"),
        };
        crate::bucket::write_settings(&dir, &settings)?;
        note(report, &format!("bucket folder {name} holds entries but had no settings file: kept as bucket {name} with {from} (check its quota and block size)"));
    }
    Ok(())
}

/// Bucket folders: subfolders holding a settings file.
fn bucket_dirs(path: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    let rd = std::fs::read_dir(path).map_err(|e| Error::io(format!("listing {path:?}"), e))?;
    for d in rd.flatten() {
        let p = d.path();
        let name = d.file_name().to_string_lossy().to_string();
        if name != INDEX_DIR
            && p.is_dir()
            && p.join(SETTINGS_FILE).is_file()
            && validate_bucket_name(&name).is_ok()
        {
            out.push((name, p));
        }
    }
    out.sort();
    Ok(out)
}

fn entry_dirs(bucket_dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    let rd = std::fs::read_dir(bucket_dir)
        .map_err(|e| Error::io(format!("listing {bucket_dir:?}"), e))?;
    for d in rd.flatten() {
        let p = d.path();
        let name = entry_from_dir_name(&d.file_name().to_string_lossy());
        if p.is_dir() && validate_entry_name(&name).is_ok() {
            out.push((name, p));
        }
    }
    out.sort();
    Ok(out)
}

fn block_files(entry_dir: &Path) -> Result<BTreeMap<u64, PathBuf>> {
    let mut out = BTreeMap::new();
    let rd =
        std::fs::read_dir(entry_dir).map_err(|e| Error::io(format!("listing {entry_dir:?}"), e))?;
    for d in rd.flatten() {
        if let Some(id) = parse_block_name(&d.file_name().to_string_lossy()) {
            out.insert(id, d.path());
        }
    }
    Ok(out)
}

fn any_blocks(path: &Path) -> Result<bool> {
    for (_, b) in bucket_dirs(path)? {
        for (_, e) in entry_dirs(&b)? {
            if !block_files(&e)?.is_empty() {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// Why the index cannot be trusted, if it cannot. An index of a newer format than this
/// code's is an error (an older tsblob must not rebuild, and so undo, what a newer one
/// wrote: it is refused, and says how to go on).
fn index_problem(index: &Index, dir: &Path) -> Result<Option<String>> {
    let txn = index.read_txn()?;
    match index.version(&txn)? {
        Some(v) if v == INDEX_VERSION => {}
        // (`None`, not a numbered version, orders below every number)
        Some(v) if version_number(&v) > version_number(INDEX_VERSION) => {
            return Err(OpenError::IndexTooNew {
                path: dir.to_path_buf(),
                found: String::from_utf8_lossy(&v).into_owned(),
                known: String::from_utf8_lossy(INDEX_VERSION).into_owned(),
            }
            .into())
        }
        Some(v) => {
            return Ok(Some(format!(
                "index version {:?} is not {:?}",
                String::from_utf8_lossy(&v),
                String::from_utf8_lossy(INDEX_VERSION)
            )))
        }
        None => return Ok(Some("index has no version".into())),
    }
    let mut live = 0u64;
    for (_, m) in index.blocks(&txn)? {
        let Some(m) = m else {
            return Ok(Some("undecodable block metadata".into()));
        };
        live += m.records;
    }
    let n = index.count_records(&txn)?;
    if n != live {
        return Ok(Some(format!(
            "index holds {n} records but its blocks count {live}"
        )));
    }
    Ok(None)
}

fn open_index(
    path: &Path,
    opts: &StoreOptions,
    report: &mut RecoveryReport,
) -> Result<(Index, bool)> {
    let dir = path.join(INDEX_DIR);
    let existed = dir.join("data.mdb").is_file();
    if !existed && any_blocks(path)? {
        note(report, "index missing: rebuilding it from the block files");
        report.rebuilt = Some("index missing".into());
        return Ok((Index::open(&dir, opts.map_size)?, true));
    }
    match Index::open(&dir, opts.map_size) {
        Ok(index) if !existed => {
            let mut txn = index.write_txn()?;
            index.set_version(&mut txn)?;
            txn.commit()?;
            Ok((index, false))
        }
        Ok(index) => match upgrade_format_2(&index).and_then(|()| index_problem(&index, &dir)) {
            Ok(None) => Ok((index, false)),
            Ok(Some(why)) | Err(Error::Index(why)) => {
                note(
                    report,
                    &format!("index unusable ({why}): rebuilding it from the block files"),
                );
                report.rebuilt = Some(why);
                clear_index(&index)?;
                Ok((index, true))
            }
            Err(e) => Err(e),
        },
        Err(e @ Error::Open(OpenError::Index { .. })) if opts.map_size > 0 => {
            // An index that LMDB will not open (damaged file): set it aside and rebuild.
            let aside = path.join(format!("{INDEX_DIR}.damaged-{}", now_micros()));
            note(
                report,
                &format!("index could not be opened ({e}); moved to {aside:?}, rebuilding"),
            );
            std::fs::rename(&dir, &aside)
                .map_err(|err| Error::io(format!("moving {dir:?} aside"), err))?;
            report.rebuilt = Some(e.to_string());
            Ok((Index::open(&dir, opts.map_size)?, true))
        }
        Err(e) => Err(e),
    }
}

/// Raises an index of format 2 (every chunk in `chunks`, a valid layout of the current
/// format) to the current version, in one commit before any write can fill `open`: a crash
/// leaves either version with a layout valid for it. Rows in `open` are dropped in that
/// commit: format 2 code never reads nor clears that table, so any there are left from a
/// format 3 index that an older tsblob rebuilt (a downgrade), stale and keyed by entry ids
/// the rebuild may have given to other entries.
fn upgrade_format_2(index: &Index) -> Result<()> {
    let old = index.version(&index.read_txn()?)?;
    if old.as_deref() == Some(INDEX_VERSION_NO_OPEN) {
        let mut txn = index.write_txn()?;
        let stale = index.clear_open_chunks(&mut txn)?;
        index.set_version(&mut txn)?;
        txn.commit()?;
        log::info!("index of format 2 raised to format 3 ({stale} stale open chunks dropped)");
    }
    Ok(())
}

fn clear_index(index: &Index) -> Result<()> {
    let mut txn = index.write_txn()?;
    index.clear_all(&mut txn)?;
    txn.commit()?;
    Ok(())
}

fn note(report: &mut RecoveryReport, line: &str) {
    log::warn!("{line}");
    report.events.push(line.to_string());
}

/// Opens a data folder: locks it, opens (or rebuilds) the index, empties the trash and
/// reconciles every block file with the index. Returns what `Store::open` builds on.
pub(crate) fn open(path: &Path, opts: &StoreOptions) -> Result<Loaded> {
    let lock = lock_folder(path)?;
    let path = path
        .canonicalize()
        .map_err(|e| Error::io(format!("resolving {path:?}"), e))?;
    let mut notes = RecoveryReport::default();
    // On a disk with (nearly) no byte free, LMDB can neither grow data.mdb for a repair nor
    // make a missing lock.mdb (a page fault on its map is a SIGBUS): the ballast goes first.
    if ballast::nearly_full(&path) && ballast::release(&path) {
        note(&mut notes, "the disk holding the data folder has (nearly) no space left: deleted the ballast (index/ballast) to give the index room; it is made again when the disk has room");
    }
    let attempt = match open_locked(&path, opts) {
        // A repair's index commit met a full disk: the ballast gives it room, once.
        Err(e) if ballast::out_of_space(&e, &path) && ballast::release(&path) => {
            note(&mut notes, &format!("opening met a full disk ({e}): deleted the ballast (index/ballast) to make room for the repair; it is made again when the disk has room"));
            open_locked(&path, opts)
        }
        r => r,
    };
    let (trash, index, (buckets, next_block, next_entry), mut report) =
        attempt.map_err(|e| crate::quota::type_full_disk(e, &path))?;
    notes.events.append(&mut report.events);
    report.events = notes.events;
    let ballast_owed = ballast::ensure(&path, opts.free_space_reserve) == ballast::Ensured::NoRoom;
    Ok(Loaded {
        ballast_owed,
        path,
        lock,
        index,
        buckets,
        next_block,
        next_entry,
        trash,
        report,
    })
}

/// [`open`]'s steps after the lock: each can run again after a failure (what a first run
/// repaired on disk, the second finds repaired).
fn open_locked(path: &Path, opts: &StoreOptions) -> Result<(Trash, Index, Found, RecoveryReport)> {
    let mut report = RecoveryReport::default();
    let trash = Trash::open(path, opts.sync == SyncPolicy::Always, &mut report)?;
    restore_lost_settings(path, &opts.default_bucket, &mut report)?;
    let (index, rebuild) = open_index(path, opts, &mut report)?;
    let found = load(path, &index, rebuild, &mut report)?;
    Ok((trash, index, found, report))
}

/// Rebuilds the LMDB index of a data folder from its block files alone. The folder must
/// not be open (it is locked for the duration).
pub fn rebuild_index(path: &Path, opts: &StoreOptions) -> Result<RecoveryReport> {
    let _lock = lock_folder(path)?;
    let mut report = RecoveryReport {
        rebuilt: Some("requested".into()),
        ..RecoveryReport::default()
    };
    restore_lost_settings(path, &opts.default_bucket, &mut report)?;
    let index = Index::open(&path.join(INDEX_DIR), opts.map_size)?;
    clear_index(&index)?;
    load(path, &index, true, &mut report)?;
    index.force_sync()?;
    Ok(report)
}

type Found = (BTreeMap<String, Arc<Bucket>>, u64, u32);

/// Loads buckets, entries and blocks, reconciling the index with the block files.
fn load(path: &Path, index: &Index, rebuild: bool, report: &mut RecoveryReport) -> Result<Found> {
    let mut buckets = BTreeMap::new();
    let mut next_block = 1u64;
    let mut next_entry = 1u32;
    // Known entries and blocks, from the index.
    let mut known_entries: HashMap<(String, String), u32> = HashMap::new();
    let mut metas: HashMap<u64, BlockState> = HashMap::new();
    {
        let txn = index.read_txn()?;
        for (b, e, id) in index.entries(&txn)? {
            next_entry = next_entry.max(id + 1);
            known_entries.insert((b, e), id);
        }
        for (id, m) in index.blocks(&txn)? {
            next_block = next_block.max(id + 1);
            if let Some(m) = m {
                metas.insert(id, m);
            }
        }
    }
    let mut txn = index.write_txn()?;
    if rebuild {
        index.set_version(&mut txn)?;
    }
    let mut seen_entries = std::collections::HashSet::new();
    // Entry id -> its (bucket, entry) in the index: to find the old name of a folder whose
    // rename a crash interrupted.
    let mut by_id: HashMap<u32, (String, String)> = known_entries
        .iter()
        .map(|(k, id)| (*id, k.clone()))
        .collect();
    for (bname, bdir) in bucket_dirs(path)? {
        let text = std::fs::read_to_string(bdir.join(SETTINGS_FILE))
            .map_err(|e| Error::io(format!("reading settings of {bname}"), e))?;
        let settings = BucketSettings::from_file_text(&text).map_err(|e| {
            OpenError::Folder(
                path.to_path_buf(),
                format!("bucket {bname}: settings file: {e}"),
            )
        })?;
        let bucket = Bucket::new(&bname, bdir.clone(), settings);
        let mut size = 0u64;
        for (ename, edir) in entry_dirs(&bdir)? {
            let key = (bname.clone(), ename.clone());
            let id = match known_entries.get(&key) {
                Some(id) => *id,
                None => match renamed_from(path, &edir, &metas, &by_id)? {
                    // A rename (`store/rename.rs`) a crash interrupted between the folder's
                    // rename and the index commit (or before the folder's new name was
                    // durable): the folder keeps its entry id and blocks under its name.
                    Some((id, (ob, oe))) => {
                        note(report, &format!("entry {bname}/{ename} holds the blocks the index filed under {ob}/{oe}, whose folder is gone (a rename a crash interrupted): kept as {bname}/{ename}"));
                        index.delete_entry(&mut txn, &ob, &oe)?;
                        index.put_entry(&mut txn, &bname, &ename, id)?;
                        known_entries.remove(&(ob, oe));
                        by_id.remove(&id);
                        id
                    }
                    None => {
                        let id = next_entry;
                        next_entry += 1;
                        index.put_entry(&mut txn, &bname, &ename, id)?;
                        id
                    }
                },
            };
            seen_entries.insert(key);
            if crate::attachments::clear_leftover(&edir) {
                note(report, &format!("entry {bname}/{ename}: deleted the attachments.tmp a crash left (the attachments file before that change is kept)"));
            }
            let mut blocks = BTreeMap::new();
            let mut files = block_files(&edir)?;
            // Tiered blocks live in the object store: a local file left by a crash between
            // the commit that tiered the block and its unlink is deleted.
            let tiered: Vec<(u64, BlockState)> = metas
                .iter()
                .filter(|(_, m)| m.entry_id == id && m.tiered)
                .map(|(bid, m)| (*bid, *m))
                .collect();
            for (bid, m) in tiered {
                metas.remove(&bid);
                if let Some(p) = files.remove(&bid) {
                    note(report, &format!("block {bid:016x} of {bname}/{ename} is tiered: deleting the local copy a crash left"));
                    if let Err(e) = std::fs::remove_file(&p) {
                        log::warn!("could not delete {p:?}: {e}");
                    }
                }
                next_block = next_block.max(bid + 1);
                size += m.indexed_len;
                blocks.insert(bid, BlockState { sealed: true, ..m });
            }
            // Metadata whose file vanished: drop it and its records.
            let stale: Vec<u64> = metas
                .iter()
                .filter(|(bid, m)| m.entry_id == id && !files.contains_key(bid))
                .map(|(bid, _)| *bid)
                .collect();
            for bid in stale {
                if let Some(m) = metas.remove(&bid) {
                    note(report, &format!("block {bid:016x} of {bname}/{ename} is missing: its {} records are dropped from the index", m.records));
                    drop_block_records(index, &mut txn, id, &m, bid)?;
                    index.delete_block(&mut txn, bid)?;
                }
            }
            let mut checked = Vec::new();
            for (bid, bpath) in files {
                next_block = next_block.max(bid + 1);
                let known = metas.get(&bid).copied().filter(|m| m.entry_id == id);
                let meta =
                    check_block(index, &mut txn, id, bid, &bpath, known, &mut blocks, report)?;
                if let Some(meta) = meta {
                    size += meta.indexed_len;
                    blocks.insert(bid, meta);
                    checked.push(bid);
                }
            }
            // Stored once every file is checked: a later block's scan may retire a record
            // of an earlier one (the later copy of a label update wins), which lowers that
            // block's count. Stored before that, the index's counts disagreed with its
            // records and every later open rebuilt the whole index.
            // Only what changed: an open after a clean close writes nothing (on a full disk
            // a commit may find no room).
            for bid in checked {
                let Some(meta) = blocks.get(&bid) else {
                    continue;
                };
                let known = metas.get(&bid).filter(|m| m.entry_id == id);
                if known.is_none_or(|k| {
                    BlockState {
                        sealed: k.sealed,
                        ..*meta
                    } != *k
                }) {
                    index.put_block(&mut txn, bid, meta)?;
                }
            }
            let entry = Entry::new(id, &ename, &bdir, EntryState::new(blocks));
            bucket.insert_entry(Arc::new(entry));
        }
        bucket.set_size(size);
        buckets.insert(bname, Arc::new(bucket));
    }
    // Entries the index knows but whose folders are gone.
    for ((b, e), id) in &known_entries {
        if !seen_entries.contains(&(b.clone(), e.clone())) {
            note(
                report,
                &format!("entry {b}/{e} has no folder (removed): dropping it from the index"),
            );
            index.delete_entry(&mut txn, b, e)?;
            index.delete_entry_records(&mut txn, *id)?;
            // Its block rows too: left, their record counts would disagree with the
            // records at every later open, and each open would rebuild the whole index.
            // (A tiered block's object becomes an orphan, which the tier's sweep removes.)
            for (bid, _) in metas.iter().filter(|(_, m)| m.entry_id == *id) {
                index.delete_block(&mut txn, *bid)?;
            }
        }
    }
    txn.commit()?;
    Ok((buckets, next_block, next_entry))
}

/// The entry id and old (bucket, entry) of a folder the index does not know by its name,
/// when all its block files belong, in the index, to one entry whose own folder is gone:
/// the trace of an interrupted rename.
fn renamed_from(
    path: &Path,
    edir: &Path,
    metas: &HashMap<u64, BlockState>,
    by_id: &HashMap<u32, (String, String)>,
) -> Result<Option<(u32, (String, String))>> {
    let owners: std::collections::BTreeSet<u32> = block_files(edir)?
        .keys()
        .filter_map(|bid| metas.get(bid))
        .map(|m| m.entry_id)
        .collect();
    let mut it = owners.into_iter();
    let (Some(id), None) = (it.next(), it.next()) else {
        return Ok(None);
    };
    Ok(by_id
        .get(&id)
        .filter(|(b, e)| !path.join(b).join(entry_dir_name(e)).exists())
        .map(|k| (id, k.clone())))
}

fn drop_block_records(
    index: &Index,
    txn: &mut RwTxn<'_>,
    entry_id: u32,
    m: &BlockState,
    bid: u64,
) -> Result<()> {
    if m.records == 0 {
        return Ok(());
    }
    index.delete_block_records(txn, entry_id, m.min_ts, m.max_ts, bid)
}

/// Reconciles one block file with its state. Returns the block's state, or `None`
/// if the file is unusable (set aside).
#[allow(clippy::too_many_arguments)]
fn check_block(
    index: &Index,
    txn: &mut RwTxn<'_>,
    entry_id: u32,
    bid: u64,
    bpath: &Path,
    known: Option<BlockState>,
    blocks: &mut BTreeMap<u64, BlockState>,
    report: &mut RecoveryReport,
) -> Result<Option<BlockState>> {
    let OpenedBlock {
        file,
        base_ts,
        header_len,
    } = match open_block(bpath) {
        Ok(x) => x,
        Err(_) if header_cut_short(bpath)? => {
            // Set aside as corrupt, such files were kept for good, one per such crash.
            note(report, &format!("block {bpath:?} ends inside its header (a crash while it was being created; it never held a record): deleted"));
            if let Some(m) = known {
                drop_block_records(index, txn, entry_id, &m, bid)?;
            }
            index.delete_block(txn, bid)?;
            std::fs::remove_file(bpath)
                .map_err(|err| Error::io(format!("deleting {bpath:?}"), err))?;
            return Ok(None);
        }
        Err(e) => {
            let aside = bpath.with_extension("corrupt");
            note(
                report,
                &format!("block {bpath:?} has no valid header ({e}); moved to {aside:?}"),
            );
            if let Some(m) = known {
                drop_block_records(index, txn, entry_id, &m, bid)?;
            }
            index.delete_block(txn, bid)?;
            std::fs::rename(bpath, &aside)
                .map_err(|err| Error::io(format!("moving {bpath:?}"), err))?;
            return Ok(None);
        }
    };
    let file_len = file
        .metadata()
        .map_err(|e| Error::io(format!("stat {bpath:?}"), e))?
        .len();
    let (mut meta, from) = match known {
        Some(m) if m.indexed_len == file_len => {
            let mut m = m;
            m.sealed = true;
            return Ok(Some(m));
        }
        Some(m) if m.indexed_len < file_len => (m, m.indexed_len),
        Some(m) => {
            note(report, &format!("block {bpath:?} is {file_len} bytes but the index knew {}: re-indexing it whole", m.indexed_len));
            drop_block_records(index, txn, entry_id, &m, bid)?;
            (fresh_state(entry_id, base_ts), header_len)
        }
        None => (fresh_state(entry_id, base_ts), header_len),
    };
    let mut pos = from;
    let mut added = 0u64;
    // Records found, indexed in batches (sorted, chunk by chunk); `batched` says where a
    // timestamp is in `batch`, for a second frame of one timestamp within this scan.
    let mut batch: Vec<(u64, IndexValue)> = Vec::new();
    let mut batched: HashMap<u64, usize> = HashMap::new();
    let mut shared: Option<Arc<Attrs>> = None;
    loop {
        if pos >= file_len {
            break;
        }
        let valid = match read_head(&file, pos, file_len, base_ts)
            .map_err(|e| Error::io(format!("reading {bpath:?}"), e))?
        {
            Ok(Some(h)) if pos.saturating_add(h.frame_len()) <= file_len => {
                let hcrc = head_crc(&file, pos, &h)
                    .map_err(|e| Error::io(format!("reading {bpath:?}"), e))?;
                if verify_frame(&file, pos, &h, hcrc)
                    .map_err(|e| Error::io(format!("reading {bpath:?}"), e))?
                {
                    Ok(h)
                } else {
                    Err("CRC32C mismatch")
                }
            }
            Ok(_) => Err("torn record"),
            Err(why) => Err(why),
        };
        let head = match valid {
            Ok(h) => h,
            Err(why) => {
                // Damage stays local: a bad frame is skipped to the next valid one, and only
                // a tail with no valid frame after it is cut.
                match next_valid_frame(&file, pos + 1, file_len, base_ts)
                    .map_err(|e| Error::io(format!("reading {bpath:?}"), e))?
                {
                    Some(next) => {
                        note(report, &format!("block {bpath:?}: {why} at offset {pos}; skipped {} bytes to the next valid record at {next}", next - pos));
                        report.skipped_bytes += next - pos;
                        pos = next;
                        continue;
                    }
                    None => {
                        cut(report, &file, bpath, pos, file_len, why)?;
                        break;
                    }
                }
            }
        };
        if head.flags & FLAG_DELETED == 0 {
            // Two frames with one timestamp come from a label update cut short by a crash:
            // the later frame wins, the earlier one is retired.
            let old = match batched.get(&head.ts) {
                Some(&i) => Some((bid, batch[i].1.offset)),
                None => index
                    .find(txn, entry_id, head.ts)?
                    .map(|s| (s.block_id, s.offset)),
            };
            if let Some((old_block, old_offset)) = old {
                if old_block == bid && old_offset == pos {
                    pos += head.frame_len();
                    continue; // already indexed (an out-of-order commit)
                }
                if (old_block, old_offset) > (bid, pos) {
                    // The indexed copy is the later one (a label update whose old frame was
                    // not flagged before a crash): this frame is the superseded copy.
                    pos += head.frame_len();
                    continue;
                }
                if let Some(m) = blocks.get_mut(&old_block) {
                    m.records = m.records.saturating_sub(1);
                } else if old_block == bid {
                    meta.records = meta.records.saturating_sub(1);
                }
            }
            let rec_attrs = match &shared {
                Some(m) if m.content_type == head.content_type && m.labels == head.labels => {
                    m.clone()
                }
                _ => {
                    let m = Arc::new(Attrs {
                        content_type: head.content_type.clone(),
                        labels: head.labels.clone(),
                    });
                    shared = Some(m.clone());
                    m
                }
            };
            let value = IndexValue {
                block_id: bid,
                offset: pos,
                frame_len: head.frame_len(),
                stored: head.stored_len,
                size: head.raw_len,
                flags: head.flags,
                attrs: rec_attrs,
            };
            match batched.get(&head.ts) {
                Some(&i) => batch[i].1 = value,
                None => {
                    batched.insert(head.ts, batch.len());
                    batch.push((head.ts, value));
                }
            }
            if batch.len() >= REINDEX_BATCH {
                index_batch(index, txn, entry_id, &mut batch)?;
                batched.clear();
            }
            if meta.records == 0 {
                meta.min_ts = head.ts;
                meta.max_ts = head.ts;
            }
            meta.min_ts = meta.min_ts.min(head.ts);
            meta.max_ts = meta.max_ts.max(head.ts);
            meta.records += 1;
            added += 1;
        }
        pos += head.frame_len();
    }
    index_batch(index, txn, entry_id, &mut batch)?;
    // Only a tail scan finds records the index missed; a whole-block re-index after a
    // truncation has its own log line above.
    if added > 0 && known.is_some_and(|m| m.indexed_len == from) {
        note(report, &format!("block {bpath:?}: re-indexed {added} records written but not indexed before a crash"));
    }
    report.reindexed += added;
    meta.indexed_len = pos;
    meta.sealed = true;
    Ok(Some(meta))
}

/// Frames re-indexed per [`Index::apply_changes`] call in a block scan.
const REINDEX_BATCH: usize = 1 << 16;

/// Indexes records found by a block scan (unique timestamps, any order).
fn index_batch(
    index: &Index,
    txn: &mut RwTxn<'_>,
    entry_id: u32,
    batch: &mut Vec<(u64, IndexValue)>,
) -> Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    batch.sort_unstable_by_key(|(ts, _)| *ts);
    let changes = batch
        .drain(..)
        .map(|(ts, v)| RecChange::put(ts, v))
        .collect();
    index.apply_changes(txn, entry_id, changes)
}

fn fresh_state(entry_id: u32, base_ts: u64) -> BlockState {
    BlockState {
        entry_id,
        base_ts,
        ..BlockState::default()
    }
}

fn cut(
    report: &mut RecoveryReport,
    file: &File,
    path: &Path,
    at: u64,
    len: u64,
    why: &str,
) -> Result<()> {
    note(
        report,
        &format!(
            "block {path:?}: {why} at offset {at}; cut {} bytes",
            len - at
        ),
    );
    file.set_len(at)
        .map_err(|e| Error::io(format!("truncating {path:?}"), e))?;
    report.truncated_bytes += len - at;
    Ok(())
}

/// The first offset at or after `from` where a whole, CRC-valid frame starts.
fn next_valid_frame(
    file: &File,
    from: u64,
    file_len: u64,
    base_ts: u64,
) -> std::io::Result<Option<u64>> {
    let mut window = vec![0u8; 1 << 20];
    let mut at = from;
    while at < file_len {
        let n = crate::block::read_at_most(file, &mut window, at)?;
        if n == 0 {
            break;
        }
        for (i, _) in window[..n]
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == FRAME_MAGIC)
        {
            let p = at + i as u64;
            if let Ok(Some(h)) = read_head(file, p, file_len, base_ts)? {
                if p.saturating_add(h.frame_len()) <= file_len
                    && verify_frame(file, p, &h, head_crc(file, p, &h)?)?
                {
                    return Ok(Some(p));
                }
            }
        }
        at += n as u64;
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    /// Hostile probe of 2026-11-28: with the usual umask (022) a new data folder was 0755
    /// and its block files 0644, readable by every user of the machine. A folder the
    /// store creates is its owner's only; one that exists keeps its mode.
    #[test]
    fn a_new_data_folder_was_readable_by_every_user() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("parent").join("data");
        drop(super::lock_folder(&data).unwrap()); // as `Store::open` does
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&data), 0o700);
        let kept = dir.path().join("kept");
        std::fs::create_dir(&kept).unwrap();
        std::fs::set_permissions(&kept, std::fs::Permissions::from_mode(0o750)).unwrap();
        drop(super::lock_folder(&kept).unwrap());
        assert_eq!(mode(&kept), 0o750);
    }
}
