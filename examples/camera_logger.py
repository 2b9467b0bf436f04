#!/usr/bin/env python3
"""A camera logger: writes JPEG-sized frames at a steady frame rate into a tsblob bucket with
a FIFO quota, so the newest frames are always kept and the oldest go first.

The frames are synthetic (random bytes between a JPEG's start and end markers, sizes that
vary like a real encoder's) so the example runs anywhere; swap ``grab_frame`` for your
camera. Each frame is stored at its capture time with labels a query can filter on.

    pip install ./client-py
    python examples/camera_logger.py --fps 15 --seconds 20 --quota 8MiB

Needs a running ``tsblob serve`` (``./scripts/serve.sh``). Exits non-zero on any error.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import sys
import time
from typing import Dict, Optional, Sequence

from tsblob import Client, TimestampExists, TsblobError, Unauthorized

_UNITS = {"": 1, "B": 1, "KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30,
          "KB": 10**3, "MB": 10**6, "GB": 10**9}


def parse_size(text: str) -> int:
    """``8MiB``, ``500KB``, ``1048576`` -> bytes (the units the server's flags take)."""
    m = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).upper() not in _UNITS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size: use e.g. 65536, 500KB or 8MiB")
    return int(m.group(1)) * _UNITS[m.group(2).upper()]


def grab_frame(rng: random.Random, mean_size: int) -> bytes:
    """A stand-in for a camera: a JPEG-sized frame (±20 % around ``mean_size``)."""
    size = max(4, int(rng.gauss(mean_size, mean_size * 0.1)))
    size = min(max(size, int(mean_size * 0.8)), int(mean_size * 1.2))
    # os.urandom: incompressible like real JPEG data, and fast enough for hundreds of fps.
    return b"\xff\xd8" + os.urandom(size - 4) + b"\xff\xd9"


class Motion:
    """A toy motion detector: runs of "yes" and "no" lasting a few seconds each."""

    def __init__(self, rng: random.Random) -> None:
        self.rng, self.state, self.until = rng, "no", 0.0

    def at(self, t: float) -> str:
        if t >= self.until:
            self.state = "yes" if self.state == "no" else "no"
            self.until = t + self.rng.uniform(1.0, 4.0)
        return self.state


def run(url: str, bucket: str, entry: str, fps: float, seconds: float, frame_size: int,
        quota: int, block_size: Optional[int], camera: str, seed: int, token: Optional[str]) -> Dict[str, int]:
    rng = random.Random(seed)
    motion = Motion(rng)
    stats = {"frames": 0, "bytes": 0, "late": 0, "duplicates": 0}
    with Client(url, token=token) as db:
        b = db.create_bucket(bucket, quota_type="fifo", quota_size=quota,
                             max_block_size=block_size, exist_ok=True)
        q = b.settings
        if (q.quota_type, q.quota_size) != ("fifo", quota):
            print(f"note: bucket {bucket!r} already exists with quota {q.quota_type} {q.quota_size} B; "
                  "its settings are left as they are", file=sys.stderr)
        print(f"logging {fps:g} fps of ~{frame_size} B frames into {bucket}/{entry} "
              f"(quota {q.quota_type} {q.quota_size} B, blocks of {q.max_block_size} B) for {seconds:g} s")
        period = 1.0 / fps
        start = time.monotonic()
        next_report = start + 1.0
        seq = 0
        try:
            while True:
                due = start + seq * period
                if due - start >= seconds:
                    break
                now = time.monotonic()
                if now < due:
                    time.sleep(due - now)
                elif now - due > period:
                    stats["late"] += 1  # the writes could not keep up with the frame rate
                captured = time.time()
                frame = grab_frame(rng, frame_size)
                labels = {"camera": camera, "seq": str(seq), "motion": motion.at(captured)}
                try:
                    db.write(bucket, entry, frame, ts=captured, labels=labels, content_type="image/jpeg")
                    stats["frames"] += 1
                    stats["bytes"] += len(frame)
                except TimestampExists:
                    stats["duplicates"] += 1  # same capture µs twice: never overwritten
                seq += 1
                if time.monotonic() >= next_report:
                    next_report += 1.0
                    report(db, bucket, stats)
        except KeyboardInterrupt:
            print("stopped", file=sys.stderr)
        report(db, bucket, stats)
    return stats


def report(db: Client, bucket: str, stats: Dict[str, int]) -> None:
    info = db.get_bucket(bucket).info
    used = f"{info.quota_used * 100:.0f}% of quota" if info.quota_used is not None else "no quota"
    print(f"{stats['frames']:6d} frames {stats['bytes'] / 1e6:8.1f} MB sent | bucket: "
          f"{info.record_count} records, {info.size / 1e6:.1f} MB ({used}), "
          f"{info.evicted_blocks} blocks evicted | late {stats['late']}", flush=True)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--url", default=os.environ.get("TSBLOB_URL", "http://127.0.0.1:8686"))
    p.add_argument("--token", default=os.environ.get("TSBLOB_TOKEN"), help="bearer token, if the server has tokens")
    p.add_argument("--bucket", default="cams")
    p.add_argument("--entry", default="front")
    p.add_argument("--camera", default="front", help="value of the `camera` label")
    p.add_argument("--fps", type=float, default=10.0)
    p.add_argument("--seconds", type=float, default=30.0, help="how long to log (Ctrl-C stops early)")
    p.add_argument("--frame-size", type=parse_size, default=parse_size("80KB"), help="mean frame size")
    p.add_argument("--quota", type=parse_size, default=parse_size("64MiB"),
                   help="FIFO quota of the bucket (bytes on disk) if it is created here")
    p.add_argument("--block-size", type=parse_size, default=None,
                   help="block size of a new bucket (the quota's precision); default: the server's")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args(argv)
    if a.fps <= 0 or a.seconds <= 0 or a.frame_size < 4:
        p.error("--fps and --seconds must be positive, --frame-size at least 4 bytes")
    try:
        stats = run(a.url, a.bucket, a.entry, a.fps, a.seconds, a.frame_size, a.quota,
                    a.block_size, a.camera, a.seed, a.token)
    except Unauthorized as e:
        # (the SDK's advice names its own `token=`: this script's is --token)
        print(f"error: {e}\n(give this script a token with --token or TSBLOB_TOKEN)", file=sys.stderr)
        return 1
    except TsblobError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0 if stats["frames"] > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
