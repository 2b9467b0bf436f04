"""The console tests drive a browser; the client that writes their records is the sync one
only (the SDK tests run every client method against both clients elsewhere)."""

from __future__ import annotations

from typing import Iterator

import pytest

import tsblob


@pytest.fixture
def client(server) -> Iterator[tsblob.Client]:  # type: ignore[no-untyped-def]
    with server.client() as db:
        yield db
