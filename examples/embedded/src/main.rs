//! `tsblob-example-embedded`: a program that links the tsblob engine (`tsblob-storage`)
//! directly and keeps a camera's frames in a FIFO bucket, with no server and no HTTP.
//!
//! ```sh
//! cargo run --release -p tsblob-example-embedded                 # in a temporary folder
//! cargo run --release -p tsblob-example-embedded -- --data ./frames --frames 3000
//! ```
//!
//! The work is in the library half of this crate (`src/lib.rs`) so that its test can run
//! the same steps on a temporary folder.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use tsblob_example_embedded::{run, Plan};

/// Stores synthetic camera frames in an embedded tsblob store, reads them back and queries
/// a time window.
#[derive(Debug, Parser)]
struct Args {
    /// Data folder (kept afterwards). Without it a temporary folder is used and removed.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Frames to write.
    #[arg(long, default_value_t = 2000)]
    frames: u64,
    /// Bytes per frame (a JPEG from a 720p camera is 50-150 KB).
    #[arg(long, default_value_t = 60_000)]
    frame_size: usize,
    /// Frames per second of the simulated camera (sets the timestamps, not the pace).
    #[arg(long, default_value_t = 30)]
    fps: u64,
    /// FIFO quota of the bucket in bytes on disk: the oldest blocks go when it is reached.
    #[arg(long, default_value_t = 64 << 20)]
    quota: u64,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // The temporary folder lives until the end of main, and is removed on return.
    let tmp;
    let dir = match &args.data {
        Some(d) => d.clone(),
        None => {
            tmp = tempfile::tempdir().context("creating a temporary data folder")?;
            tmp.path().to_path_buf()
        }
    };
    let plan = Plan {
        frames: args.frames,
        frame_size: args.frame_size,
        fps: args.fps,
        quota: args.quota,
    };
    let s = run(&dir, &plan)?;
    println!("data folder        {}", dir.display());
    println!(
        "wrote              {} frames of {} bytes in {:.3} s: {:.0} frames/s, {:.0} MB/s",
        s.written,
        plan.frame_size,
        s.write_secs,
        s.written as f64 / s.write_secs,
        (s.written as f64 * plan.frame_size as f64) / s.write_secs / 1e6
    );
    println!(
        "latest frame       ts {} read back, {} bytes, labels {:?}",
        s.latest_ts, s.latest_size, s.latest_labels
    );
    println!(
        "last {} s, motion=yes: {} frames, {} bytes, every byte checked ({:.3} ms)",
        s.window_secs,
        s.window_matches,
        s.window_bytes,
        s.query_secs * 1e3
    );
    println!(
        "bucket             {} records, {} bytes on disk of a {} byte FIFO quota, {} blocks evicted",
        s.records_kept, s.disk_bytes, plan.quota, s.evicted_blocks
    );
    println!(
        "oldest kept        frame #{} (blocks of {} bytes; older ones were evicted)",
        s.oldest_kept_frame, s.block_size
    );
    Ok(())
}
