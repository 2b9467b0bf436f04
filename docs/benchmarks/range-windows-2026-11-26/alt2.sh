#!/bin/bash
# usage: alt2.sh PAIRS WORKLOAD -> runs-<workload>.txt: base, new, base, new... (run2.sh against limit)
pairs=$1; w=$2
for i in $(seq 1 $pairs); do
  for b in base new; do ../../../benches/tools/run2.sh ./bin-$b $w limit $b | grep -v write-batch >> runs-${w%.toml}.txt; done
done
