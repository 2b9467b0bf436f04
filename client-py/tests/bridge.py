"""Drives an ``AsyncClient`` from sync test code, so that one test body checks both clients.

``Bridge(AsyncClient(...))`` behaves as a ``Client``: every coroutine it returns runs to its
end on an event loop in a thread of its own (so threads of a test may share it), async
iterators become iterators, async context managers become context managers, and the objects
they hand out (records, handles) are bridged the same way. The renames are the ones
``hatch_build.py`` makes (``iter_chunks`` is ``aiter_chunks``...). ``record.data`` of a
streamed async record is read first, as the sync client does. Passing a bridged object into
an async method would block its own loop: that raises instead.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import Any, Optional

import tsblob

RENAMES = {"iter_chunks": "aiter_chunks", "close": "aclose"}


class Loop:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Any) -> Any:
        if threading.current_thread() is self.thread:
            raise RuntimeError("a bridged object was used inside the event loop (passed into an async method?)")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


def wrap(loop: Loop, value: Any) -> Any:
    if inspect.isawaitable(value):
        return wrap(loop, loop.run(_await(value)))
    if isinstance(value, (tsblob.AsyncClient, tsblob.AsyncRecord, tsblob.AsyncBucketHandle, tsblob.AsyncEntryHandle)):
        return Bridge(value, loop)
    if hasattr(value, "__anext__"):
        return Iter(value, loop)
    if hasattr(value, "__aenter__"):
        return Ctx(value, loop)
    return value


def unwrap(value: Any) -> Any:
    """What an async method takes for a bridged argument (records, lists of records)."""
    if isinstance(value, Bridge):
        return value._target
    if isinstance(value, list):
        return [unwrap(x) for x in value]
    return value


async def _await(aw: Any) -> Any:
    return await aw


class Bridge:
    """An async object seen as its sync twin."""

    def __init__(self, target: Any, loop: Loop) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_loop", loop)

    def __getattr__(self, name: str) -> Any:
        target = self._target
        if name == "data" and isinstance(target, tsblob.AsyncRecord) and not target.loaded and not target.tell():
            return self._loop.run(target.read())  # the sync Record reads a streamed payload here
        attr = getattr(target, RENAMES.get(name, name) if hasattr(target, RENAMES.get(name, "")) else name)
        if callable(attr) and not isinstance(attr, type):
            return lambda *a, **kw: wrap(self._loop, attr(*[unwrap(x) for x in a], **kw))
        return attr

    def __iter__(self) -> "Iter":  # an async record's lines
        return Iter(self._target.__aiter__(), self._loop)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._target, name, value)

    def __enter__(self) -> "Bridge":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Bridge({self._target!r})"


class Iter:
    """An async iterator seen as an iterator (and a context manager, as the sync ones are)."""

    def __init__(self, it: Any, loop: Loop) -> None:
        self.it = it
        self.loop = loop

    def __iter__(self) -> "Iter":
        return self

    def __next__(self) -> Any:
        try:
            return wrap(self.loop, self.loop.run(self.it.__anext__()))
        except StopAsyncIteration:
            raise StopIteration from None

    def close(self) -> None:
        self.loop.run(self.it.aclose())

    def __enter__(self) -> "Iter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.it, name)
        if callable(attr):  # to_pandas()...: awaited on the loop
            return lambda *a, **kw: wrap(self.loop, attr(*a, **kw))
        return attr


class Ctx:
    """An async context manager seen as a context manager."""

    def __init__(self, cm: Any, loop: Loop) -> None:
        self.cm = cm
        self.loop = loop

    def __enter__(self) -> Any:
        return wrap(self.loop, self.loop.run(self.cm.__aenter__()))

    def __exit__(self, *exc: Any) -> Optional[bool]:
        return self.loop.run(self.cm.__aexit__(*exc))  # type: ignore[no-any-return]
