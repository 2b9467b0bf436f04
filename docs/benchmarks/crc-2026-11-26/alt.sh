#!/bin/bash
# usage: alt.sh PAIRS WORKLOAD A B -> runs-<workload>-<A>-<B>.txt (A, B, A, B...; each against limit)
pairs=$1; w=$2; a=$3; b=$4
for i in $(seq 1 $pairs); do
  for x in $a $b; do ../../../benches/tools/run2.sh ./bin-$x $w limit $x | grep -v write >> runs-${w%.toml}-$a-$b.txt; done
done
