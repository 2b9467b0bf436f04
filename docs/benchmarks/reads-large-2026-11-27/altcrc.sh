#!/bin/bash
# usage: altcrc.sh BIN N WORKLOAD: the bench against limit, limit without and with a CRC of each
# payload it sends (TSBLOB_EXP_LIMIT_CRC, knobs.patch), alternated N times (run from a scratch folder)
b=$1; n=$2; w=$3; here=$(dirname "$0")
for i in $(seq 1 $n); do
  bash $here/../../../benches/tools/run2.sh $b $w limit plain$i
  TSBLOB_EXP_LIMIT_CRC=1 bash $here/../../../benches/tools/run2.sh $b $w limit crc$i
done
