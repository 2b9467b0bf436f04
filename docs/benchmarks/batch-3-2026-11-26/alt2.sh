#!/bin/bash
W=${2:-wb1k.toml}; N=${3:-320000}
# usage: alt.sh PAIRS -> alternating base/new runs: CPU/rec, tsblob and limit-store rec/s
# (run from a folder holding run.sh and $W of ../batch-1k-2026-11-25/; the binaries in the worktree)
for i in $(seq 1 $1); do for b in bin-base bin-new; do
  line=$(./run.sh ./$b $W $N 2>&1 | head -1)
  rates=$(grep -E "┆ $N" $W.$b.last | awk -F'┆' '{gsub(/ /,"",$2); gsub(/ /,"",$4); printf "%s=%s ", $2, $4}')
  echo "$line $rates"
done; done
