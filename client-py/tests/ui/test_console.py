"""The web console (/ui/) in a real headless Chromium (Debian's, driven by Playwright for
Python) against a real ``tsblob serve`` (the ``server`` fixtures of ``tests/conftest.py``).

``scripts/install-browser.sh`` installs Chromium (``/usr/bin/chromium``, or
``$TSBLOB_CHROMIUM``) and ``scripts/test.sh`` installs ``playwright`` into its venv and sets
``TSBLOB_UI_TESTS=required``: then a missing browser or package fails the run instead of
skipping these tests (a developer without them gets a skip with the reason).
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Iterator, List

import pytest

import tsblob

pytestmark = pytest.mark.server

CHROMIUM = os.environ.get("TSBLOB_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
FIXTURES = Path(__file__).resolve().parent


def _missing(reason: str) -> None:
    if os.environ.get("TSBLOB_UI_TESTS") == "required":
        pytest.fail(f"{reason} (TSBLOB_UI_TESTS=required: scripts/install-browser.sh installs it)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    # Module scope: sync Playwright runs an event loop in this thread while it is started,
    # which the SDK's asyncio tests must not meet.
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright is not installed (pip install playwright)")
    if not os.path.exists(CHROMIUM):
        _missing(f"no Chromium at {CHROMIUM}")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


class Errors(List[str]):
    """Console errors and uncaught exceptions of a page."""


@pytest.fixture
def page(browser) -> Iterator[object]:
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = ctx.new_page()
    pg.errors = Errors()
    pg.on("console", lambda m: pg.errors.append(f"console: {m.text}") if m.type == "error" else None)
    pg.on("pageerror", lambda e: pg.errors.append(f"pageerror: {e}"))
    pg.set_default_timeout(10_000)
    yield pg
    ctx.close()


@pytest.fixture(scope="session")
def jpeg() -> bytes:
    """A 320×240 JPEG."""
    return (FIXTURES / "frame.jpg").read_bytes()


def entry_url(server, bucket: str, entry: str) -> str:
    return f"{server.url}/ui/#/b/{bucket}/e/{entry}"


@pytest.fixture
def camera(client: tsblob.Client, jpeg: bytes):
    """A FIFO bucket with an entry of JPEGs, a JSON record and a binary one."""
    name = f"ui-{uuid.uuid4().hex[:10]}"
    client.create_bucket(name, quota_type="fifo", quota_size=10 << 20)
    base = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z
    for i in range(30):
        client.write(name, "robot1/front", jpeg, ts=base + i * 2_000_000, content_type="image/jpeg",
                     labels={"camera": "front", "seq": str(i)})
    client.write(name, "robot1/front", json.dumps({"speed": 1.5, "ok": True}).encode(),
                 ts=base + 61_000_000, content_type="application/json", labels={"kind": "status"})
    client.write(name, "robot1/front", bytes(range(256)) * 4, ts=base + 62_000_000)
    yield name, "robot1/front", base
    client.remove_bucket(name)


def test_every_page_loads_without_console_errors(server, page, camera) -> None:
    bucket, entry, _ = camera
    page.goto(f"{server.url}/ui/")
    page.wait_for_selector(f"#buckets a:text-is('{bucket}')")
    page.wait_for_selector("#stat-free")
    page.click(f"#buckets a:text-is('{bucket}')")
    page.wait_for_selector("#entries a:text-is('robot1/front')")
    page.wait_for_selector("#settings-form")
    page.click("#entries a:text-is('robot1/front')")
    page.wait_for_selector("#record-rows tr")
    page.wait_for_function("() => (document.querySelector('#window')?.textContent || '').includes('32 records')")
    page.goto(f"{server.url}/ui/#/tokens")
    page.wait_for_selector("#token-form")
    # The write rate needs two samples of /metrics.
    page.goto(f"{server.url}/ui/")
    page.wait_for_function("() => /[0-9]/.test(document.querySelector('#stat-write-rate .v')?.textContent)",
                           timeout=6000)
    assert page.errors == []


def test_console_responses_carry_a_csp_and_the_root_links_to_it(server) -> None:
    with urllib.request.urlopen(server.url + "/ui/") as r:
        csp = r.headers["Content-Security-Policy"]
        assert "default-src 'self'" in csp and "script-src 'self'" in csp
        assert "unsafe-inline" not in csp
        assert b'src="app.js"' in r.read()
    with urllib.request.urlopen(server.url + "/") as r:
        assert b'href="/ui/"' in r.read()


def test_a_jpeg_is_listed_and_previewed_at_its_natural_size(server, page, camera) -> None:
    bucket, entry, base = camera
    page.goto(entry_url(server, bucket, entry))
    row = page.wait_for_selector(f"#record-rows tr[data-ts='{base}']")
    assert "image/jpeg" in row.inner_text() and "camera=front" in row.inner_text()
    row.click()
    page.wait_for_function("() => { const i = document.querySelector('#preview-image');"
                           " return i && i.complete && i.naturalWidth > 0; }")
    size = page.evaluate("(() => { const i = document.querySelector('#preview-image');"
                         " const r = i.getBoundingClientRect();"
                         " return [i.naturalWidth, i.naturalHeight, r.width, r.height]; })()")
    assert size == [320, 240, 320, 240]
    # JSON is pretty-printed, anything else is a hex dump.
    page.click(f"#record-rows tr[data-ts='{base + 61_000_000}']")
    assert '"speed": 1.5' in page.wait_for_selector("#preview-text").inner_text()
    page.click(f"#record-rows tr[data-ts='{base + 62_000_000}']")
    assert page.wait_for_selector("#preview-hex").inner_text().startswith("00000000  00 01 02 03")
    assert page.errors == []


def test_the_timeline_zooms_into_a_dragged_range(server, page, camera) -> None:
    bucket, entry, _ = camera
    page.goto(entry_url(server, bucket, entry))
    page.wait_for_function("() => (document.querySelector('#window')?.textContent || '').includes('32 records')")
    box = page.query_selector("#timeline").bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + 2, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.25, y, steps=5)
    page.mouse.up()
    # A quarter of the window (~63 s) holds the first ~8 JPEGs, 2 s apart.
    page.wait_for_function("() => !(document.querySelector('#window')?.textContent || '').includes('32 records')")
    page.wait_for_function("() => document.querySelectorAll('#record-rows tr').length <= 10")
    n = page.eval_on_selector_all("#record-rows tr", "rows => rows.length")
    assert 5 <= n <= 10
    assert page.errors == []


def test_live_view_shows_a_new_record_within_a_second(server, page, client, camera, jpeg) -> None:
    bucket, entry, base = camera
    page.goto(entry_url(server, bucket, entry))
    page.wait_for_selector("#record-rows tr")
    page.click("#live")
    page.wait_for_selector("#live.on")
    ts = client.write(bucket, entry, jpeg, content_type="image/jpeg", labels={"camera": "live"})
    t0 = time.monotonic()
    page.wait_for_selector(f"#record-rows tr[data-ts='{ts}']", timeout=1000)
    assert time.monotonic() - t0 < 1.0
    # ... and shows the newest image.
    page.wait_for_function(f"() => (document.querySelector('#preview dd.mono')?.textContent || '').includes('{ts}')",
                           timeout=2000)
    page.click("#live")
    assert page.errors == []


def test_phone_width_has_no_horizontal_scroll(browser, server, camera) -> None:
    bucket, entry, _ = camera
    ctx = browser.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True)
    page = ctx.new_page()
    for url in [f"{server.url}/ui/", f"{server.url}/ui/#/b/{bucket}", entry_url(server, bucket, entry)]:
        page.goto(url)
        page.wait_for_selector("main .card")
        page.wait_for_timeout(300)
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"), url
    ctx.close()


def test_tokens_are_asked_for_and_permissions_hold(browser, auth_server) -> None:
    admin = auth_server.client()
    bucket = f"ui-{uuid.uuid4().hex[:10]}"
    admin.create_bucket(bucket)
    ts = admin.write(bucket, "cam", b"keep me", content_type="text/plain")
    reader = admin.create_token(f"reader-{uuid.uuid4().hex[:6]}", read=[bucket])

    ctx = browser.new_context()
    page = ctx.new_page()
    page.set_default_timeout(10_000)
    # The assets are public; the console asks for a token before showing anything.
    page.goto(f"{auth_server.url}/ui/")
    page.wait_for_selector("#login-form")
    page.fill("#token-input", "tsb_wrong")
    page.click("#login-form button[type=submit]")
    err = page.wait_for_selector("#login-form .error")
    assert "401" in err.inner_text() and "not valid" in err.inner_text()
    assert page.evaluate("sessionStorage.getItem('tsblob.token')") is None

    page.fill("#token-input", reader)
    page.click("#login-form button[type=submit]")
    page.wait_for_selector(f"#buckets a:text-is('{bucket}')")
    assert page.evaluate("sessionStorage.getItem('tsblob.token')") == reader
    assert ctx.cookies() == [], "the token must not be kept in a cookie"
    assert page.query_selector("#nav a[href='#/tokens']") is None  # no admin pages for a reader

    # A read-only token: the delete control shows the API's 403, and the record stays.
    page.goto(entry_url(auth_server, bucket, "cam"))
    page.click(f"#record-rows tr[data-ts='{ts}']")
    page.wait_for_selector("#preview-text")
    page.click("#delete-record")
    page.click("#delete-record")
    err = page.wait_for_selector("#preview-status .error")
    assert "403" in err.inner_text() and "forbidden" in err.inner_text()
    assert admin.read(bucket, "cam", ts).data == b"keep me"

    # Signing out forgets the token.
    page.click("#sign-out")
    page.wait_for_selector("#login-form")
    assert page.evaluate("sessionStorage.getItem('tsblob.token')") is None
    ctx.close()
    admin.remove_bucket(bucket)
    admin.close()


@pytest.mark.skipif(not os.environ.get("TSBLOB_SCREENSHOTS"),
                    reason="set TSBLOB_SCREENSHOTS=<folder> (docs/console) to take the documentation's screenshots")
def test_screenshots(browser, server, client, jpeg) -> None:
    """The screenshots of docs/console/: TSBLOB_SCREENSHOTS=docs/console pytest -k screenshots."""
    import threading

    out = Path(os.environ["TSBLOB_SCREENSHOTS"]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    for name in ["cams", "imu", "logs"]:
        try:
            client.remove_bucket(name)
        except tsblob.NotFound:
            pass
    client.create_bucket("cams", quota_type="fifo", quota_size=4 << 20)
    client.create_bucket("imu", quota_type="hard", quota_size=64 << 20, compression="zstd")
    client.create_bucket("logs")
    base = 1_767_225_600_000_000
    recs = []
    for i in range(240):  # a frame every 2.5 s for 10 min, with a burst in minute 6
        recs.append((base + i * 2_500_000, jpeg, {"camera": "front", "shift": "day"}, "image/jpeg"))
    for i in range(160):
        recs.append((base + 360_000_000 + i * 300_000 + 1, jpeg, {"camera": "front", "event": "motion"}, "image/jpeg"))
    client.write_batch("cams", "robot1/front", sorted(recs))
    client.write_batch("imu", "robot1/accel", [(base + i * 10_000, bytes(48), {"axis": "xyz"}) for i in range(5000)])
    client.write("logs", "robot1/events", json.dumps({"event": "boot", "fw": "1.4.2"}).encode(), ts=base,
                 content_type="application/json")
    stop = threading.Event()

    def writer() -> None:
        with server.client() as w:
            while not stop.is_set():
                w.write("logs", "robot1/heartbeat", b'{"ok": true}', content_type="application/json")
                time.sleep(0.05)

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    try:
        ctx = browser.new_context(viewport={"width": 1280, "height": 800})
        page = ctx.new_page()
        page.goto(f"{server.url}/ui/")
        page.wait_for_function("() => /[0-9]/.test(document.querySelector('#stat-write-rate .v')?.textContent)",
                               timeout=8000)
        page.screenshot(path=str(out / "overview.png"))
        page.goto(f"{server.url}/ui/#/b/cams")
        page.wait_for_selector("#entries")
        page.screenshot(path=str(out / "bucket.png"))
        page.goto(entry_url(server, "cams", "robot1/front"))
        page.wait_for_selector("#record-rows tr")
        page.click(f"#record-rows tr[data-ts='{base + 50_000_000}']")
        page.wait_for_function("() => { const i = document.querySelector('#preview-image');"
                               " return i && i.complete && i.naturalWidth > 0; }")
        page.screenshot(path=str(out / "entry.png"), full_page=True)
        ctx.close()

        phone = browser.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True)
        page = phone.new_page()
        page.goto(entry_url(server, "cams", "robot1/front"))
        page.wait_for_selector("#record-rows tr")
        page.click(f"#record-rows tr[data-ts='{base + 50_000_000}']")
        page.wait_for_selector("#preview-image")
        page.evaluate("() => window.scrollTo(0, 0)")
        page.wait_for_timeout(300)
        page.screenshot(path=str(out / "entry-phone.png"))
        phone.close()
    finally:
        stop.set()
        t.join()
