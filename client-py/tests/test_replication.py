"""Replication tasks from the SDK: two real servers; the task sends what it selects, the
destination token is never echoed, status and removal work, sync and async alike."""

from __future__ import annotations

import time

import pytest

import tsblob

from conftest import Server


@pytest.fixture()
def destination(tmp_path):
    srv = Server(tmp_path / "dst", []).start()
    yield srv
    srv.stop()


def wait_caught_up(db: tsblob.Client, name: str, timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        task = db.get_replication(name)
        if task["status"]["pending_records"] == 0 and task["status"]["phase"] == "idle":
            return task
        assert time.monotonic() < deadline, f"task {name} did not catch up: {task}"
        time.sleep(0.1)


def test_replication_task_sends_selected_records(client: tsblob.Client, bucket: str, destination: Server) -> None:
    with destination.client() as dst:
        dst.create_bucket("copy")
        task = client.put_replication("py-task", bucket, destination.url, "copy", dst_token="secret-value",
                                      entries=["cam/*"], when={"&keep": {"$eq": "yes"}})
        assert "secret-value" not in str(task)
        assert task["settings"]["dst_token_set"] is True
        for i in range(20):
            client.write(bucket, "cam/a", f"payload {i}".encode(), ts=1000 + i,
                         labels={"keep": "yes" if i % 2 else "no"}, content_type="text/plain")
            client.write(bucket, "other", b"x", ts=1000 + i)
        task = wait_caught_up(client, "py-task")
        assert task["status"]["sent_records"] == 10
        got = list(dst.query("copy", "cam/a"))
        assert [r.ts for r in got] == [1000 + i for i in range(20) if i % 2]
        assert all(r.labels == {"keep": "yes"} and r.content_type == "text/plain" for r in got)
        assert got[0].data == b"payload 1"
        assert "py-task" in [t["name"] for t in client.list_replications()]
        client.remove_replication("py-task")
        with pytest.raises(tsblob.NotFound):
            client.get_replication("py-task")


async def test_async_replication_routes(aclient: tsblob.AsyncClient, bucket: str) -> None:
    task = await aclient.put_replication("py-async", bucket, "http://127.0.0.1:9", "x", mode="paused")
    assert task["status"]["phase"] == "paused"
    assert (await aclient.get_replication("py-async"))["settings"]["mode"] == "paused"
    assert any(t["name"] == "py-async" for t in await aclient.list_replications())
    await aclient.remove_replication("py-async")
    assert not any(t["name"] == "py-async" for t in await aclient.list_replications())
