"""Property-based tests of the HTTP API against its own OpenAPI document (issue #7).

Starts a real `tsblob serve` on a free loopback port with a fresh data folder, loads
`/api/v1/openapi.json` from it, and lets schemathesis generate requests for every
operation, valid and invalid: no answer may be a 5xx, and every answer must match the
document (status code, content type, headers, body schema).

Needs: the `tsblob` binary (`TSBLOB_BIN`, else `target/release/tsblob`, else
`target/debug/tsblob`) and `pip install schemathesis pytest` (see `reliability/run_schemathesis.sh`).
`TSBLOB_ST_EXAMPLES` sets the examples per operation (default 60).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Iterator

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

ROOT = Path(__file__).resolve().parents[2]
# With an admin token from the start, a token created by a generated request does not
# switch authentication on half-way through the run.
ADMIN = "st-admin-token-for-tests"
AUTH = {"Authorization": f"Bearer {ADMIN}"}
EXAMPLES = int(os.environ.get("TSBLOB_ST_EXAMPLES", "60"))
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


def tsblob_bin() -> str:
    env = os.environ.get("TSBLOB_BIN")
    if env:
        return env
    for profile in ("release", "debug"):
        candidate = ROOT / "target" / profile / "tsblob"
        if candidate.exists():
            return str(candidate)
    pytest.fail("no tsblob binary: build it (cargo build --release -p tsblob-server) or set TSBLOB_BIN")


@pytest.fixture(scope="session")
def server() -> Iterator[str]:
    data = tempfile.mkdtemp(prefix="tsblob-st-")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TSBLOB_")}
    env["TSBLOB_TOKEN"] = ADMIN
    proc = subprocess.Popen(
        [tsblob_bin(), "serve", "--data", data, "--listen", "127.0.0.1:0", "--idle-timeout", "5s"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    stderr_lines: list[str] = []
    drain = threading.Thread(target=lambda: stderr_lines.extend(proc.stderr), daemon=True)  # type: ignore[arg-type]
    drain.start()
    first = proc.stdout.readline()
    threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()  # type: ignore[union-attr]
    if "http://" not in first:
        proc.kill()
        pytest.fail(f"tsblob serve did not start: {first!r} {''.join(stderr_lines)}")
    base = "http://" + first.split("http://")[1].split()[0]
    # Something for the generated requests to find: a bucket with an entry and records.
    requests.post(f"{base}/api/v1/b/b", headers=AUTH, timeout=10).raise_for_status()
    for ts in (1, 2, 3):
        requests.post(f"{base}/api/v1/b/b/e?ts={ts}", data=b"x" * 100, headers=AUTH, timeout=10).raise_for_status()
    yield base
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
    panics = [line for line in stderr_lines if "panicked" in line]
    shutil.rmtree(data, ignore_errors=True)
    assert not panics, f"the server panicked: {panics}"


@pytest.fixture(scope="session")
def api_schema(server: str) -> schemathesis.BaseSchema:
    schema = schemathesis.openapi.from_url(f"{server}/api/v1/openapi.json", headers=AUTH, timeout=10)
    schema.config.update(base_url=server, headers=AUTH)
    return schema


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=os.environ.get("TSBLOB_ST_RANDOM") is None,
)
def test_api_conforms_to_its_openapi_document(case: schemathesis.Case, server: str) -> None:
    case.call_and_validate(base_url=server, headers=AUTH, checks=CHECKS, timeout=30)
