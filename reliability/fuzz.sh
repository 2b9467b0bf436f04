#!/usr/bin/env bash
# Runs each cargo-fuzz target of fuzz/ for a bounded time (default 30 s each; CI uses 30,
# docs/reliability.md reports a 10-minute run). Uses stable rustc with RUSTC_BOOTSTRAP=1
# (cargo-fuzz needs nightly flags) and no sanitizer (`-s none`: the targets are safe Rust
# and the sanitizer runtime is not everywhere). A crash leaves its input in
# fuzz/artifacts/<target>/ and fails the script.
#   reliability/fuzz.sh [seconds=30] [target...]
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs="${1:-30}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(block_parser batch_framing entry_pattern when_parser reduct_headers)
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked
fi
export RUSTC_BOOTSTRAP=1
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t"
  echo "== fuzz $t for ${secs}s"
  # corpus/<t> collects what libFuzzer finds (not committed); seeds/<t> holds valid inputs.
  log="$(mktemp)"
  rc=0
  cargo fuzz run -s none "$t" "corpus/$t" "seeds/$t" -- -max_total_time="$secs" \
    -rss_limit_mb=2048 -print_final_stats=1 >"$log" 2>&1 || rc=$?
  grep -E "^#[0-9]+ +DONE|stat::number_of_executed_units|stat::peak_rss_mb|stat::new_units_added" "$log" || true
  if [ "$rc" -ne 0 ]; then
    tail -60 "$log"
    echo "fuzz target $t failed (exit $rc): see fuzz/artifacts/$t/" >&2
    exit "$rc"
  fi
  rm -f "$log"
done
