//! A tier for `tsblob serve`: the client opened from its flags (`--tier-*`), a restore
//! from the object store (`--restore-from`), a read replica's refresh loop.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tsblob_storage::{RefreshReport, Store, StoreOptions, TierConfig, TierError};

use super::S3Store;
use crate::config::{ServeArgs, TierMode};

/// The engine's tier settings for a `tsblob serve` (connects, and unless it is a replica,
/// makes sure the bucket exists).
pub fn open(args: &ServeArgs, mode: &TierMode) -> anyhow::Result<TierConfig> {
    let (url, upload) = match mode {
        TierMode::Tier { url, .. } => (url, true),
        TierMode::Replica { url } => (url, false),
    };
    let ca = match &args.tier_ca {
        Some(p) => Some(p.clone()),
        None => std::env::var_os("AWS_CA_BUNDLE")
            .filter(|v| !v.is_empty())
            .map(std::path::PathBuf::from),
    };
    let s3 = S3Store::connect_with_timeout(
        url,
        args.tier_endpoint.as_deref(),
        args.tier_region.as_deref(),
        ca.as_deref(),
        args.tier_timeout,
    )?
    .with_list_max_keys(args.tier_list_max_keys);
    if upload {
        s3.ensure_bucket()?;
    } else {
        s3.check_reachable()?;
    }
    let prefix = s3.prefix().to_string();
    let mut cfg = TierConfig::new(Arc::new(s3), &prefix);
    cfg.cache_bytes = args.tier_cache;
    cfg.uploads = args.tier_uploads.max(1);
    cfg.upload = upload;
    Ok(cfg)
}

/// `--restore-from`: adopts the object store's blocks into the data folder's index (the
/// store opened without uploads, so nothing is swept or uploaded meanwhile), then closes it.
pub fn restore(data: &Path, opts: &StoreOptions) -> anyhow::Result<()> {
    let mut o = opts.clone();
    if let Some(t) = o.tier.as_mut() {
        t.upload = false;
    }
    let store = Store::open(data, o)?;
    let r = store
        .tier_refresh()
        .context("cannot restore from the object store")?;
    tracing::info!(
        "restored {} blocks ({} records) from the object store{}",
        r.adopted_blocks,
        r.adopted_records,
        if r.skipped.is_empty() {
            String::new()
        } else {
            format!("; skipped damaged sidecars {:?}", r.skipped)
        }
    );
    Ok(())
}

/// A read replica's first refresh, before it serves. A listing over its bound stops the
/// start: every later refresh would stop at it too, and the replica would serve nothing
/// new while looking healthy. Other failures are logged (the next refresh retries).
pub fn refresh_at_start(store: &Store) -> anyhow::Result<()> {
    match store.tier_refresh() {
        Err(tsblob_storage::Error::Tier(e @ TierError::Oversized(_))) => {
            Err(anyhow::Error::new(e).context("the read replica cannot start"))
        }
        r => {
            log_refresh(r);
            Ok(())
        }
    }
}

/// One refresh of a read replica (failures are logged: the next one retries).
pub fn refresh_once(store: &Store) {
    log_refresh(store.tier_refresh());
}

fn log_refresh(refreshed: tsblob_storage::Result<RefreshReport>) {
    match refreshed {
        Ok(r) if r.adopted_blocks + r.dropped_blocks > 0 => tracing::info!(
            "replica refresh: adopted {} blocks ({} records), dropped {}",
            r.adopted_blocks,
            r.adopted_records,
            r.dropped_blocks
        ),
        Ok(_) => {}
        Err(e) => tracing::warn!("replica refresh failed (retried): {e}"),
    }
}

/// A read replica's refresh loop, every `every`, on the blocking pool.
pub fn refresh_replica(store: Store, every: Duration) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            let s = store.clone();
            if tokio::task::spawn_blocking(move || refresh_once(&s))
                .await
                .is_err()
            {
                tracing::error!("a replica refresh panicked");
            }
        }
    });
}
