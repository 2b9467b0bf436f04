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

/// The extension (with its dot) a file of this content type is named with: a short table of
/// the common types, the robotics formats above, then the first of `mime_guess`'s, else
/// `.bin`. Parameters (`; charset=utf-8`) are ignored.
pub fn extension_of(content_type: &str) -> String {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let known = match essence.as_str() {
        "image/jpeg" => ".jpg",
        "image/png" => ".png",
        "image/webp" => ".webp",
        "application/json" => ".json",
        "text/plain" => ".txt",
        "text/csv" => ".csv",
        "video/mp4" => ".mp4",
        // mime_guess lists its extensions alphabetically: `.aaf` came first.
        "application/octet-stream" => ".bin",
        _ => "",
    };
    if !known.is_empty() {
        return known.to_string();
    }
    if let Some((e, _)) = EXTRA_TYPES.iter().find(|(_, t)| *t == essence) {
        return format!(".{e}");
    }
    mime_guess::get_mime_extensions_str(&essence)
        .and_then(|exts| exts.first())
        .map_or_else(|| ".bin".to_string(), |e| format!(".{e}"))
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
        assert_eq!(extension_of("image/tiff"), ".tif");
        assert_eq!(extension_of("application/x-whatever"), ".bin");
        // Bug "exports of the default content type were named .aaf" (mime_guess's first).
        assert_eq!(extension_of("application/octet-stream"), ".bin");
        // A link to a `text/plain; charset=utf-8` record was named after mime_guess's
        // first extension of text/plain.
        assert_eq!(extension_of("text/plain; charset=utf-8"), ".txt");
        assert_eq!(extension_of("Image/JPEG"), ".jpg");
    }
}
