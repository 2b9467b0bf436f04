#!/usr/bin/env bash
# Alternated pairs: the release binary before this session (old = a156c99) and after (new),
# same bench command, each with its own spawned server.
set -u
for i in 1 2 3; do
  for b in old new; do
    ./new bench --phases write-single,write-batch,range-whole,range-sub,point-read --sizes 1KiB,100KiB,1MiB --repeat 1 --tsblob-bin ./$b --no-progress --markdown $b-$i.md > $b-$i.log 2>&1
  done
done
