//! The engine's [`ObjectStore`] over S3 (MinIO, AWS S3, Ceph, SeaweedFS...) with
//! aws-sdk-s3, on tokio runtimes of its own (one for uploads at a lower CPU priority, one
//! for everything else, each with its own client and connection pool): the engine's tier
//! threads and readers call it blocking, from any thread (including tokio's blocking pool,
//! where `block_on` of another runtime would panic), so each call is spawned on its
//! runtime and waited for on a channel.
//!
//! Client settings are [`s3_config`]'s: path-style addressing, checksums only where asked
//! for (the comparison mode's MinIO target uses the same, and a test checks it does). Credentials and region come from
//! aws-sdk's default provider chain (`AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`, profiles,
//! container and instance roles); `--tier-region` overrides the region.
//!
//! Outage versus damage. Every call has a 2 s connect timeout and ends within
//! `--tier-timeout` (30 s by default) in total, retries and the answer's body included: a
//! read of a hung store answers 503 `tier_unavailable` at that bound (it waited 42 to 60 s:
//! the timed-out attempt was retried within a 60 s operation timeout), and so does a body
//! that trickles in (the wait used to restart with each piece). A listing, page after page,
//! ends within [`LIST_TIME_FACTOR`] times as long.
//!
//! Bounds against a broken or hostile store: a GET holds at most the range it asked for
//! (a whole object at most [`WHOLE_MAX`]) and at most its answer's `Content-Length`, and a
//! listing at most `--tier-list-max-keys` objects; past them the call fails at once as
//! [`ObjectError::Oversized`](tsblob_storage::ObjectError::Oversized) (an endless body was
//! buffered at 600 MB/s, an endless listing at 50 MB/s). A read answers 503 then; the
//! start-up sweep of orphans gives up until the next start; a replica does not start. The
//! SDK neither follows redirects nor decompresses answers, so neither can go elsewhere or
//! grow past these bounds. While a read has waited past
//! [`STALLED_AFTER`] for the store, `/health` says the tier is `degraded`
//! ([`ObjectStore::stalled`](tsblob_storage::ObjectStore::stalled)). An object shorter than the index says (HTTP 416) is
//! [`ObjectError::Damaged`](tsblob_storage::ObjectError::Damaged), which the engine reports as damage (500 `tier_damaged`, not
//! to be retried), as it does a missing object. A 3xx of S3 is an error answer.
//!
//! `s3.rs` is the client ([`S3Store`]); `setup.rs` opens it for `tsblob serve` from its
//! flags, restores from it (`--restore-from`) and refreshes a read replica.

mod s3;
mod setup;

pub use s3::{
    parse_url, s3_config, S3Store, DEFAULT_LIST_MAX_KEYS, DEFAULT_TIMEOUT, LIST_TIME_FACTOR,
    STALLED_AFTER, WHOLE_MAX,
};
pub use setup::{open, refresh_at_start, refresh_once, refresh_replica, restore};
