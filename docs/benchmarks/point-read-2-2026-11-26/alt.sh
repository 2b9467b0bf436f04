#!/bin/bash
# usage: alt.sh PAIRS WORKLOAD: base and new alternated, each run against limit
# (bin-base / bin-new in the worktree root; run from a scratch folder)
R=$(dirname $(readlink -f $0)); W=$(readlink -f $R/../../..)
for i in $(seq 1 $1); do
  $R/run2.sh $W/bin-base $2 limit base
  $R/run2.sh $W/bin-new $2 limit new
done
