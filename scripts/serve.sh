#!/usr/bin/env bash
# Quick start, command 1: builds tsblob (release) and runs `tsblob serve` on the embedded
# default (data in ./tsblob-data, listening on 127.0.0.1:8686). Extra arguments go to serve.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked -p tsblob-server --bin tsblob
exec target/release/tsblob serve "$@"
