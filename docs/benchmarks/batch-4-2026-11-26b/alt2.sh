#!/bin/bash
# usage: alt2.sh PAIRS WORKLOAD RECORDS -> alternating base/new runs (the worktree's bin-base and
# bin-new): server CPU/rec, tsblob and limit-store rec/s per line
W=${2:-wb1kx3.toml}; N=${3:-960000}; R=../../..
for i in $(seq 1 $1); do for b in bin-base bin-new; do
  line=$(./run.sh $R/$b $W $N 2>&1 | head -1)
  rates=$(grep -E "┆ $N" $W.$b.last | awk -F'┆' '{gsub(/ /,"",$2); gsub(/ /,"",$4); printf "%s=%s ", $2, $4}')
  echo "$line $rates"
done; done
