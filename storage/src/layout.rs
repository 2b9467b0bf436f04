//! Names in a data folder: what the engine keeps beside the bucket folders.
//!
//! ```text
//! <data>/tsblob.lock          the folder lock (flock, with <data>/ itself) of the process that has it open
//! <data>/index/               the LMDB index
//! <data>/index/ballast        space kept for repairs on a full disk (`ballast.rs`)
//! <data>/.trash/              removed blocks and folders on their way out (`trash.rs`)
//! <data>/.lifecycle-resume    lifecycle rules' resume points, written at a clean close and
//!                             removed at open (`store/lifecycle.rs`)
//! <data>/<bucket>/settings    a bucket's settings
//! <data>/<bucket>/<entry>/    an entry's block files (`/` in its name as `%2F`)
//! <data>/<bucket>/<entry>/attachments      the entry's attachments (`attachments.rs`)
//! <data>/<bucket>/<entry>/attachments.tmp  its next version, before the rename
//! ```

pub(crate) const INDEX_DIR: &str = "index";
pub(crate) const LOCK_FILE: &str = "tsblob.lock";
pub(crate) const SETTINGS_FILE: &str = "settings";
pub(crate) const ATTACHMENTS_FILE: &str = "attachments";
pub(crate) const ATTACHMENTS_TMP: &str = "attachments.tmp";
pub(crate) const LIFECYCLE_RESUME_FILE: &str = ".lifecycle-resume";
