#!/bin/bash
# alt2.sh BIN ROUNDS WORKLOAD PD... : per round, one run of WORKLOAD (tsblob only) per purge
# delay; "def" = MIMALLOC_PURGE_DELAY unset. The variable reaches the bench client and the
# server it starts alike. Run from a scratch folder (the bench's data goes to ./work).
run2="$(cd "$(dirname "$0")/../../../benches/tools" && pwd)/run2.sh"
b=$1; n=$2; w=$3; shift 3
for i in $(seq 1 $n); do
  for pd in "$@"; do
    if [ $pd = def ]; then "$run2" $b $w "" pd$pd-$i; else MIMALLOC_PURGE_DELAY=$pd "$run2" $b $w "" pd$pd-$i; fi
  done
done
