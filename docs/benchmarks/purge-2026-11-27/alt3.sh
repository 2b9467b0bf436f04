#!/bin/bash
# alt3.sh BIN ROUNDS WORKLOAD PD... : as alt2.sh, but the purge delay reaches only the server:
# the bench starts a wrapper that sets MIMALLOC_PURGE_DELAY=PD and execs BIN (same pid, so
# the server's CPU column still counts). Run from a scratch folder.
run2="$(cd "$(dirname "$0")/../../../benches/tools" && pwd)/run2.sh"
b=$(realpath "$1"); n=$2; w=$3; shift 3
for v in "$@"; do printf '#!/bin/sh\nexec env MIMALLOC_PURGE_DELAY=%s %s "$@"\n' $v "$b" > ./srv-$v.sh; chmod +x ./srv-$v.sh; done
for i in $(seq 1 $n); do for v in "$@"; do SERVER_BIN=$PWD/srv-$v.sh "$run2" $b $w "" pd$v-$i; done; done
