//! Settings of a store (how it is opened) and of a bucket (how its data is kept).

use std::sync::Arc;
use std::time::Duration;

use crate::object_store::ObjectStore;

/// When written bytes are forced to stable storage. See `docs/operations.md` for what each
/// promises on power loss; all three survive a process crash (`kill -9`) without losing an
/// acknowledged record, because acknowledged bytes are in the OS page cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncPolicy {
    /// fsync block files and the index before a write is acknowledged. Concurrent writers
    /// share one fsync (group commit).
    Always,
    /// fsync within the given interval by a background thread (the default, 1 s).
    Periodic(Duration),
    /// Never fsync; the OS writes back when it likes.
    Never,
}

impl Default for SyncPolicy {
    fn default() -> Self {
        SyncPolicy::Periodic(Duration::from_secs(1))
    }
}

impl std::str::FromStr for SyncPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "always" => Ok(SyncPolicy::Always),
            "never" => Ok(SyncPolicy::Never),
            "periodic" => Ok(SyncPolicy::default()),
            other => {
                if let Some(ms) = other
                    .strip_prefix("periodic:")
                    .and_then(|v| v.strip_suffix("ms"))
                {
                    if let Ok(ms) = ms.parse::<u64>() {
                        return Ok(SyncPolicy::Periodic(Duration::from_millis(ms.max(1))));
                    }
                }
                Err(format!(
                    "unknown sync policy {other:?}: use always, periodic, periodic:<N>ms or never"
                ))
            }
        }
    }
}

impl std::fmt::Display for SyncPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SyncPolicy::Always => write!(f, "always"),
            SyncPolicy::Periodic(d) => write!(f, "periodic:{}ms", d.as_millis()),
            SyncPolicy::Never => write!(f, "never"),
        }
    }
}

/// How a store is opened.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    pub sync: SyncPolicy,
    /// Maximum size of the LMDB index file (virtual address space, not disk).
    pub map_size: usize,
    /// Writes are refused with `DiskFull` when the free space of the data folder's file
    /// system would drop below this many bytes. Reads keep working.
    pub free_space_reserve: u64,
    /// Settings given to a bucket created without explicit settings (e.g. on first write
    /// through the server with auto-create).
    pub default_bucket: BucketSettings,
    /// Block files kept open at once, across every entry (`None`: half of what
    /// `RLIMIT_NOFILE` leaves after a margin; see `files.rs`).
    pub max_open_files: Option<usize>,
    /// Tiering of sealed blocks to an object store (`None`: everything stays local).
    pub tier: Option<TierConfig>,
    /// Compiles a lifecycle rule's `when` (its source text) into a condition; without it a
    /// rule with a `when` is refused (the engine reads no JSON: the server gives its parser).
    pub when_parser: Option<WhenParser>,
    /// The most index records one pass of one lifecycle rule looks at (a whole block
    /// deleted counts its records); a rule with more to do goes on at the next tick.
    pub lifecycle_pass_records: u64,
    /// The bounds of an entry's attachments.
    pub attachments: AttachmentLimits,
    /// The most entries the store creates, across its buckets (each holds about 1.5 KB of
    /// memory while the store is open); a write into a new entry past it is refused with
    /// `WriteError::TooManyEntries`. Entries already on disk always open, and one adopted
    /// from the tier (a restore, a read replica) is not counted against it.
    pub max_entries: usize,
}

/// The default of `StoreOptions::max_entries`.
pub const MAX_ENTRIES: usize = 100_000;

/// A `when` compiler (`StoreOptions::when_parser`): the message of an error says what is
/// wrong with the text.
#[derive(Clone)]
pub struct WhenParser(pub Arc<WhenParse>);

/// What a [`WhenParser`] calls: the condition of a text, or what is wrong with it.
pub type WhenParse = dyn Fn(&str) -> Result<crate::when::Condition, String> + Send + Sync;

impl std::fmt::Debug for WhenParser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WhenParser")
    }
}

/// The default of `StoreOptions::lifecycle_pass_records`.
pub const LIFECYCLE_PASS_RECORDS: u64 = 100_000;

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            sync: SyncPolicy::default(),
            map_size: 64 << 30,
            free_space_reserve: 256 << 20,
            default_bucket: BucketSettings::default(),
            max_open_files: None,
            tier: None,
            when_parser: None,
            lifecycle_pass_records: LIFECYCLE_PASS_RECORDS,
            attachments: Default::default(),
            max_entries: MAX_ENTRIES,
        }
    }
}

/// What a bucket does when its size reaches `quota_size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QuotaType {
    /// No quota: the bucket grows until the free-space guard stops writes.
    #[default]
    None,
    /// Delete whole oldest blocks (in write order) until the new record fits; a write that
    /// eviction cannot make fit (larger than the quota, or than the disk could hold with
    /// the whole bucket given up) is refused before anything is deleted.
    Fifo,
    /// Reject writes that would exceed the quota.
    Hard,
}

impl std::str::FromStr for QuotaType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "none" => Ok(QuotaType::None),
            "fifo" => Ok(QuotaType::Fifo),
            "hard" => Ok(QuotaType::Hard),
            other => Err(format!(
                "unknown quota type {other:?}: use none, fifo or hard"
            )),
        }
    }
}

impl std::fmt::Display for QuotaType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            QuotaType::None => "none",
            QuotaType::Fifo => "fifo",
            QuotaType::Hard => "hard",
        })
    }
}

/// Per-record compression of a bucket's payloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    #[default]
    None,
    /// zstd at the given level (1..=22). A payload that zstd does not shrink is stored raw.
    Zstd { level: i32 },
}

impl std::fmt::Display for Compression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Compression::None => write!(f, "none"),
            Compression::Zstd { level } => write!(f, "zstd:{level}"),
        }
    }
}

impl std::str::FromStr for Compression {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(Compression::None),
            "zstd" => Ok(Compression::Zstd { level: 3 }),
            other => other
                .strip_prefix("zstd:")
                .and_then(|l| l.parse::<i32>().ok())
                .filter(|l| (1..=22).contains(l))
                .map(|level| Compression::Zstd { level })
                .ok_or_else(|| {
                    format!("unknown compression {other:?}: use none, zstd or zstd:<level 1-22>")
                }),
        }
    }
}

/// Settings of one bucket, kept in `<bucket>/settings` so that the index can be rebuilt
/// from the data folder alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketSettings {
    pub quota_type: QuotaType,
    /// Bytes on disk (block files) the quota allows; ignored for `QuotaType::None`. 0 is a
    /// quota of no bytes, as in ReductStore: HARD refuses every write with a body, FIFO
    /// gives up every older block for each write (it keeps the newest block).
    pub quota_size: u64,
    /// A block is sealed and a new one started when it reaches this size.
    pub max_block_size: u64,
    /// ... or this many records.
    pub max_block_records: u64,
    pub compression: Compression,
    /// Age-based retention, in microseconds: a whole block whose newest record is older
    /// than this (by its timestamp, against the clock) is deleted, in the background and
    /// before writes. `None`: records are kept until removed or evicted.
    pub max_age: Option<u64>,
    /// With a tier (`StoreOptions::tier`): bytes of sealed blocks kept on the local disk;
    /// older sealed blocks are uploaded to the object store and their local copy dropped.
    /// `None`: no budget (only `tier_after` tiers).
    pub tier_local_max: Option<u64>,
    /// With a tier: sealed blocks whose newest record is older than this many microseconds
    /// are uploaded even below `tier_local_max`. `None`: no age rule.
    pub tier_after: Option<u64>,
    /// Lifecycle rules (`lifecycle.rs`): records older than a rule's `older_than`, in its
    /// entries, matching its `when`, are removed in the background. `max_age` is the
    /// shorthand rule `max_age` (whole blocks, every entry); these are the others. Changed
    /// with `Store::set_lifecycle_rule` / `remove_lifecycle_rule`.
    pub lifecycle: Vec<LifecycleRule>,
}

/// The most lifecycle rules a bucket may have.
pub const MAX_LIFECYCLE_RULES: usize = 64;

/// The name of the shorthand rule a bucket's `max_age` is reported as (no rule may take it).
pub const MAX_AGE_RULE: &str = "max_age";

/// Whether a lifecycle rule runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LifecycleMode {
    /// Runs every `interval` and removes what it selects.
    #[default]
    Enabled,
    /// Kept, never run in the background (`Store::run_lifecycle` still runs it).
    Disabled,
    /// Runs and counts what it would remove, removing nothing.
    DryRun,
}

impl std::str::FromStr for LifecycleMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "enabled" => Ok(LifecycleMode::Enabled),
            "disabled" => Ok(LifecycleMode::Disabled),
            "dry_run" => Ok(LifecycleMode::DryRun),
            other => Err(format!(
                "unknown lifecycle mode {other:?}: use enabled, disabled or dry_run"
            )),
        }
    }
}

impl std::fmt::Display for LifecycleMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LifecycleMode::Enabled => "enabled",
            LifecycleMode::Disabled => "disabled",
            LifecycleMode::DryRun => "dry_run",
        })
    }
}

/// What a lifecycle rule does to the records it selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LifecycleAction {
    /// Removes them.
    #[default]
    Remove,
    /// Stores them zstd-compressed (the bucket's zstd level, else 3): each raw record is
    /// written again as a compressed frame and its old frame retired, so a block whose
    /// records all moved is deleted. Records already compressed, tiered, or that zstd does
    /// not shrink are left as they are.
    Compress,
}

impl std::str::FromStr for LifecycleAction {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "remove" | "delete" => Ok(LifecycleAction::Remove),
            "compress" => Ok(LifecycleAction::Compress),
            other => Err(format!(
                "unknown lifecycle action {other:?}: use remove or compress"
            )),
        }
    }
}

impl std::fmt::Display for LifecycleAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LifecycleAction::Remove => "remove",
            LifecycleAction::Compress => "compress",
        })
    }
}

/// One lifecycle rule of a bucket: remove (or compress, `action`) the records older than
/// `older_than` (by their timestamp, against the clock), only in the entries `entries`
/// selects and only those `when` keeps, looking again every `interval`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LifecycleRule {
    /// `[A-Za-z0-9_-]`, 1 to 64 characters, unique in its bucket; not `max_age`.
    pub name: String,
    /// µs, above 0.
    pub older_than: u64,
    /// µs between the starts of two rounds, at least one second.
    pub interval: u64,
    /// Entry names or globs (`pattern.rs`); one starting with `!` excludes what it matches.
    /// Empty: every entry.
    pub entries: Vec<String>,
    /// The condition's source text (the JSON of a `when`), compiled by
    /// `StoreOptions::when_parser`; `None`: every record older than `older_than`.
    pub when: Option<String>,
    pub mode: LifecycleMode,
    pub action: LifecycleAction,
}

impl LifecycleRule {
    /// A rule removing every record older than `older_than` µs, checked every minute.
    pub fn new(name: &str, older_than: u64) -> LifecycleRule {
        LifecycleRule {
            name: name.to_string(),
            older_than,
            interval: 60_000_000,
            entries: Vec::new(),
            when: None,
            mode: LifecycleMode::Enabled,
            action: LifecycleAction::Remove,
        }
    }

    /// Checks the rule alone (its `when` is compiled by the store); the message says how to
    /// fix it.
    pub fn validate(&self) -> Result<(), String> {
        let n = &self.name;
        if n.is_empty()
            || n.len() > 64
            || !n
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err(format!(
                "lifecycle rule name {} is not valid: use 1 to 64 of A-Z a-z 0-9 _ -",
                tsblob_proto::quote_short(n)
            ));
        }
        if n == MAX_AGE_RULE {
            return Err(
                "the lifecycle rule name max_age is the bucket's max_age setting: choose another name, or set max_age in the bucket's settings".into(),
            );
        }
        if self.older_than == 0 {
            return Err(format!(
                "lifecycle rule {n}: older_than must be longer than 0"
            ));
        }
        if self.interval < 1_000_000 {
            return Err(format!(
                "lifecycle rule {n}: interval must be at least 1 second"
            ));
        }
        for p in &self.entries {
            crate::pattern::EntryPattern::parse(p.strip_prefix('!').unwrap_or(p)).map_err(|e| {
                format!("lifecycle rule {n}: entry pattern {p:?} cannot be used: {e}")
            })?;
        }
        Ok(())
    }

    /// The rule as the value of its `lifecycle.<name>` line (its `when` last, escaped).
    pub(crate) fn to_line(&self) -> String {
        let mut line = format!(
            "older_than={} interval={} mode={} entries={}",
            self.older_than,
            self.interval,
            self.mode,
            self.entries.join(",")
        );
        if let Some(w) = &self.when {
            line.push_str(" when=");
            for c in w.chars() {
                match c {
                    '\\' => line.push_str("\\\\"),
                    '\n' => line.push_str("\\n"),
                    '\r' => line.push_str("\\r"),
                    c => line.push(c),
                }
            }
        }
        line
    }

    fn from_line(name: &str, line: &str) -> Result<LifecycleRule, String> {
        let (fields, when) = match line.split_once(" when=") {
            Some((f, w)) => (f, Some(w)),
            None => (line, None),
        };
        let mut rule = LifecycleRule::new(name, 0);
        for field in fields.split(' ').filter(|f| !f.is_empty()) {
            let (k, v) = field
                .split_once('=')
                .ok_or_else(|| format!("lifecycle.{name}: {field:?} is not key=value"))?;
            let num = |v: &str| {
                v.parse::<u64>()
                    .map_err(|e| format!("lifecycle.{name}.{k}: {e}"))
            };
            match k {
                "older_than" => rule.older_than = num(v)?,
                "interval" => rule.interval = num(v)?,
                "mode" => rule.mode = v.parse()?,
                "entries" => {
                    rule.entries = v
                        .split(',')
                        .filter(|p| !p.is_empty())
                        .map(str::to_string)
                        .collect()
                }
                _ => {} // a field of a newer version
            }
        }
        rule.when = when.map(|w| {
            let mut out = String::with_capacity(w.len());
            let mut chars = w.chars();
            while let Some(c) = chars.next() {
                match (c, c == '\\') {
                    (_, true) => match chars.next() {
                        Some('n') => out.push('\n'),
                        Some('r') => out.push('\r'),
                        Some(o) => out.push(o),
                        None => {}
                    },
                    (c, false) => out.push(c),
                }
            }
            out
        });
        Ok(rule)
    }
}

impl Default for BucketSettings {
    fn default() -> Self {
        BucketSettings {
            quota_type: QuotaType::None,
            quota_size: 0,
            max_block_size: 64 << 20,
            max_block_records: 1 << 20,
            compression: Compression::None,
            max_age: None,
            tier_local_max: None,
            tier_after: None,
            lifecycle: Vec::new(),
        }
    }
}

/// A partial update of bucket settings: `None` leaves a field as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BucketSettingsUpdate {
    pub quota_type: Option<QuotaType>,
    pub quota_size: Option<u64>,
    pub max_block_size: Option<u64>,
    pub max_block_records: Option<u64>,
    pub compression: Option<Compression>,
    /// `Some(None)` turns age-based retention off.
    pub max_age: Option<Option<u64>>,
    /// `Some(None)` turns the local budget of tiering off.
    pub tier_local_max: Option<Option<u64>>,
    /// `Some(None)` turns age-based tiering off.
    pub tier_after: Option<Option<u64>>,
}

impl BucketSettings {
    pub fn apply(&self, u: &BucketSettingsUpdate) -> BucketSettings {
        BucketSettings {
            quota_type: u.quota_type.unwrap_or(self.quota_type),
            quota_size: u.quota_size.unwrap_or(self.quota_size),
            max_block_size: u.max_block_size.unwrap_or(self.max_block_size),
            max_block_records: u.max_block_records.unwrap_or(self.max_block_records),
            compression: u.compression.unwrap_or(self.compression),
            max_age: u.max_age.unwrap_or(self.max_age),
            tier_local_max: u.tier_local_max.unwrap_or(self.tier_local_max),
            tier_after: u.tier_after.unwrap_or(self.tier_after),
            lifecycle: self.lifecycle.clone(),
        }
    }

    /// Whether a FIFO or HARD quota has a size: `Err` says how to give one. Not part of
    /// [`Self::validate`]: ReductStore's API accepts a zero-byte quota (its meaning: FIFO
    /// keeps only the newest block, HARD refuses every write); tsblob's own API and the
    /// server's defaults refuse it, since a quota type set without its size is a size
    /// forgotten, and a FIFO of 0 bytes removed every older block at the next write.
    pub fn check_quota_sized(&self) -> Result<(), String> {
        if self.quota_type != QuotaType::None && self.quota_size == 0 {
            return Err(format!(
                "quota_type {} needs a quota_size above 0 (bytes on disk, e.g. 10737418240): a {} quota of 0 bytes would {}; give quota_size, or quota_type none",
                self.quota_type,
                self.quota_type,
                if self.quota_type == QuotaType::Fifo {
                    "remove every older block at the next write"
                } else {
                    "refuse every write"
                }
            ));
        }
        Ok(())
    }

    /// Checks the settings make sense; the message says how to fix them.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_block_size < 4096 {
            return Err("max_block_size must be at least 4096 bytes".into());
        }
        if self.max_block_records == 0 {
            return Err("max_block_records must be at least 1".into());
        }
        if self.max_age == Some(0) {
            return Err("max_age must be longer than 0 (or absent to keep records forever)".into());
        }
        if self.tier_after == Some(0) {
            return Err(
                "tier_after must be longer than 0 (or absent to tier by tier_local_max only)"
                    .into(),
            );
        }
        if let Compression::Zstd { level } = self.compression {
            if !(1..=22).contains(&level) {
                return Err(format!("zstd level {level} is out of range: use 1 to 22"));
            }
        }
        if self.lifecycle.len() > MAX_LIFECYCLE_RULES {
            return Err(format!(
                "a bucket holds at most {MAX_LIFECYCLE_RULES} lifecycle rules: remove one first"
            ));
        }
        for (i, r) in self.lifecycle.iter().enumerate() {
            r.validate()?;
            if self.lifecycle[..i].iter().any(|o| o.name == r.name) {
                return Err(format!("two lifecycle rules are named {}", r.name));
            }
        }
        Ok(())
    }

    /// Serialises to the `key = value` lines of the `settings` file.
    pub(crate) fn to_file_text(&self) -> String {
        let mut text = format!(
            "quota_type = {}\nquota_size = {}\nmax_block_size = {}\nmax_block_records = {}\ncompression = {}\n",
            self.quota_type, self.quota_size, self.max_block_size, self.max_block_records, self.compression
        );
        if let Some(age) = self.max_age {
            text.push_str(&format!("max_age = {age}\n"));
        }
        if let Some(b) = self.tier_local_max {
            text.push_str(&format!("tier_local_max = {b}\n"));
        }
        if let Some(age) = self.tier_after {
            text.push_str(&format!("tier_after = {age}\n"));
        }
        // A compress rule under a key of its own: a version that knows only removal
        // ignores it rather than reading it as a rule that removes.
        for r in &self.lifecycle {
            let key = match r.action {
                LifecycleAction::Remove => "lifecycle",
                LifecycleAction::Compress => "lifecycle_compress",
            };
            text.push_str(&format!("{key}.{} = {}\n", r.name, r.to_line()));
        }
        text
    }

    pub(crate) fn from_file_text(text: &str) -> Result<BucketSettings, String> {
        let mut s = BucketSettings::default();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (k, v) = line
                .split_once('=')
                .ok_or_else(|| format!("line {line:?} is not key = value"))?;
            let (k, v) = (k.trim(), v.trim());
            let num = |v: &str| v.parse::<u64>().map_err(|e| format!("{k}: {e}"));
            match k {
                "quota_type" => s.quota_type = v.parse()?,
                "quota_size" => s.quota_size = num(v)?,
                "max_block_size" => s.max_block_size = num(v)?,
                "max_block_records" => s.max_block_records = num(v)?,
                "compression" => s.compression = v.parse()?,
                "max_age" => s.max_age = Some(num(v)?),
                "tier_local_max" => s.tier_local_max = Some(num(v)?),
                "tier_after" => s.tier_after = Some(num(v)?),
                _ if k.starts_with("lifecycle.") => {
                    s.lifecycle
                        .push(LifecycleRule::from_line(&k["lifecycle.".len()..], v)?);
                }
                _ if k.starts_with("lifecycle_compress.") => {
                    let name = &k["lifecycle_compress.".len()..];
                    s.lifecycle.push(LifecycleRule {
                        action: LifecycleAction::Compress,
                        ..LifecycleRule::from_line(name, v)?
                    });
                }
                _ => {} // unknown keys from newer versions are ignored
            }
        }
        Ok(s)
    }
}

/// How a store tiers to an object store (`StoreOptions::tier`).
#[derive(Clone)]
pub struct TierConfig {
    pub store: Arc<dyn ObjectStore>,
    /// Key prefix in the object store's bucket (no leading or trailing `/`; may be empty).
    pub prefix: String,
    /// Bytes of block ranges kept in the local cache.
    pub cache_bytes: u64,
    /// Uploads in flight at once.
    pub uploads: usize,
    /// Bytes a query's read of a tiered block fetches at once (a point read fetches exactly
    /// its frame).
    pub read_ahead: u64,
    /// How often the tier thread looks for blocks to upload.
    pub every: Duration,
    /// False on a read replica: nothing is uploaded or deleted, and writes are refused.
    pub upload: bool,
}

impl std::fmt::Debug for TierConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TierConfig")
            .field("store", &self.store.describe())
            .field("prefix", &self.prefix)
            .field("cache_bytes", &self.cache_bytes)
            .field("uploads", &self.uploads)
            .field("read_ahead", &self.read_ahead)
            .field("every", &self.every)
            .field("upload", &self.upload)
            .finish()
    }
}

impl TierConfig {
    /// Defaults for everything but the store and prefix.
    pub fn new(store: Arc<dyn ObjectStore>, prefix: &str) -> TierConfig {
        TierConfig {
            store,
            prefix: prefix.trim_matches('/').to_string(),
            cache_bytes: 256 << 20,
            uploads: 4,
            read_ahead: 4 << 20,
            every: Duration::from_millis(250),
            upload: true,
        }
    }
}

/// The bounds of an entry's attachments (`StoreOptions::attachments`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttachmentLimits {
    /// Bytes of one attachment.
    pub max_size: usize,
    /// Attachments of one entry.
    pub max_count: usize,
}

/// Default [`AttachmentLimits::max_size`]: 64 KiB (ReductStore keeps attachments in 128 KiB
/// blocks; schemas and calibrations fit).
pub const DEFAULT_MAX_ATTACHMENT_SIZE: usize = 64 << 10;
/// Default [`AttachmentLimits::max_count`].
pub const DEFAULT_MAX_ATTACHMENTS: usize = 64;

impl Default for AttachmentLimits {
    fn default() -> Self {
        AttachmentLimits {
            max_size: DEFAULT_MAX_ATTACHMENT_SIZE,
            max_count: DEFAULT_MAX_ATTACHMENTS,
        }
    }
}
