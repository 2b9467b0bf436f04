#!/usr/bin/env bash
# The same pairs with the order reversed (new first), to see the order's own effect.
set -u
for i in 4 5 6; do
  for b in new old; do
    ./new bench --phases write-single,write-batch,range-whole,range-sub,point-read --sizes 1KiB,100KiB,1MiB --repeat 1 --tsblob-bin ./$b --no-progress --markdown $b-$i.md > $b-$i.log 2>&1
  done
done
