#!/usr/bin/env bash
# Follows the README's quick start and tour as a newcomer would, in a fresh clone of the
# committed HEAD in a temporary folder, and fails (non-zero) if any step does not do what the
# README says:
#   - docker/check.sh: compose.yml is valid, the Dockerfile builds what CI tests
#   - quick start command 1, `./scripts/serve.sh`, run literally in the clone: it builds and
#     starts `tsblob serve`; GET /health must answer {"status": "ok"}
#   - the tour: curl write/read round-trip (bytes, content type, labels), the Python SDK
#     installed with pip from the clone, the camera logger into a FIFO bucket that must evict,
#     the window summary, `tsblob query` over a time range, and the embedded example
#   - SIGTERM stops the server cleanly
# (Quick start command 2, scripts/test.sh, is what CI runs before this.)
#
#   scripts/quickstart-check.sh
#
# Two departures from a newcomer's machine, both on purpose:
#   - The server listens on a free port chosen here, given through TSBLOB_LISTEN (every
#     `tsblob serve` flag has a TSBLOB_* variable): 8686 may be taken by a developer's own
#     server, and the README's commands are run with that port instead of 8686.
#   - The clone's target/ is a symbolic link to this checkout's (or $CARGO_TARGET_DIR):
#     dependencies compile to the same artifacts whatever the checkout's path, so only the
#     workspace's own crates are rebuilt when the dependencies are already built (a few
#     minutes, against 20 minutes measured for a cold release build on this project's
#     2-core machines). The clone's build then owns target/release/tsblob until the
#     next `cargo build` here links this checkout's binary back (cargo does so even when
#     nothing changed; scripts/serve.sh and scripts/test.sh always build first). CI runs
#     this after scripts/test.sh, on the same commit. A developer whose tests are running
#     at the same time may prefer QUICKSTART_TARGET_DIR=<another dir> (a full build the
#     first time). QUICKSTART_FRESH_TARGET=1 builds in the clone's own
#     target/ instead, from nothing, exactly as a newcomer would.
set -euo pipefail
echo "== quick-start check"

repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
# Long enough for a cold release build on 2 cores; a warm one takes about a minute.
timeout_s="${QUICKSTART_TIMEOUT:-1800}"
fail() { echo "quickstart-check: FAILED: $*" >&2; exit 1; }
step() { echo "-- $*"; }

step "docker files"
docker/check.sh

tmp="$(mktemp -d)"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    # Still building (serve.sh's cargo is its child) or serving: stop both.
    pkill -TERM -P "$server_pid" 2>/dev/null || true
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

head="$(git rev-parse HEAD)"
step "fresh clone of $head"
git clone --quiet --no-checkout "$repo" "$tmp/tsblob"
git -C "$tmp/tsblob" checkout --quiet --detach "$head"
clone="$tmp/tsblob"
if [ "${QUICKSTART_FRESH_TARGET:-0}" != 1 ]; then
  target="${QUICKSTART_TARGET_DIR:-${CARGO_TARGET_DIR:-$repo/target}}"
  mkdir -p "$target"
  ln -s "$target" "$clone/target"
fi
unset CARGO_TARGET_DIR # the clone's scripts use ./target, as a newcomer's would

port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
U="http://127.0.0.1:$port"
log="$tmp/serve.log"

step "quick start: ./scripts/serve.sh (TSBLOB_LISTEN=127.0.0.1:$port)"
(cd "$clone" && TSBLOB_LISTEN="127.0.0.1:$port" exec ./scripts/serve.sh) >"$log" 2>&1 &
server_pid=$!
started=$(date +%s)
until curl -fsS "$U/health" >"$tmp/health.json" 2>/dev/null; do
  if ! kill -0 "$server_pid" 2>/dev/null; then
    tail -n 40 "$log" >&2
    fail "./scripts/serve.sh exited before the server answered /health (log above)"
  fi
  if [ $(( $(date +%s) - started )) -gt "$timeout_s" ]; then
    tail -n 40 "$log" >&2
    fail "no answer on $U/health after $timeout_s s"
  fi
  sleep 1
done
grep -q '"status":"ok"\|"status": "ok"' "$tmp/health.json" || fail "/health answered $(cat "$tmp/health.json")"
echo "healthy after $(( $(date +%s) - started )) s: $(cat "$tmp/health.json")"
[ -d "$clone/tsblob-data" ] || fail "the server does not keep its data in ./tsblob-data"

cd "$clone"

step "tour: write and read with curl"
curl -fsS -X POST "$U/api/v1/b/demo" >/dev/null
head -c 100000 /dev/urandom >"$tmp/frame.jpg"
curl -fsS -X POST "$U/api/v1/b/demo/sensor-1?ts=1700000000000000" \
  -H 'Content-Type: image/jpeg' -H 'x-tsblob-label-kind: test' \
  --data-binary @"$tmp/frame.jpg" >"$tmp/put.json"
grep -q '"ts":1700000000000000' "$tmp/put.json" || fail "write answered $(cat "$tmp/put.json")"
curl -fsS -D "$tmp/headers" -o "$tmp/back.jpg" "$U/api/v1/b/demo/sensor-1?ts=1700000000000000"
cmp -s "$tmp/frame.jpg" "$tmp/back.jpg" || fail "the record read back differs from the bytes written"
grep -qi '^content-type: image/jpeg' "$tmp/headers" || fail "content type lost: $(cat "$tmp/headers")"
grep -qi '^x-tsblob-label-kind: test' "$tmp/headers" || fail "label lost: $(cat "$tmp/headers")"
# A second write at the same timestamp is a conflict, never an overwrite.
status="$(curl -sS -o /dev/null -w '%{http_code}' -X POST "$U/api/v1/b/demo/sensor-1?ts=1700000000000000" --data-binary 'other')"
[ "$status" = 409 ] || fail "a duplicate timestamp answered $status, not 409"
curl -fsS -o "$tmp/back2.jpg" "$U/api/v1/b/demo/sensor-1?ts=1700000000000000"
cmp -s "$tmp/frame.jpg" "$tmp/back2.jpg" || fail "a refused duplicate changed the stored record"
echo "round trip ok: 100000 bytes, content type and label kept; duplicate refused with 409"

step "tour: Python SDK (pip install ./client-py into .venv)"
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check ./client-py
.venv/bin/python - "$U" <<'EOF'
import sys
from tsblob import Client

with Client(sys.argv[1]) as db:
    rec = db.read("demo", "sensor-1", ts=1700000000000000)
    assert rec.size == 100000 and rec.content_type == "image/jpeg", rec
    assert rec.labels == {"kind": "test"}, rec.labels
    ts = db.write("demo", "sensor-1", b"from python", labels={"kind": "py"})
    assert db.read("demo", "sensor-1").data == b"from python"
    got = [r.timestamp for r in db.query("demo", "sensor-1", eq={"kind": "py"})]
    assert got == [ts], got
print("python ok")
EOF

step "tour: camera logger into a FIFO bucket"
.venv/bin/python examples/camera_logger.py --url "$U" --fps 20 --seconds 6 \
  --frame-size 80KB --quota 4MiB --block-size 512KiB | tee "$tmp/logger.out"
bucket_json="$(curl -fsS "$U/api/v1/b/cams")"
.venv/bin/python - "$bucket_json" <<'EOF' || fail "the FIFO bucket did not behave: $bucket_json"
import json, sys
b = json.loads(sys.argv[1])
info, s = b["info"], b["settings"]
assert s["quota_type"] == "fifo", s
assert info["evicted_blocks"] > 0, info                                  # 9.6 MB into 4 MiB
assert info["size"] <= s["quota_size"] + s["max_block_size"], info       # precision: one block
assert 0 < info["record_count"] < 120, info
print(f"fifo ok: {info['record_count']} records kept, {info['size']} bytes, {info['evicted_blocks']} blocks evicted")
EOF

step "tour: window summary"
.venv/bin/python examples/window_summary.py --url "$U" --last 3s | tee "$tmp/summary.out"
grep -q '^  records ' "$tmp/summary.out" || fail "window_summary printed no record count"
.venv/bin/python examples/window_summary.py --url "$U" --last 3s --label motion=yes --save "$tmp/motion" >/dev/null \
  || echo "(no motion in the last 3 s of this run: allowed)"

step "tour: tsblob query over a time range"
target/release/tsblob query demo sensor-1 --url "$U" --start 1700000000000000 --stop 1700000000000001 --list \
  | tee "$tmp/query.out"
grep -q '1700000000000000\|2023-11-14' "$tmp/query.out" || fail "tsblob query did not list the record"

step "tour: embedded engine example"
cargo run --quiet --release --locked -p tsblob-example-embedded -- --frames 600 --frame-size 20000 --quota 4194304 \
  | tee "$tmp/embedded.out"
grep -q 'blocks evicted' "$tmp/embedded.out" || fail "the embedded example printed no summary"

step "stop: SIGTERM"
kill -TERM "$server_pid"
for _ in $(seq 1 60); do
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.5
done
if kill -0 "$server_pid" 2>/dev/null; then
  fail "the server did not stop within 30 s of SIGTERM"
fi
rc=0
wait "$server_pid" || rc=$?
server_pid=""
[ "$rc" = 0 ] || { tail -n 20 "$log" >&2; fail "the server exited with $rc after SIGTERM"; }
echo "quickstart-check: all steps passed"
