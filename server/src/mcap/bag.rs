//! rosbag2 folders: what their `metadata.yaml` says, read before any message.
//!
//! A rosbag2 folder holds `metadata.yaml` and the files it lists under
//! `relative_file_paths`, in recording order. Its `storage_identifier` says what the files
//! are (`mcap` here; `sqlite3` bags are `.db3` files, which `ros2 bag convert` turns into
//! MCAP), and `compression_mode` / `compression_format` how rosbag2 compressed them on top
//! of the storage: `message` (each message's data a zstd frame of its own) or `file` (each
//! file one zstd frame, `bag_0.mcap.zstd`). Before this module a folder's `*.mcap` files
//! were read whatever the metadata said, so a `message`-compressed bag was imported as its
//! zstd frames (records nobody could decode, and a "complete" copy), a `file`-compressed one
//! failed with "has no .mcap files", and a `.mcap` file lying in the folder but not part of
//! the bag was imported with it.

use std::io::Read;
use std::path::{Component, Path, PathBuf};

use serde::Deserialize;

use super::import::ImportError;

/// The most of `metadata.yaml` read: a bag of thousands of topics, each with its QoS
/// profiles, writes a few MB.
const MAX_METADATA_BYTES: u64 = 16 << 20;

/// What rosbag2 compressed, besides what the storage (MCAP's chunks) does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    /// Each message's data is a zstd frame.
    Messages,
    /// Each file is one zstd frame (`*.mcap.zstd`).
    Files,
}

/// A rosbag2 folder, as its metadata describes it.
#[derive(Debug)]
pub struct Bag {
    /// The files to read, in the order listed (or, when the metadata lists none, every
    /// `*.mcap` of the folder in numbered order).
    pub files: Vec<PathBuf>,
    pub compression: Compression,
    /// Files the metadata lists that are not in the folder.
    pub missing: Vec<String>,
    /// `*.mcap` files in the folder that the metadata does not list (not read).
    pub unlisted: Vec<String>,
}

#[derive(Deserialize)]
struct Metadata {
    rosbag2_bagfile_information: Information,
}

#[derive(Deserialize)]
struct Information {
    #[serde(default)]
    storage_identifier: String,
    #[serde(default)]
    relative_file_paths: Vec<String>,
    #[serde(default)]
    compression_format: String,
    #[serde(default)]
    compression_mode: String,
}

/// Reads the metadata of the rosbag2 folder `dir`.
pub fn read(dir: &Path) -> Result<Bag, ImportError> {
    let meta_path = dir.join("metadata.yaml");
    let shown = meta_path.display().to_string();
    let io = |error| ImportError::Io {
        path: shown.clone(),
        error,
    };
    let mut text = String::new();
    std::fs::File::open(&meta_path)
        .map_err(io)?
        .take(MAX_METADATA_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(io)?;
    let bad = |why: String| ImportError::BadBag {
        path: shown.clone(),
        why,
    };
    if text.len() as u64 > MAX_METADATA_BYTES {
        return Err(bad(format!(
            "it is over {}",
            tsblob_proto::format_size(MAX_METADATA_BYTES)
        )));
    }
    let info = serde_saphyr::from_str::<Metadata>(&text)
        .map_err(|e| bad(format!("it does not parse as rosbag2 metadata ({e})")))?
        .rosbag2_bagfile_information;
    let storage = info.storage_identifier.to_ascii_lowercase();
    if !storage.is_empty() && storage != "mcap" {
        return Err(bad(format!(
            "the bag is stored as {:?}, not MCAP: convert it first (`ros2 bag convert -i BAG -o out.yaml`, with `storage_id: mcap` in out.yaml)",
            info.storage_identifier
        )));
    }
    let compression = match (
        info.compression_mode.to_ascii_lowercase().as_str(),
        info.compression_format.to_ascii_lowercase().as_str(),
    ) {
        ("" | "none", _) => Compression::None,
        ("message", "zstd") => Compression::Messages,
        ("file", "zstd") => Compression::Files,
        (mode, format) => {
            return Err(bad(format!(
                "its compression (mode {mode:?}, format {format:?}) is not one rosbag2 writes (zstd, by message or by file)"
            )))
        }
    };
    let mut listed = Vec::new();
    let mut missing = Vec::new();
    for name in &info.relative_file_paths {
        let rel = Path::new(name);
        if name.is_empty() || !rel.components().all(|c| matches!(c, Component::Normal(_))) {
            return Err(bad(format!(
                "it lists {name:?}, which is not a file inside the bag's folder"
            )));
        }
        let path = dir.join(rel);
        if path.is_file() {
            listed.push(path);
        } else {
            missing.push(name.clone());
        }
    }
    let in_folder = mcap_files(dir)?;
    if info.relative_file_paths.is_empty() {
        if in_folder.is_empty() {
            return Err(ImportError::EmptyBag {
                path: dir.display().to_string(),
            });
        }
        return Ok(Bag {
            files: in_folder,
            compression,
            missing,
            unlisted: Vec::new(),
        });
    }
    let unlisted = in_folder
        .iter()
        .filter(|p| !listed.contains(p))
        .map(|p| p.display().to_string())
        .collect();
    Ok(Bag {
        files: listed,
        compression,
        missing,
        unlisted,
    })
}

/// A folder's `*.mcap` files in their numbered order (`bag_0.mcap`, `bag_1.mcap`, ...,
/// `bag_10.mcap`).
fn mcap_files(dir: &Path) -> Result<Vec<PathBuf>, ImportError> {
    let io = |error| ImportError::Io {
        path: dir.display().to_string(),
        error,
    };
    let mut files = Vec::new();
    for item in std::fs::read_dir(dir).map_err(io)? {
        let p = item.map_err(io)?.path();
        if p.extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("mcap"))
            && p.is_file()
        {
            files.push(p);
        }
    }
    files.sort_by_key(|p| natural_key(&p.file_name().unwrap_or_default().to_string_lossy()));
    Ok(files)
}

/// A sort key that orders `bag_2` before `bag_10`.
fn natural_key(s: &str) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut text = String::new();
    let mut num: Option<u64> = None;
    for c in s.chars() {
        match (c.to_digit(10), num) {
            (Some(d), Some(n)) => num = Some(n.saturating_mul(10).saturating_add(d.into())),
            (Some(d), None) => num = Some(d.into()),
            (None, Some(n)) => {
                out.push((std::mem::take(&mut text), n));
                num = None;
                text.push(c);
            }
            (None, None) => text.push(c),
        }
    }
    out.push((text, num.unwrap_or(0)));
    out
}

/// Free bytes the temporary folder keeps while a bag's file is inflated into it: a zstd
/// bomb (a small file that inflates to terabytes) stops there instead of filling the disk.
const TEMP_RESERVE: u64 = 1 << 30;
/// Bytes inflated between two looks at the temporary folder's free space.
const CHECK_EVERY: u64 = 64 << 20;

/// Inflates a `file`-compressed bag's file (one zstd frame) into a temporary file, whose
/// path is read like any MCAP file; it stops when the temporary folder's disk gets down to
/// [`TEMP_RESERVE`] free. Removed when dropped.
pub fn inflate(path: &Path) -> Result<tempfile::NamedTempFile, ImportError> {
    inflate_within(path, &std::env::temp_dir(), TEMP_RESERVE)
}

fn inflate_within(
    path: &Path,
    dir: &Path,
    reserve: u64,
) -> Result<tempfile::NamedTempFile, ImportError> {
    use std::io::Write;
    let shown = path.display().to_string();
    let io = |error| ImportError::Io {
        path: shown.clone(),
        error,
    };
    let src = std::fs::File::open(path).map_err(io)?;
    let mut out = tempfile::Builder::new()
        .prefix("tsblob-bag-")
        .suffix(".mcap")
        .tempfile_in(dir)
        .map_err(|error| ImportError::Io {
            path: dir.display().to_string(),
            error,
        })?;
    let full = || ImportError::TempFull {
        file: shown.clone(),
        dir: dir.display().to_string(),
        reserve,
    };
    let room = || tsblob_storage::free_space(dir).map_or(true, |free| free >= reserve);
    let mut decoder = zstd::stream::read::Decoder::new(src).map_err(io)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut since_check = CHECK_EVERY;
    loop {
        if since_check >= CHECK_EVERY {
            if !room() {
                return Err(full());
            }
            since_check = 0;
        }
        let n = match decoder.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ImportError::BadBag {
                path: shown.clone(),
                why: format!("it does not inflate as zstd ({e}), though the bag's metadata.yaml says its files are zstd-compressed"),
            }),
        };
        out.as_file_mut().write_all(&buf[..n]).map_err(|e| {
            if e.kind() == std::io::ErrorKind::StorageFull {
                full()
            } else {
                ImportError::Io {
                    path: format!("{} (inflating {shown})", out.path().display()),
                    error: e,
                }
            }
        })?;
        since_check += n as u64;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Bug: a file-compressed bag's file was inflated into the temporary folder until the
    /// disk was full (a zstd bomb of a few KiB fills any disk). It stops at the reserve,
    /// with what to do, and leaves no temporary file.
    #[test]
    fn a_zstd_bomb_in_a_bag_filled_the_temporary_disk() {
        let dir = tempfile::tempdir().unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let bomb = dir.path().join("bag_0.mcap.zstd");
        let zeros = std::io::repeat(0).take(512 << 20);
        let packed = zstd::stream::encode_all(zeros, 19).unwrap();
        assert!(packed.len() < 1 << 20, "{} bytes", packed.len());
        std::fs::write(&bomb, packed).unwrap();
        // Room for ~100 MiB more than the reserve: stops after at most that and one step.
        let free = tsblob_storage::free_space(tmp.path()).unwrap();
        let reserve = free.saturating_sub(100 << 20);
        let e = inflate_within(&bomb, tmp.path(), reserve).unwrap_err();
        assert!(matches!(e, ImportError::TempFull { .. }), "{e}");
        assert!(e.to_string().contains("TMPDIR"), "{e}");
        let left = std::fs::read_dir(tmp.path()).unwrap().count();
        assert_eq!(left, 0, "the temporary file was left");
        // With room, the same file inflates whole.
        let small = dir.path().join("small.mcap.zstd");
        std::fs::write(&small, zstd::stream::encode_all(&b"abc"[..], 3).unwrap()).unwrap();
        let out = inflate_within(&small, tmp.path(), 0).unwrap();
        assert_eq!(std::fs::read(out.path()).unwrap(), b"abc");
    }

    #[test]
    fn bag_files_are_read_in_their_numbered_order() {
        let mut names = vec!["b_10.mcap", "b_2.mcap", "b_0.mcap", "b_1.mcap"];
        names.sort_by_key(|n| natural_key(n));
        assert_eq!(names, ["b_0.mcap", "b_1.mcap", "b_2.mcap", "b_10.mcap"]);
    }

    fn bag(meta: &str, files: &[&str]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("metadata.yaml"), meta).unwrap();
        for f in files {
            std::fs::write(dir.path().join(f), b"x").unwrap();
        }
        dir
    }

    const META: &str = "rosbag2_bagfile_information:\n  version: 9\n  storage_identifier: mcap\n  duration:\n    nanoseconds: 10\n  relative_file_paths:\n    - b_1.mcap\n    - b_0.mcap\n  topics_with_message_count:\n    - topic_metadata:\n        name: /chatter\n        offered_qos_profiles: \"- history: 3\\n  depth: 0\\n\"\n      message_count: 3\n  compression_format: \"\"\n  compression_mode: \"\"\n";

    /// Bug "a rosbag2 folder's metadata.yaml was not read": the folder's every `*.mcap`
    /// was imported, in name order, whatever the bag listed.
    #[test]
    fn the_metadata_says_which_files_and_in_what_order() {
        let dir = bag(META, &["b_0.mcap", "b_1.mcap", "stray.mcap"]);
        let b = read(dir.path()).unwrap();
        let names: Vec<_> = b
            .files
            .iter()
            .map(|p| p.file_name().unwrap().to_str().unwrap())
            .collect();
        assert_eq!(names, ["b_1.mcap", "b_0.mcap"]);
        assert_eq!(b.compression, Compression::None);
        assert!(b.missing.is_empty());
        assert_eq!(b.unlisted.len(), 1);
        assert!(b.unlisted[0].ends_with("stray.mcap"));
        // A listed file that is not there is said, not skipped silently.
        let dir = bag(META, &["b_0.mcap"]);
        assert_eq!(read(dir.path()).unwrap().missing, ["b_1.mcap"]);
    }

    #[test]
    fn a_bag_not_in_mcap_or_pointing_outside_its_folder_is_refused() {
        let sqlite = META.replace("storage_identifier: mcap", "storage_identifier: sqlite3");
        let err = read(bag(&sqlite, &[]).path()).unwrap_err().to_string();
        assert!(err.contains("ros2 bag convert"), "{err}");
        for outside in ["../b_0.mcap", "/etc/passwd", "a/../../b.mcap"] {
            let meta = META.replace("b_1.mcap", outside);
            let err = read(bag(&meta, &["b_0.mcap"]).path())
                .unwrap_err()
                .to_string();
            assert!(err.contains("not a file inside the bag's folder"), "{err}");
        }
        let lz4 = META
            .replace("compression_format: \"\"", "compression_format: lz4")
            .replace("compression_mode: \"\"", "compression_mode: file");
        let err = read(bag(&lz4, &[]).path()).unwrap_err().to_string();
        assert!(err.contains("not one rosbag2 writes"), "{err}");
        let err = read(bag("rosbag2_bagfile_information: [", &[]).path())
            .unwrap_err()
            .to_string();
        assert!(err.contains("does not parse as rosbag2 metadata"), "{err}");
    }

    #[test]
    fn compressed_bags_are_told_apart() {
        let by = |mode: &str| {
            META.replace("compression_format: \"\"", "compression_format: zstd")
                .replace(
                    "compression_mode: \"\"",
                    &format!("compression_mode: {mode}"),
                )
        };
        let dir = bag(&by("MESSAGE"), &["b_0.mcap", "b_1.mcap"]);
        assert_eq!(read(dir.path()).unwrap().compression, Compression::Messages);
        let dir = bag(&by("FILE"), &["b_0.mcap", "b_1.mcap"]);
        assert_eq!(read(dir.path()).unwrap().compression, Compression::Files);
    }
}
