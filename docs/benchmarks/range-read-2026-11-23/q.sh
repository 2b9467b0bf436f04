#!/bin/bash
# q.sh PORT BUCKET ROUNDS: ROUNDS rounds of 16 parallel whole-entry queries (curl, no check)
# over the s102400-e0..15 entries a `tsblob bench --phases write-single` run loaded.
for r in $(seq "$3"); do
  for i in $(seq 0 15); do
    curl -s -o /dev/null "http://127.0.0.1:$1/api/v1/b/$2/s102400-e$i/query" &
  done
  wait
done
