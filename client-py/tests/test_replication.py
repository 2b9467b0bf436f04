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


def test_replication_prefix_exclusions_and_disabled_mode(client: tsblob.Client, bucket: str,
                                                         destination: Server) -> None:
    with destination.client() as dst:
        dst.create_bucket("copy2")
        client.put_replication("py-parity", bucket, destination.url, "copy2", entries=["cam*", "!cam-debug"],
                               dst_prefix="robot-1", compression="zstd", when={"$limit": 2})
        for i in range(4):
            for e in ["cam-a", "cam-b", "cam-debug"]:
                client.write(bucket, e, b"x" * 100, ts=1000 + i)
        task = wait_caught_up(client, "py-parity")
        assert (task["settings"]["dst_prefix"], task["settings"]["compression"]) == ("robot-1", "zstd")
        # `$limit: 2` per entry; cam-debug excluded.
        for e in ["cam-a", "cam-b"]:
            assert [r.ts for r in dst.query("copy2", f"robot-1/{e}")] == [1000, 1001]
        assert client.set_replication_mode("py-parity", "disabled")["status"]["phase"] == "disabled"
        client.write(bucket, "cam-a", b"y", ts=5000)
        assert client.get_replication("py-parity")["status"]["pending_records"] == 0
        client.remove_replication("py-parity")
    with pytest.raises(tsblob.InvalidInput):
        client.put_replication("bad", bucket, destination.url, "x", mode="off")


async def test_async_set_replication_mode(aclient: tsblob.AsyncClient, bucket: str) -> None:
    await aclient.put_replication("py-mode", bucket, "http://127.0.0.1:9", "x", mode="paused",
                                  dst_api="reductstore", compression="none")
    task = await aclient.set_replication_mode("py-mode", "disabled")
    assert (task["status"]["phase"], task["settings"]["dst_api"]) == ("disabled", "reductstore")
    await aclient.remove_replication("py-mode")
