"""Lifecycle rules through reduct-py 1.21.0 (PyPI) against `tsblob serve
--reductstore-listen` (issue 29): create, list, detail, mode, update, delete in ReductStore's
shapes, run by tsblob's engine, and seen by tsblob's own API (a bucket's max_age is the
provisioned lifecycle `<bucket>.max_age`)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Iterator

import pytest
from reduct import Client, LifecycleMode, LifecycleSettings, LifecycleType, ReductError

import tsblob
from conftest import ADMIN_TOKEN
from rs_peer import ReductServer, rclient, serve_reduct  # rclient: a fixture of their tests

pytestmark = pytest.mark.server

HOUR = 3_600_000_000


@pytest.fixture(scope="module")
def rs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReductServer]:
    with serve_reduct(tmp_path_factory.mktemp("tsblob-reduct-lc") / "data") as srv:
        yield srv


def name() -> str:
    return "lc-" + uuid.uuid4().hex[:10]


async def count(bucket, entry: str) -> int:  # type: ignore[no-untyped-def]
    return len([r async for r in bucket.query(entry, start=0)])


async def test_lifecycle_crud_and_run_through_reduct_py(rs: ReductServer, rclient: Client) -> None:
    b = name()
    bucket = await rclient.create_bucket(b)
    old = int(time.time() * 1e6) - 2 * HOUR
    await bucket.write("cam/raw", b"x", timestamp=old, labels={"kind": "raw"})
    await bucket.write("cam/raw", b"y", timestamp=old + 1, labels={"kind": "jpeg"})
    await bucket.write("cam/keep", b"z", timestamp=old, labels={"kind": "raw"})
    lc = name()
    settings = LifecycleSettings(bucket=b, entries=["cam/*", "!cam/keep"], older_than="1h", interval="1h",
                                 when={"&kind": {"$eq": "raw"}})
    await rclient.create_lifecycle(lc, settings)
    with pytest.raises(ReductError) as e:
        await rclient.create_lifecycle(lc, settings)
    assert e.value.status_code == 409
    assert lc in [i.name for i in await rclient.get_lifecycles()]
    detail = await rclient.get_lifecycle_detail(lc)
    assert (detail.settings.bucket, detail.settings.older_than, detail.settings.interval) == (b, "1h", "1h")
    assert detail.settings.entries == ["cam/*", "!cam/keep"]
    assert detail.settings.when == {"&kind": {"$eq": "raw"}}
    assert detail.settings.type == LifecycleType.DELETE
    assert (detail.info.mode, detail.info.is_provisioned, detail.info.is_running) == (LifecycleMode.ENABLED, False,
                                                                                        True)
    # tsblob's engine runs it in the background (due at once): the old raw record of cam/raw goes.
    deadline = time.monotonic() + 20
    while await count(bucket, "cam/raw") != 1:
        assert time.monotonic() < deadline, "the lifecycle never ran"
        await asyncio.sleep(0.2)
    assert await count(bucket, "cam/keep") == 1
    assert (await rclient.get_lifecycle_detail(lc)).info.last_run is not None
    # The same rule on tsblob's own API.
    async with tsblob.AsyncClient(rs.srv.url, token=ADMIN_TOKEN) as native:
        rule = await native.get_lifecycle_rule(b, lc)
        assert (rule.older_than, rule.status.removed) == (HOUR, 1)
    await rclient.set_lifecycle_mode(lc, LifecycleMode.DRY_RUN)
    assert (await rclient.get_lifecycle_detail(lc)).info.mode == LifecycleMode.DRY_RUN
    await rclient.update_lifecycle(lc, LifecycleSettings(bucket=b, older_than="2d", interval="30m"))
    detail = await rclient.get_lifecycle_detail(lc)
    assert (detail.settings.older_than, detail.settings.interval, detail.settings.when) == ("2d", "30m", None)
    await rclient.delete_lifecycle(lc)
    with pytest.raises(ReductError) as e:
        await rclient.get_lifecycle_detail(lc)
    assert e.value.status_code == 404
    with pytest.raises(ReductError) as e:
        await rclient.update_lifecycle(lc, settings)
    assert e.value.status_code == 404


async def test_refusals_and_the_provisioned_max_age(rs: ReductServer, rclient: Client) -> None:
    b = name()
    await rclient.create_bucket(b)
    # A compress lifecycle (refused with 422 before issue 28's compress rules) is created and
    # seen as tsblob's compress rule.
    lc = name()
    await rclient.create_lifecycle(lc, LifecycleSettings(type=LifecycleType.COMPRESS, bucket=b,
                                                         older_than="1d", interval="1h"))
    detail = await rclient.get_lifecycle_detail(lc)
    assert detail.info.type == LifecycleType.COMPRESS and detail.settings.type == LifecycleType.COMPRESS
    async with tsblob.AsyncClient(rs.srv.url, token=ADMIN_TOKEN) as native:
        assert (await native.get_lifecycle_rule(b, lc)).action == "compress"
    await rclient.delete_lifecycle(lc)
    with pytest.raises(ReductError) as e:
        await rclient.create_lifecycle(name(), LifecycleSettings(bucket="no-such-bucket", older_than="1d",
                                                                 interval="1h"))
    assert e.value.status_code == 404
    with pytest.raises(ReductError) as e:
        await rclient.create_lifecycle(name(), LifecycleSettings(bucket=b, older_than="soon", interval="1h"))
    assert e.value.status_code == 422
    with pytest.raises(ReductError) as e:
        await rclient.create_lifecycle(name(), LifecycleSettings(bucket=b, older_than="1d", interval="1h",
                                                                 when={"$nope": 1}))
    assert e.value.status_code == 422 and "when" in e.value.message
    async with tsblob.AsyncClient(rs.srv.url, token=ADMIN_TOKEN) as native:
        await native.update_bucket(b, max_age="30d")
    shorthand = f"{b}.max_age"
    infos = {i.name: i for i in await rclient.get_lifecycles()}
    assert infos[shorthand].is_provisioned
    assert (await rclient.get_lifecycle_detail(shorthand)).settings.older_than == "30d"
    with pytest.raises(ReductError) as e:
        await rclient.delete_lifecycle(shorthand)
    assert e.value.status_code == 409
