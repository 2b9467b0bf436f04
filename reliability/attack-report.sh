#!/usr/bin/env bash
# The attack report of issue 27: every defect class (hostile globs, a zstd bomb, zstd
# streams, stalled batch records, queries whose clients never read, an idle-tails flood,
# cross-site browser requests, an endless replication destination) run one after the other
# against a release `tsblob serve`, while a bystander writes and reads 1 KiB records on
# fresh connections. Prints, per class, the bound in force, the bystander's p50 and p99
# latency and the server's RSS before and at most (the harness of
# server/tests/it/bystander.rs, its ignored test `attack_report`).
#
#   reliability/attack-report.sh            # builds the release binary first
#   TSBLOB_TEST_BIN=path/to/tsblob reliability/attack-report.sh
#
# The hung object store is not run here (it needs MinIO behind the fault proxy): see
# server/tests/it/tier_faults.rs.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${TSBLOB_TEST_BIN:-}" ]; then
  nice cargo build --release -p tsblob-server --bin tsblob
  TSBLOB_TEST_BIN="$PWD/target/release/tsblob"
fi
export TSBLOB_TEST_BIN
echo "server: $TSBLOB_TEST_BIN"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //') ($(nproc) cores), load: $(cut -d' ' -f1-3 /proc/loadavg)"
cargo test -p tsblob-server --test it -- --ignored --exact bystander::attack_report --nocapture 2>&1 |
  grep -v '^bystander during' | sed -n '/^attack report/,/^test result/p'
