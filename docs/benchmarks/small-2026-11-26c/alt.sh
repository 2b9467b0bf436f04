#!/bin/bash
# usage: alt.sh PAIRS WORKLOAD RECORDS BIN... -> alternated runs A,B,..,A,B,..: server
# CPU/rec, context switches per record by thread, tsblob and limit-store rec/s of the run
P=$1; W=$2; N=$3; shift 3
for i in $(seq 1 $P); do for b in "$@"; do
  line=$(./run.sh $b $W $N 2>&1 | head -1)
  rates=$(grep -E "┆ $N" $W.$(basename $b).last | awk -F'┆' '{gsub(/ /,"",$2); gsub(/ /,"",$4); printf "%s=%s ", $2, $4}')
  echo "$line $rates"
done; done
rm -f $W.*.last
