//! Content types and file extensions, both ways: a file's extension to the content type a
//! record is stored with (`tsblob put`, `tsblob cp` from a folder), and a record's content
//! type to the extension its file or download is named with (exports, link file names).

/// Formats of robotics data that the MIME table (`mime_guess`) does not know, both ways.
const EXTRA_TYPES: &[(&str, &str)] = &[
    ("npy", "application/x-npy"),
    ("npz", "application/x-npz"),
    ("mcap", "application/x-mcap"),
    ("pcd", "application/x-pcd"),
    ("ply", "application/x-ply"),
    ("parquet", "application/vnd.apache.parquet"),
    ("bag", "application/x-rosbag"),
    ("db3", "application/x-sqlite3"),
];

/// A content type from a file name: the table above, then the maintained MIME table of
/// `mime_guess`, else `application/octet-stream`.
pub fn guess_content_type(path: &std::path::Path) -> String {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    if let Some((_, t)) = EXTRA_TYPES.iter().find(|(e, _)| *e == ext) {
        return (*t).to_string();
    }
    mime_guess::from_ext(&ext)
        .first_raw()
        .unwrap_or("application/octet-stream")
        .to_string()
}

/// Content types whose files are only ever shown, never run, by the programs that open
/// them, and the extension their files get (as the console's Download button names them).
const SAVE_AS: &[(&str, &str)] = &[
    ("image/png", "png"),
    ("image/jpeg", "jpg"),
    ("image/gif", "gif"),
    ("image/webp", "webp"),
    ("image/avif", "avif"),
    ("image/bmp", "bmp"),
    ("image/tiff", "tiff"),
    ("text/plain", "txt"),
    ("text/csv", "csv"),
    ("application/json", "json"),
    ("application/x-ndjson", "ndjson"),
    ("application/cbor", "cbor"),
    ("application/zstd", "zst"),
    ("application/octet-stream", "bin"),
    ("application/x-protobuf", "pb"),
    ("video/mp4", "mp4"),
    ("video/webm", "webm"),
    ("audio/mpeg", "mp3"),
    ("audio/ogg", "ogg"),
    ("audio/wav", "wav"),
];

/// The extension (with its dot) a file of this content type is named with: the passive
/// types above and the robotics formats, else `.bin`. Parameters (`; charset=utf-8`) and
/// case are ignored. The writer of a record chose its type: a name taken from any type
/// (`.html`, `.svg`, `.exe`, `.desktop`) would run when the file is opened from a downloads
/// or export folder (hostile probe of 2026-11-28, the console's Download button).
pub fn extension_of(content_type: &str) -> String {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if let Some((_, e)) = SAVE_AS.iter().find(|(t, _)| *t == essence) {
        return format!(".{e}");
    }
    EXTRA_TYPES
        .iter()
        .find(|(_, t)| *t == essence)
        .map_or_else(|| ".bin".to_string(), |(e, _)| format!(".{e}"))
}

/// Whether a file named with extension `ext` (without its dot, any case) is only ever shown
/// by the programs that open it: one of the extensions [`extension_of`] gives, `.bin` and
/// `.mcap` included. A link's chosen `file_name` must end in one.
pub fn is_passive_extension(ext: &str) -> bool {
    let ext = ext.to_ascii_lowercase();
    SAVE_AS.iter().any(|(_, e)| *e == ext) || EXTRA_TYPES.iter().any(|(e, _)| *e == ext)
}

/// The extensions of [`is_passive_extension`], for messages.
pub fn passive_extensions() -> String {
    let mut all: Vec<&str> = SAVE_AS
        .iter()
        .map(|(_, e)| *e)
        .chain(EXTRA_TYPES.iter().map(|(e, _)| *e))
        .collect();
    all.sort_unstable();
    all.dedup();
    all.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Content types came from a 10-extension table: `.npy`, `.mcap`, `.ply`, `.parquet`,
    /// `.tiff` were all stored as application/octet-stream.
    #[test]
    fn robotics_files_were_stored_as_octet_stream() {
        let ct = |f: &str| guess_content_type(std::path::Path::new(f));
        assert_eq!(ct("a.npy"), "application/x-npy");
        assert_eq!(ct("a.MCAP"), "application/x-mcap");
        assert_eq!(ct("cloud.ply"), "application/x-ply");
        assert_eq!(ct("t.parquet"), "application/vnd.apache.parquet");
        assert_eq!(ct("frame.tiff"), "image/tiff");
        assert_eq!(ct("x.jpg"), "image/jpeg");
        assert_eq!(ct("x.unknown-ext"), "application/octet-stream");
        // And back, for exports.
        assert_eq!(extension_of("application/x-npy"), ".npy");
        assert_eq!(extension_of("image/jpeg"), ".jpg");
        assert_eq!(extension_of("image/tiff"), ".tiff");
        assert_eq!(extension_of("application/x-whatever"), ".bin");
        // Bug "exports of the default content type were named .aaf" (mime_guess's first).
        assert_eq!(extension_of("application/octet-stream"), ".bin");
        // A link to a `text/plain; charset=utf-8` record was named after mime_guess's
        // first extension of text/plain.
        assert_eq!(extension_of("text/plain; charset=utf-8"), ".txt");
        assert_eq!(extension_of("Image/JPEG"), ".jpg");
    }

    /// Bug (this change's review): names of exports and query links taken from any content
    /// type let a record's writer choose `.html` or `.exe` for the reader's disk.
    #[test]
    fn a_writer_chose_an_active_extension() {
        for active in [
            "text/html",
            "image/svg+xml",
            "application/x-msdownload",
            "application/hta",
            "application/javascript",
            "application/x-desktop",
            "application/pdf",
        ] {
            assert_eq!(extension_of(active), ".bin", "{active}");
        }
    }
}
