#!/usr/bin/env bash
# The index choice, measured (issue 30): runs the criterion bench of benches/index (the
# engine's index workload on LMDB, RocksDB and redb) ROUNDS times (default 3) and prints
# the median and range of each figure over the rounds, with the CPU and load average.
#
#   scripts/bench-index.sh [ROUNDS]          # run and summarise
#   scripts/bench-index.sh --build-only      # compile it (what CI does when asked)
#
# benches/index is a crate of its own, outside the workspace: RocksDB's C++ build takes
# most of an hour on 2 cores. Building it needs a C++ compiler and libclang (bindgen):
# Debian's `g++` and `libclang-dev`; with ROCKSDB_LIB_DIR (below), `librocksdb-dev` instead
# of the C++ build. Its target folder is benches/index/target (the first
# build is the slow one). Stores are made under TSBLOB_BENCH_DIR (default: the system's
# temporary folder; it must be a disk, not a tmpfs, for the sizes and cold opens to mean
# anything).
set -euo pipefail
cd "$(dirname "$0")/../benches/index"
if [ -z "${LIBCLANG_PATH:-}" ]; then
  for d in /usr/lib/llvm-*/lib; do
    [ -e "$d/libclang.so" ] && export LIBCLANG_PATH="$d"
  done
fi
# ROCKSDB_LIB_DIR=/usr/lib/x86_64-linux-gnu links Debian's librocksdb-dev (RocksDB 7.8)
# instead of building the bundled RocksDB: minutes instead of most of an hour.
features=()
if [ -n "${ROCKSDB_LIB_DIR:-}" ]; then
  features=(--features system-rocksdb)
fi
if [ "${1:-}" = "--build-only" ]; then
  exec cargo build --release --benches --locked "${features[@]}"
fi
rounds="${1:-3}"
cargo build --release --benches --locked "${features[@]}"
out="target/index-rounds"
rm -rf "$out" && mkdir -p "$out"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//') ($(nproc) CPUs)"
for r in $(seq 1 "$rounds"); do
  echo "== round $r of $rounds, load average $(cut -d' ' -f1-3 /proc/loadavg)"
  rm -rf target/criterion
  cargo bench --locked "${features[@]}" --bench index -- --noplot 2>&1 | tee "$out/$r.log" \
    | grep -E '^(disk|insert_1M|point|scan_1000|cold_open)|time:' || true
  for f in target/criterion/*/*/new/estimates.json; do
    name="${f#target/criterion/}"
    name="${name%/new/estimates.json}"
    python3 -c 'import json,sys; print(sys.argv[2], json.load(open(sys.argv[1]))["median"]["point_estimate"])' \
      "$f" "$name" >> "$out/$r.tsv"
  done
  grep '^disk ' "$out/$r.log" | awk '{print "disk/" $2, $3}' >> "$out/$r.tsv"
done
echo "== median (min–max) over $rounds round(s); times per operation (insert: per 1M keys)"
python3 - "$out" "$rounds" <<'PY'
import sys, statistics, collections
out, rounds = sys.argv[1], int(sys.argv[2])
vals = collections.defaultdict(list)
for r in range(1, rounds + 1):
    for line in open(f"{out}/{r}.tsv"):
        k, v = line.split()
        vals[k].append(float(v))
def fmt(k, v):
    if k.startswith("disk/"):
        return f"{v / 1e6:.1f} MB"
    for unit, d in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if v >= d:
            return f"{v / d:.3g} {unit}"
    return f"{v:.3g} ns"
for k in sorted(vals):
    v = vals[k]
    print(f"{k:24} {fmt(k, statistics.median(v)):>10}  ({fmt(k, min(v))} – {fmt(k, max(v))})")
PY
