#!/usr/bin/env bash
# The HTTP benchmark of docs/benchmarks/http-*.md: starts a release `tsblob serve` on a fresh
# folder and drives it with the hidden `tsblob loadgen` on 127.0.0.1 (client and server
# share the machine's cores). Usage: server/bench/http_bench.sh [path/to/tsblob]
set -euo pipefail

bin="${1:-target/release/tsblob}"
port="${PORT:-18700}"
data="$(mktemp -d "${TMPDIR:-/tmp}/tsblob-bench.XXXXXX")"
url="http://127.0.0.1:$port"
export TSBLOB_URL="$url"
unset TSBLOB_TOKEN

pid=
start() {
  rm -rf "$data" && mkdir -p "$data"
  "$bin" serve --data "$data" --listen "127.0.0.1:$port" --log warn &
  pid=$!
  for _ in $(seq 100); do curl -sf "$url/health" >/dev/null && break; sleep 0.1; done
}
stop() { kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; }
trap 'stop; rm -rf "$data"' EXIT
start

lg() { echo "\$ tsblob loadgen $*"; "$bin" loadgen --server-pid "$pid" "$@"; echo; }

echo "## single-record POST"
lg --mode post --bucket p1k --size 1KiB --conns 1 --count 20000
lg --mode post --bucket p1k16 --size 1KiB --conns 16 --count 100000
lg --mode post --bucket p100k --size 100KiB --conns 1 --count 5000
lg --mode post --bucket p100k16 --size 100KiB --conns 16 --count 20000

echo "## batched 1 KiB"
lg --mode batch --bucket b1k --size 1KiB --conns 4 --batch 1000 --count 2000000

echo "## point reads (records written above)"
lg --mode get --bucket p1k --size 1KiB --conns 1 --count 20000
lg --mode get --bucket p1k16 --size 1KiB --conns 16 --count 100000

echo "## streaming query of 10,000 x 100 KiB"
lg --mode batch --bucket q100k --size 100KiB --conns 2 --batch 100 --count 10000
lg --mode query --bucket q100k
lg --mode query --bucket q100k

echo "server VmHWM after the runs above: $(grep VmHWM /proc/$pid/status)"
stop

echo "## ingest 10 GB (100 KiB records, batches of 100) into a fresh server, with its RSS"
start
lg --mode batch --bucket ingest --size 100KiB --conns 4 --batch 100 --count 100000
grep -E 'VmHWM|RssAnon|RssFile' /proc/$pid/status
