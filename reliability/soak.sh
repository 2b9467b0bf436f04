#!/usr/bin/env bash
# The loopback soak (server/tests/it/reliability_soak.rs) for a fixed time against a release
# build: 32 clients mixing writes, point reads and range queries; prints throughput, p50/p99
# per operation and the server's RSS over time, and writes the RSS series as CSV.
#   reliability/soak.sh [seconds=600] [rss.csv]
set -euo pipefail
cd "$(dirname "$0")/.."
export TSBLOB_SOAK_SECS="${1:-600}"
export TSBLOB_SOAK_CSV="${2:-$PWD/target/soak-rss.csv}"
cargo build --release --locked -p tsblob-server --bin tsblob
cargo test --release --locked -p tsblob-server --test it -- --nocapture reliability_soak::
echo "RSS series: $TSBLOB_SOAK_CSV"
