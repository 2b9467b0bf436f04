"""MCAP and ROS 2 bags in and out, checked with independent readers and writers.

tsblob's export (``tsblob cp ... out.mcap``, the route ``GET /api/v1/b/{bucket}/query?
format=mcap`` and ``Client.export_mcap``) is read with Foxglove's Python ``mcap`` reader (and
``mcap-ros2-support`` for ROS 2 messages); files written by Foxglove's Python writer and a
ROS 2 bag written by ``rosbags`` (generated here: no downloads) are imported with
``tsblob cp`` and exported back, message bytes compared per topic.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from conftest import Server, tsblob_binary

mcap_reader = pytest.importorskip("mcap.reader")
mcap_writer = pytest.importorskip("mcap.writer")

BASE = 1_764_064_800_000_000  # 2025-11-25T10:00:00Z in µs
WINDOW = 300 * 1_000_000  # 5 minutes


def cp(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TSBLOB_")}
    p = subprocess.run([str(tsblob_binary()), "cp", "-q", *args], capture_output=True, text=True, env=env,
                       timeout=300)
    if check and p.returncode != 0:
        raise AssertionError(f"tsblob cp {' '.join(args)} failed ({p.returncode}):\n{p.stderr}")
    return p


def read_mcap(path: Path) -> Tuple[Any, List[Tuple[str, Any, Any, Any]]]:
    """(summary, [(topic, schema, channel, message)]) in log-time order, via the seeking
    reader (it reads the summary and the chunk indexes)."""
    with open(path, "rb") as f:
        r = mcap_reader.make_reader(f)
        summary = r.get_summary()
        msgs = [(ch.topic, sc, ch, m) for sc, ch, m in r.iter_messages(log_time_order=True)]
    return summary, msgs


def fill_window(db: Any, bucket: str) -> Dict[str, List[Tuple[int, bytes, str, Dict[str, str]]]]:
    """Three entries over a 5-minute window, one record per second each, some labelled;
    plus a record of each before and after the window."""
    want: Dict[str, List[Tuple[int, bytes, str, Dict[str, str]]]] = {}
    kinds = {"cams/front": "image/jpeg", "imu": "application/json", "lidar/points": "application/octet-stream"}
    for entry, ct in kinds.items():
        recs = []
        for i in range(-1, 301):
            ts = BASE + i * 1_000_000 + (7 if entry == "imu" else 0)
            if entry == "imu":
                data = json.dumps({"i": i, "ax": i * 0.5}).encode()
            else:
                data = bytes([(i * 31 + len(entry)) % 256]) * (100 + (i % 7) * 1000)
            labels = {"sensor": entry.split("/")[0], "n": str(i)} if i % 3 == 0 else {}
            recs.append((ts, data, labels, ct))
        db.write_batch(bucket, entry, recs)
        want[entry] = [(ts, d, ct, lb) for ts, d, lb, ct in recs if BASE <= ts < BASE + WINDOW]
    return want


def check_export(path: Path, want: Dict[str, List[Tuple[int, bytes, str, Dict[str, str]]]]) -> None:
    summary, msgs = read_mcap(path)
    assert summary is not None and summary.chunk_indexes, "no summary with chunk indexes: readers cannot seek"
    assert {ci.compression for ci in summary.chunk_indexes} == {"zstd"}
    assert summary.statistics.message_count == len(msgs)
    data_msgs = [x for x in msgs if not x[0].endswith("#labels")]
    assert sorted({t for t, *_ in data_msgs}) == sorted(want)
    labels_at = {(ch.metadata["tsblob.labels_of"], m.log_time): json.loads(m.data)
                 for t, _, ch, m in msgs if t.endswith("#labels")}
    for entry, recs in want.items():
        got = [(m.log_time, m.publish_time, bytes(m.data), ch.message_encoding, ch.metadata)
               for t, _, ch, m in data_msgs if t == entry]
        assert len(got) == len(recs), entry
        for (ts, data, ct, labels), (log_time, pub, body, enc, meta) in zip(recs, got):
            assert log_time == ts * 1000 and pub == log_time
            assert body == data
            assert meta["tsblob.content_type"] == ct and meta["tsblob.entry"] == entry
            assert enc == {"application/json": "json"}.get(ct, ct)
            assert labels_at.get((entry, log_time), {}) == labels, (entry, ts)
    # The message indexes let a reader seek: one topic, a sub-window.
    with open(path, "rb") as f:
        r = mcap_reader.make_reader(f)
        start, end = (BASE + 100 * 1_000_000) * 1000, (BASE + 110 * 1_000_000) * 1000
        sub = [m.log_time for _, _, m in r.iter_messages(topics=["imu"], starting_at=start, ending_before=end)]
    assert sub == [ts * 1000 for ts, *_ in want["imu"] if start <= ts * 1000 < end]


def test_a_five_minute_three_entry_window_exports_to_mcap_read_by_the_mcap_reader(
        server: Server, bucket: str, tmp_path: Path) -> None:
    with server.client() as db:
        want = fill_window(db, bucket)
        # 1. tsblob cp
        out = tmp_path / "cp.mcap"
        cp(f"{server.url}/{bucket}", str(out), "--start", str(BASE), "--stop", str(BASE + WINDOW))
        assert not Path(str(out) + ".part").exists()
        check_export(out, want)
        # 2. the HTTP route
        url = (f"{server.url}/api/v1/b/{bucket}/query?entries=cams/*,imu,lidar/**&format=mcap"
               f"&start={BASE}&stop={BASE + WINDOW}")
        with urllib.request.urlopen(url) as resp:
            assert resp.headers["content-type"] == "application/x-mcap"
            (tmp_path / "http.mcap").write_bytes(resp.read())
        check_export(tmp_path / "http.mcap", want)
        # 3. the SDK
        n = db.export_mcap(bucket, ["**"], BASE, BASE + WINDOW, tmp_path / "sdk.mcap")
        assert n == (tmp_path / "sdk.mcap").stat().st_size
        check_export(tmp_path / "sdk.mcap", want)
        # Only part of the entries: the others are not channels.
        cp(f"{server.url}/{bucket}/imu", str(tmp_path / "imu.mcap"), "--start", str(BASE), "--stop",
           str(BASE + WINDOW))
        check_export(tmp_path / "imu.mcap", {"imu": want["imu"]})


def test_an_mcap_export_with_a_bad_format_or_no_entries_is_refused(server: Server, bucket: str) -> None:
    for q, words in [("entries=x&format=csv", "format"), ("format=mcap", "entries"),
                     ("entries=x&format=mcap&desc=true", "desc")]:
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"{server.url}/api/v1/b/{bucket}/query?{q}")
        assert e.value.code == 400
        assert words in json.loads(e.value.read())["error"]["message"]


def python_written_mcap(path: Path, chunk_size: int = 1024 * 1024) -> Dict[str, List[Tuple[int, int, int, bytes]]]:
    """An MCAP from Foxglove's writer: three topics (one with a schema, one without a leading
    slash), messages between µs, two in one µs, publish times and sequences of their own."""
    sent: Dict[str, List[Tuple[int, int, int, bytes]]] = {}
    with open(path, "wb") as f:
        w = mcap_writer.Writer(f, chunk_size=chunk_size)
        w.start(profile="", library="test")
        sid = w.register_schema("demo.Point", "jsonschema", b'{"type":"object"}')
        chans = {
            "/robot/pose": w.register_channel("/robot/pose", "json", sid),
            "camera.raw": w.register_channel("camera.raw", "image/x-raw", 0),
            "/diag": w.register_channel("/diag", "cbor", 0),
        }
        t0 = BASE * 1000
        for i in range(400):
            topic = list(chans)[i % 3]
            log_time = t0 + i * 1_000_000 + (i % 5) * 137  # not whole µs
            if i == 10:
                log_time = sent["/diag"][-1][0] + 400  # the same µs as /diag's last (i = 8)
                topic = "/diag"
            data = json.dumps({"x": i}).encode() if topic == "/robot/pose" else os.urandom(50 + i)
            pub, seq = log_time - 5000 * (i % 2), i % 4
            w.add_message(chans[topic], log_time=log_time, data=data, publish_time=pub, sequence=seq)
            sent.setdefault(topic, []).append((log_time, pub, seq, data))
        w.finish()
    return sent


def messages_by_topic(path: Path) -> Dict[str, List[Tuple[int, int, int, bytes]]]:
    _, msgs = read_mcap(path)
    out: Dict[str, List[Tuple[int, int, int, bytes]]] = {}
    for topic, _, _, m in msgs:
        if not topic.endswith("#labels"):
            out.setdefault(topic, []).append((m.log_time, m.publish_time, m.sequence, bytes(m.data)))
    return out


def test_an_mcap_of_the_python_writer_imports_and_exports_back_byte_identical(
        server: Server, bucket: str, tmp_path: Path) -> None:
    src = tmp_path / "in.mcap"
    sent = python_written_mcap(src)
    p = cp(str(src), f"{server.url}/{bucket}")
    assert "moved to the next free µs" in p.stderr
    with server.client() as db:
        info = {e.name: e for e in db.get_bucket(bucket).entries}
        assert set(info) >= {"robot/pose", "camera.2Eraw", "diag", ".mcap-schemas"}
        pose = list(db.query(bucket, "robot/pose"))
        assert pose[0].labels["mcap.topic"] == "/robot/pose"
        assert pose[0].labels["mcap.schema"] == "demo.Point"
        assert pose[0].labels["mcap.schema_encoding"] == "jsonschema"
        assert pose[0].labels["mcap.encoding"] == "json"
        assert pose[0].content_type == "application/json"
        assert [r.timestamp for r in pose] == [lt // 1000 for lt, *_ in sent["/robot/pose"]]
        counts = {e: info[e].record_count for e in info}
    # Imported again: everything is found there already, nothing added.
    p = cp(str(src), f"{server.url}/{bucket}")
    assert " 0 written" in p.stderr and "already there" in p.stderr, p.stderr
    with server.client() as db:
        assert {e.name: e.record_count for e in db.get_bucket(bucket).entries} == counts
    out = tmp_path / "out.mcap"
    cp(f"{server.url}/{bucket}", str(out))
    back = messages_by_topic(out)
    assert back == {t: sorted(v) for t, v in sent.items()}
    _, msgs = read_mcap(out)
    pose_schema = next(sc for t, sc, _, _ in msgs if t == "/robot/pose")
    assert (pose_schema.name, pose_schema.encoding, pose_schema.data) == ("demo.Point", "jsonschema",
                                                                         b'{"type":"object"}')


def test_a_truncated_mcap_imports_its_intact_chunks_and_reports_the_rest(
        server: Server, bucket: str, tmp_path: Path) -> None:
    src = tmp_path / "full.mcap"
    sent = python_written_mcap(src, chunk_size=4096)
    cut = tmp_path / "cut.mcap"
    cut.write_bytes(src.read_bytes()[: src.stat().st_size // 2])
    p = cp(str(cut), f"{server.url}/{bucket}", check=False)
    assert p.returncode != 0
    assert "not read" in p.stderr and "everything else in it was imported" in p.stderr, p.stderr
    with server.client() as db:
        got = [r.timestamp for r in db.query(bucket, "robot/pose")]
    first_half = [lt // 1000 for lt, *_ in sent["/robot/pose"]]
    assert 0 < len(got) < len(first_half)
    assert got == first_half[: len(got)]
    # The rest of the file imported later completes it (the import is idempotent).
    cp(str(src), f"{server.url}/{bucket}")
    with server.client() as db:
        assert [r.timestamp for r in db.query(bucket, "robot/pose")] == first_half


def test_a_ros2_bag_imports_and_exports_back_byte_identical(server: Server, bucket: str, tmp_path: Path) -> None:
    rosbag2 = pytest.importorskip("rosbags.rosbag2")
    typesys = pytest.importorskip("rosbags.typesys")
    decoder = pytest.importorskip("mcap_ros2.decoder")
    store = typesys.get_typestore(typesys.Stores.ROS2_HUMBLE)
    String = store.types["std_msgs/msg/String"]
    Header = store.types["std_msgs/msg/Header"]
    Time = store.types["builtin_interfaces/msg/Time"]
    Temperature = store.types["sensor_msgs/msg/Temperature"]
    bag = tmp_path / "bag"
    sent: Dict[str, List[Tuple[int, bytes]]] = {}
    with rosbag2.Writer(bag, version=9, storage_plugin=rosbag2.StoragePlugin.MCAP) as w:
        chatter = w.add_connection("/chatter", String.__msgtype__, typestore=store)
        temp = w.add_connection("/sensors/temp", Temperature.__msgtype__, typestore=store)
        t0 = BASE * 1000
        for i in range(60):
            t = t0 + i * 50_000_000 + 123
            raw = store.serialize_cdr(String(data=f"hello {i}"), String.__msgtype__)
            w.write(chatter, t, raw)
            sent.setdefault("/chatter", []).append((t, bytes(raw)))
            msg = Temperature(header=Header(stamp=Time(sec=t // 10**9, nanosec=t % 10**9), frame_id="base"),
                              temperature=20.0 + i / 10, variance=0.01)
            raw = store.serialize_cdr(msg, Temperature.__msgtype__)
            w.write(temp, t + 1_000, raw)
            sent.setdefault("/sensors/temp", []).append((t + 1_000, bytes(raw)))
    assert (bag / "metadata.yaml").is_file()
    cp(str(bag), f"{server.url}/{bucket}")
    with server.client() as db:
        rec = next(iter(db.query(bucket, "sensors/temp")))
        assert rec.labels["mcap.schema"] == "sensor_msgs/msg/Temperature"
        assert rec.labels["mcap.schema_encoding"] == "ros2msg"
        assert rec.labels["mcap.encoding"] == "cdr"
        assert rec.content_type == "application/x-cdr"
    out = tmp_path / "out.mcap"
    cp(f"{server.url}/{bucket}", str(out), "--entries", "chatter,sensors/**")
    back = {t: [(lt, d) for lt, _, _, d in v] for t, v in messages_by_topic(out).items()}
    assert back == sent
    with open(out, "rb") as f:
        r = mcap_reader.make_reader(f, decoder_factories=[decoder.DecoderFactory()])
        decoded = [(ch.topic, m.log_time, ros) for _, ch, m, ros in r.iter_decoded_messages()]
    chat = [ros.data for topic, _, ros in decoded if topic == "/chatter"]
    assert chat == [f"hello {i}" for i in range(60)]
    temps = [(ros.temperature, ros.header.frame_id) for topic, _, ros in decoded if topic == "/sensors/temp"]
    assert temps == [(pytest.approx(20.0 + i / 10), "base") for i in range(60)]


def ros2_bag(path: Path, topic: str, n: int, compression: str = "NONE") -> List[Tuple[int, bytes]]:
    """A rosbag2 folder (MCAP storage) written by ``rosbags``, compressed by rosbag2 as
    asked (``NONE``, ``MESSAGE`` or ``FILE``, zstd): the messages as written."""
    rosbag2 = pytest.importorskip("rosbags.rosbag2")
    typesys = pytest.importorskip("rosbags.typesys")
    store = typesys.get_typestore(typesys.Stores.ROS2_HUMBLE)
    String = store.types["std_msgs/msg/String"]
    w = rosbag2.Writer(path, version=9, storage_plugin=rosbag2.StoragePlugin.MCAP)
    w.set_compression(getattr(rosbag2.CompressionMode, compression), rosbag2.CompressionFormat.ZSTD)
    sent = []
    with w:
        conn = w.add_connection(topic, String.__msgtype__, typestore=store)
        for i in range(n):
            t = BASE * 1000 + i * 10_000_000
            raw = bytes(store.serialize_cdr(String(data=f"message {i} " + "x" * 200), String.__msgtype__))
            w.write(conn, t, raw)
            sent.append((t, raw))
    return sent


@pytest.mark.parametrize("compression", ["MESSAGE", "FILE"])
def test_a_compressed_ros2_bag_was_imported_as_its_zstd_frames(
        compression: str, server: Server, bucket: str, tmp_path: Path) -> None:
    """Bug "a rosbag2 folder's metadata.yaml was not read": a bag rosbag2 compressed by
    message was imported as its zstd frames (and the copy said it was whole), one compressed
    by file failed with "has no .mcap files". The metadata says how; the messages come in
    as they were written, and export back byte-identical."""
    bag = tmp_path / "bag"
    sent = ros2_bag(bag, "/chatter", 40, compression)
    if compression == "FILE":
        assert not list(bag.glob("*.mcap")) and list(bag.glob("*.mcap.zstd"))
    cp(str(bag), f"{server.url}/{bucket}")
    out = tmp_path / "out.mcap"
    cp(f"{server.url}/{bucket}", str(out), "--entries", "chatter")
    back = {t: [(lt, d) for lt, _, _, d in v] for t, v in messages_by_topic(out).items()}
    assert back == {"/chatter": sent}


def test_a_bags_unlisted_file_is_left_out_and_a_missing_one_fails_the_copy(
        server: Server, bucket: str, tmp_path: Path) -> None:
    """The files a rosbag2 folder's metadata lists are the bag: a stray ``.mcap`` beside them
    is not imported (said), a listed file that is gone fails the copy once the rest is in."""
    bag = tmp_path / "bag"
    sent = ros2_bag(bag, "/chatter", 10)
    other = tmp_path / "other"
    ros2_bag(other, "/other", 5)
    (bag / "stray.mcap").write_bytes(next(other.glob("*.mcap")).read_bytes())
    p = cp(str(bag), f"{server.url}/{bucket}")
    assert "stray.mcap is not listed in the bag's metadata.yaml: not imported" in p.stderr, p.stderr
    meta = bag / "metadata.yaml"
    text = meta.read_text()
    assert "  relative_file_paths:\n  - " in text, text
    meta.write_text(text.replace("  relative_file_paths:\n", "  relative_file_paths:\n  - gone_1.mcap\n", 1))
    p = cp(str(bag), f"{server.url}/{bucket}", check=False)
    assert p.returncode != 0, p.stderr
    assert "gone_1.mcap is listed in the bag's metadata.yaml but is not in its folder" in p.stderr, p.stderr
    with server.client() as db:
        assert [r.timestamp for r in db.query(bucket, "chatter")] == [t // 1000 for t, _ in sent]
        assert {e.name for e in db.get_bucket(bucket).entries} == {"chatter", ".mcap-schemas"}
