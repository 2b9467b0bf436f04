#!/bin/bash
# run.sh BIN ROUNDS: ROUNDS runs of small.toml against limit,limit-store with BIN (each run
# one line per cell and target: rec/s and the server's CPU µs per record). Run from a
# scratch folder (the bench's data goes to ./work).
here="$(cd "$(dirname "$0")" && pwd)"
run2="$here/../../../benches/tools/run2.sh"
for i in $(seq 1 "$2"); do "$run2" "$1" "$here/small.toml" limit,limit-store "r$i"; done
