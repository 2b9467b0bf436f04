#!/bin/bash
# usage: altnew.sh ROUNDS WORKLOAD -> runsnew-<workload>.txt: old (one pool: bin-old, main at 2337c7a) and new (bin-new) in turn
for i in $(seq 1 $1); do
  ../../../benches/tools/run2.sh ./bin-old $2 limit old | grep -v write-batch >> runsnew-${2%.toml}.txt
  ../../../benches/tools/run2.sh ./bin-new $2 limit new | grep -v write-batch >> runsnew-${2%.toml}.txt
done
