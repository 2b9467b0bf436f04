"""The edges of ReductStore's API where tsblob answered otherwise (found by running one
reduct-py script against both, 2026-11-27): the same calls against a real ReductStore
1.21.5 and `tsblob serve --reductstore-listen` must return the same records, counts and
per-record errors, or raise with the same status.

Each case names the bug it pins. Messages are compared where ReductStore clients read them
(reduct-py shows them, rcli prints them); where the two servers word an error differently
on purpose (docs/reductstore.md), the status is compared."""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Dict, Iterator, List, Tuple

import pytest
from reduct import Batch, Bucket, Client, RecordBatch, ReductError

from conftest import ADMIN_TOKEN
from rs_peer import run_reductstore, run_tsblob_reduct

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def reductstore(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from run_reductstore(tmp_path_factory.mktemp("reductstore-edges"))


@pytest.fixture(scope="module")
def tsblob_reduct(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from run_tsblob_reduct(tmp_path_factory.mktemp("tsblob-edges") / "data")


Outcome = Tuple[Any, ...]


async def outcome(call: Awaitable[Any], message: bool = True) -> Outcome:
    """What a call gave: its result, or the status (and message) it raised with."""
    try:
        return ("returned", await call)
    except ReductError as e:
        return ("raised", e.status_code, e.message if message else None)


async def records(bucket: Bucket, entries: Any, **kw: Any) -> List[Tuple[str, int]]:
    return [(r.entry, r.timestamp) async for r in bucket.query(entries, **kw)]


def errors(result: Dict[Any, ReductError]) -> List[Tuple[Any, int, str]]:
    return sorted((k, e.status_code, e.message) for k, e in result.items())


def record_errors(result: Dict[str, Dict[int, ReductError]]) -> List[Tuple[str, Any, int, str]]:
    return sorted((entry, k, e.status_code, e.message) for entry, per in result.items() for k, e in per.items())


Case = Callable[[Client, Bucket], Awaitable[List[Outcome]]]


async def missing_entries_in_a_list(_c: Client, b: Bucket) -> List[Outcome]:
    """Bug "a missing entry in a list fails the whole query": ReductStore skips it."""
    return [
        await outcome(records(b, ["a", "not-yet"])),
        await outcome(b.remove_query("not-yet")),
        await outcome(b.remove_query(["a2", "not-yet"], start=2)),
        await outcome(records(b, ["a", "a2"])),
    ]


async def an_empty_list_is_every_entry(_c: Client, b: Bucket) -> List[Outcome]:
    """Bug "`entries: []` refused with 400": an empty list, like none, is every entry."""
    return [
        await outcome(records(b, [])),
        await outcome(records(b, ["*"])),
        await outcome(records(b, ["*", "!a2"])),
        await outcome(b.remove_query([], start=0, stop=2)),
        await outcome(records(b, "*")),
    ]


async def a_batch_into_a_missing_bucket(c: Client, _b: Bucket) -> List[Outcome]:
    """Bug "a batch into a missing bucket raises": ReductStore answers a 404 per record."""
    missing = Bucket("edges-missing", c._http)  # pylint: disable=protected-access
    batch = Batch()
    batch.add(1, b"x")
    batch.add(2, b"y")
    rb = RecordBatch()
    rb.add("e", 1, b"x")
    return [
        ("write_batch",) + (await outcome(missing.write_batch("e", batch)))[:1],
        ("write_batch errors", errors(await missing.write_batch("e", batch))),
        ("write_record_batch errors", record_errors(await missing.write_record_batch(rb))),
    ]


async def a_v1_batch_on_a_missing_entry(_c: Client, b: Bucket) -> List[Outcome]:
    """Bug "update/remove batches of a missing entry answer per record": ReductStore's v1
    batch looks the entry up first and raises 404."""
    update = Batch()
    update.add(1, labels={"k": "2"})
    remove = Batch()
    remove.add(1)
    return [
        await outcome(b.update_batch("nope", update)),
        await outcome(b.remove_batch("nope", remove)),
    ]


async def a_malformed_when_is_422(c: Client, b: Bucket) -> List[Outcome]:
    """Bug "a malformed `when` is 400": ReductStore answers 422 (the texts differ)."""
    return [
        await outcome(records(b, "a", when={"&k": {"$foo": 1}}), message=False),
        await outcome(records(b, "a", when={"&k": {"$gt": 0, "$lt": 5}}), message=False),
        await outcome(b.remove_query("a", when={"$foo": 1}), message=False),
    ]


async def a_strict_missing_label_is_404(_c: Client, b: Bucket) -> List[Outcome]:
    """Bug "a strict query's missing label is 422": ReductStore answers 404 with
    `Reference 'X' not found`."""
    return [await outcome(records(b, "a", when={"&nolabel": {"$eq": 1}}, strict=True))]


CASES: List[Case] = [
    missing_entries_in_a_list,
    an_empty_list_is_every_entry,
    a_batch_into_a_missing_bucket,
    a_v1_batch_on_a_missing_entry,
    a_malformed_when_is_422,
    a_strict_missing_label_is_404,
]


async def run(url: str, case: Case) -> List[Outcome]:
    async with Client(url, api_token=ADMIN_TOKEN) as client:
        # A bucket per case: ReductStore answers 409 "is being deleted" for a while after a
        # removal.
        bucket = await client.create_bucket(f"edges-{case.__name__}", exist_ok=True)
        try:
            await bucket.write("a", b"x", timestamp=1, labels={"k": "1"})
            await bucket.write("a2", b"y", timestamp=2, labels={"k": "2"})
            return await case(client, bucket)
        finally:
            await bucket.remove()


@pytest.mark.parametrize("case", CASES, ids=[c.__name__ for c in CASES])
async def test_the_same_edges_answer_the_same(reductstore: str, tsblob_reduct: str, case: Case) -> None:
    want = await run(reductstore, case)
    got = await run(tsblob_reduct, case)
    assert got == want


async def read_past_the_end(url: str) -> List[Outcome]:
    """A v1 query read to its last batch (`x-reduct-last: true`), then read once more."""
    import aiohttp

    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    out: List[Outcome] = []
    async with Client(url, api_token=ADMIN_TOKEN) as client:
        bucket = await client.create_bucket("edges-past-the-end", exist_ok=True)
        try:
            for ts in (1, 2, 3):
                await bucket.write("a", b"x%d" % ts, timestamp=ts)
            async with aiohttp.ClientSession(headers=headers) as http:
                async with http.post(f"{url}/api/v1/b/edges-past-the-end/a/q", json={"query_type": "QUERY"}) as r:
                    qid = (await r.json())["id"]
                last = "false"
                while last != "true":
                    async with http.get(f"{url}/api/v1/b/edges-past-the-end/a/batch?q={qid}") as r:
                        body = await r.read()
                        last = r.headers.get("x-reduct-last", "")
                        out.append(("batch", r.status, len(body), last))
                        if r.status != 200:
                            break
                for _ in range(2):
                    async with http.get(f"{url}/api/v1/b/edges-past-the-end/a/batch?q={qid}") as r:
                        out.append(("after the last", r.status, r.headers.get("x-reduct-error")))
        finally:
            await bucket.remove()
    return out


async def test_a_read_after_the_last_batch_was_404(reductstore: str, tsblob_reduct: str) -> None:
    """Bug "a read after `x-reduct-last: true` answers 404 'query is not open'": ReductStore
    answers 204 (`x-reduct-error: No content`), and clients that read until 204 failed."""
    want = await read_past_the_end(reductstore)
    got = await read_past_the_end(tsblob_reduct)
    assert want[-1] == ("after the last", 204, "No content"), want
    assert got == want
