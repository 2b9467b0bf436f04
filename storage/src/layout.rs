//! Names in a data folder: what the engine keeps beside the bucket folders.
//!
//! ```text
//! <data>/tsblob.lock          the folder lock (flock) of the process that has it open
//! <data>/index/               the LMDB index
//! <data>/.trash/              removed blocks and folders on their way out (`trash.rs`)
//! <data>/<bucket>/settings    a bucket's settings
//! <data>/<bucket>/<entry>/    an entry's block files (`/` in its name as `%2F`)
//! ```

pub(crate) const INDEX_DIR: &str = "index";
pub(crate) const LOCK_FILE: &str = "tsblob.lock";
pub(crate) const SETTINGS_FILE: &str = "settings";
