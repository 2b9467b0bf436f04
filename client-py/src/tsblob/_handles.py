"""Handles: ``db.bucket("robot1")`` and ``db.bucket("robot1").entry("cam/front")``.

A handle holds a client and names; its methods are the client's methods whose first
parameters are ``bucket`` (a :class:`BucketHandle`) or ``bucket, entry`` (an
:class:`EntryHandle`), with those filled in: ``entry.write(data, ts)`` is
``db.write("robot1", "cam/front", data, ts)``. They are derived from the client's methods
(signature and docstring included) rather than written out, so a handle never lags behind
the client; the same handle classes serve both clients (an ``AsyncClient``'s handle methods
return what its methods return: awaitables and async iterators).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Dict, Tuple

from ._common import entry_path

__all__ = ["BucketHandle", "EntryHandle"]


class BucketHandle:
    """A bucket of a client: every method of the client that takes ``bucket`` first, without
    it (``write(entry, data, ts)``, ``query(entry, start, stop)``, ``remove(entry, ts)``,
    ``get_bucket()``, ``update_bucket(...)``, ``remove_bucket()``...), plus ``info()`` and
    ``entry(name)``. Creating a handle sends nothing."""

    __slots__ = ("client", "name")

    def __init__(self, client: Any, name: str) -> None:
        self.client = client
        self.name = name

    def entry(self, name: str) -> "EntryHandle":
        """A handle on one entry of this bucket (sends nothing)."""
        entry_path(self.name, name)  # a bad name fails here, not at first use
        return EntryHandle(self.client, self.name, name)

    def info(self) -> Any:
        """The bucket's settings, totals and entries (``get_bucket``)."""
        return self.client.get_bucket(self.name)

    def _bound(self) -> Tuple[str, ...]:
        return (self.name,)

    def __repr__(self) -> str:
        return f"BucketHandle({self.client!r}, {self.name!r})"


class EntryHandle:
    """An entry of a bucket: every method of the client that takes ``bucket, entry`` first,
    without them (``write(data, ts)``, ``read(ts)``, ``query(start, stop)``, ``tail()``,
    ``remove(ts)``, ``get_entry()``, ``remove_entry()``...), plus ``info()``. Creating a
    handle sends nothing."""

    __slots__ = ("client", "bucket", "name")

    def __init__(self, client: Any, bucket: str, name: str) -> None:
        self.client = client
        self.bucket = bucket
        self.name = name

    def info(self) -> Any:
        """The entry's record count, size and time span (``get_entry``)."""
        return self.client.get_entry(self.bucket, self.name)

    def _bound(self) -> Tuple[str, ...]:
        return (self.bucket, self.name)

    def __repr__(self) -> str:
        return f"EntryHandle({self.client!r}, {self.bucket!r}, {self.name!r})"


def _forward(name: str, method: Callable[..., Any], n: int) -> Callable[..., Any]:
    """A handle method calling ``client.<name>`` with the handle's ``n`` names first."""

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.client, name)(*self._bound(), *args, **kwargs)

    sig = inspect.signature(method)
    params = list(sig.parameters.values())
    call.__signature__ = sig.replace(parameters=[params[0]] + params[1 + n:])  # type: ignore[attr-defined]
    del call.__wrapped__  # type: ignore[attr-defined]  # help() shows the handle's signature
    return call


def install(client_cls: type) -> None:
    """Adds to the handle classes the methods of ``client_cls`` that take ``bucket`` (and
    ``entry``) first; called once, with the sync client (the async one has the same)."""
    targets: Dict[int, type] = {1: BucketHandle, 2: EntryHandle}
    for name, method in vars(client_cls).items():
        if name.startswith("_") or not callable(method):
            continue
        first = list(inspect.signature(method).parameters)[1:3]
        n = 2 if first == ["bucket", "entry"] else 1 if first[:1] == ["bucket"] else 0
        for k in range(1, n + 1):
            cls = targets[k]
            if name not in vars(cls):
                setattr(cls, name, _forward(name, method, k))
