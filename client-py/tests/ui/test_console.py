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
    page.goto(f"{server.url}/ui/#/replication")
    page.wait_for_selector("#task-form")
    page.goto(f"{server.url}/ui/#/tier")
    page.wait_for_selector("#tier-total")
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


def test_share_link_makes_a_link_that_downloads_the_record_without_a_token(server, page, camera, jpeg) -> None:
    bucket, entry, base = camera
    page.goto(entry_url(server, bucket, entry))
    page.click(f"#record-rows tr[data-ts='{base + 2_000_000}']")
    page.click("#share-link")
    link = page.wait_for_selector("#share-link-url").input_value()
    assert link.startswith(f"{server.url}/api/v1/links/front_{base + 2_000_000}.jpg?q="), link
    with urllib.request.urlopen(link, timeout=10) as resp:  # no token
        assert resp.read() == jpeg
        assert resp.headers["x-tsblob-ts"] == str(base + 2_000_000)
        assert "attachment" in resp.headers["content-disposition"]
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


def test_tokens_page_creates_limited_tokens_and_rotates_them(browser, auth_server) -> None:
    """Issue 28 in the console: a token with an expiry, a ttl and an IP allow-list, its
    limits listed; a bad network refused with the API's reason; rotation shows the new value
    once and the old one stops working."""
    admin = auth_server.client()
    name = f"ui-tok-{uuid.uuid4().hex[:6]}"
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    page = ctx.new_page()
    page.set_default_timeout(10_000)
    errors: List[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{auth_server.url}/ui/")
    page.fill("#token-input", auth_server.token)
    page.click("#login-form button[type=submit]")
    page.wait_for_selector("#nav a[href='#/tokens']")
    page.goto(f"{auth_server.url}/ui/#/tokens")
    page.wait_for_selector("#token-form")
    # A network that is not one: the API's 422 and its reason, nothing created.
    page.fill("#new-token-name", name)
    page.fill("#new-token-read", "cams")
    page.fill("#new-token-ips", "10.0.0.0/33")
    page.click("#token-form button[type=submit]")
    err = page.wait_for_selector("#token-created .error")
    assert "422" in err.inner_text() and "invalid_ip_allowlist" in err.inner_text()
    assert name not in [t.name for t in admin.list_tokens()]
    page.fill("#new-token-ips", "127.0.0.1, 10.0.0.0/8")
    page.fill("#new-token-expires", "30d")
    page.fill("#new-token-ttl", "12h")
    page.click("#token-form button[type=submit]")
    value = page.wait_for_selector("#token-value").inner_text()
    assert value.startswith("tsb_")
    t = next(t for t in admin.list_tokens() if t.name == name)
    assert (t.ttl, t.ip_allowlist) == (12 * 3600, ["127.0.0.1", "10.0.0.0/8"])
    assert t.expires_at is not None and 29 * 86400e6 < t.expires_at - time.time() * 1e6 < 31 * 86400e6
    row = page.wait_for_selector(f"#tokens tr[data-name='{name}'] td.limits")
    assert "ttl 12h" in row.inner_text() and "10.0.0.0/8" in row.inner_text()
    # Rotate (asks once more): the new value is shown, the old one no longer works.
    page.click(f"button[data-rotate='{name}']")
    page.click(f"button[data-rotate='{name}']")
    page.wait_for_function("(old) => { const v = document.querySelector('#token-value'); "
                           "return v && v.textContent !== old; }", arg=value)
    rotated = page.inner_text("#token-value")
    assert "rotated" in page.inner_text("#token-created")
    with tsblob.Client(auth_server.url, token=value) as old:
        with pytest.raises(tsblob.Unauthorized):
            old.me()
    with tsblob.Client(auth_server.url, token=rotated) as new:
        assert new.me().name == name
    admin.remove_token(name)
    assert errors == []
    ctx.close()
    admin.close()


def test_buckets_and_entries_are_created_and_removed_after_a_confirmation(server, page, client, jpeg) -> None:
    name = f"ui-{uuid.uuid4().hex[:10]}"
    page.goto(f"{server.url}/ui/")
    page.fill("#new-bucket-name", name)
    page.select_option("#new-bucket-quota-type", "fifo")
    page.fill("#new-bucket-quota-size", "24 MiB")
    page.click("#new-bucket-create")
    page.wait_for_selector("#settings-form")
    settings = client.get_bucket(name).settings
    assert (settings.quota_type, settings.quota_size) == ("fifo", 24 << 20)
    assert page.input_value("#set-quota-size") == "24 MiB"

    # A new entry: its first record, from a file.
    page.fill("#new-entry-name", "robot1/front")
    page.set_input_files("#new-entry-file", files=[{"name": "f.jpg", "mimeType": "image/jpeg", "buffer": jpeg}])
    page.click("#new-entry-create")
    page.wait_for_selector("#record-rows tr")
    rec = client.read(name, "robot1/front")
    assert rec.data == jpeg and rec.content_type == "image/jpeg"

    # Removing an entry asks once more: one click removes nothing.
    client.write(name, "robot1/rear", b"x")
    page.goto(f"{server.url}/ui/#/b/{name}")
    button = page.wait_for_selector("#entries tr[data-entry='robot1/rear'] .remove-entry")
    button.click()
    page.wait_for_timeout(300)
    assert [e.name for e in client.get_bucket(name).entries] == ["robot1/front", "robot1/rear"]
    assert "Confirm" in button.inner_text()
    button.click()
    page.wait_for_function("() => !document.querySelector(\"#entries tr[data-entry='robot1/rear']\")")
    assert [e.name for e in client.get_bucket(name).entries] == ["robot1/front"]

    # The bucket likewise.
    page.click("#remove-bucket")
    page.wait_for_timeout(300)
    assert client.get_bucket(name).name == name
    page.click("#remove-bucket")
    page.wait_for_selector("#new-bucket-form")
    with pytest.raises(tsblob.NotFound):
        client.get_bucket(name)
    assert page.errors == []


def test_settings_take_units_and_every_setting(server, page, client) -> None:
    name = f"ui-{uuid.uuid4().hex[:10]}"
    client.create_bucket(name)
    page.goto(f"{server.url}/ui/#/b/{name}")
    page.wait_for_selector("#settings-form")
    page.select_option("#set-quota-type", "hard")
    page.fill("#set-quota-size", "1.5 GiB")
    page.fill("#set-block-size", "24 MiB")
    page.fill("#set-block-records", "5000")
    page.fill("#set-compression", "zstd:5")
    page.fill("#set-max-age", "30d")
    page.fill("#set-tier-local-max", "10 GB")
    page.fill("#set-tier-after", "12h")
    page.click("#settings-save")
    page.wait_for_selector("#settings-status .notice")
    raw = json.load(urllib.request.urlopen(f"{server.url}/api/v1/b/{name}"))["settings"]
    assert raw == {"quota_type": "hard", "quota_size": 1536 << 20, "max_block_size": 24 << 20,
                   "max_block_records": 5000, "compression": "zstd:5", "max_age": 30 * 86400 * 10**6,
                   "tier_local_max": 10 * 10**9, "tier_after": 12 * 3600 * 10**6}
    # Shown back in units after a reload.
    page.reload()
    page.wait_for_selector("#settings-form")
    assert [page.input_value(f"#set-{k}") for k in ["quota-size", "block-size", "max-age", "tier-after"]] == \
        ["1536 MiB", "24 MiB", "30d", "12h"]
    # An empty field turns retention and tiering off; a bad unit is refused before sending.
    page.fill("#set-max-age", "")
    page.fill("#set-tier-local-max", "")
    page.fill("#set-tier-after", "")
    page.click("#settings-save")
    page.wait_for_selector("#settings-status .notice")
    raw = json.load(urllib.request.urlopen(f"{server.url}/api/v1/b/{name}"))["settings"]
    assert (raw["max_age"], raw["tier_local_max"], raw["tier_after"]) == (None, None, None)
    page.fill("#set-quota-size", "12 parsecs")
    page.click("#settings-save")
    assert "not a size" in page.wait_for_selector("#settings-status .error").inner_text()
    assert client.get_bucket(name).settings.quota_size == 1536 << 20
    client.remove_bucket(name)
    assert page.errors == []


def test_replication_page_sets_prefix_exclusions_api_compression_and_disables(server, page, client) -> None:
    src = f"ui-{uuid.uuid4().hex[:10]}"
    task = f"t-{uuid.uuid4().hex[:6]}"
    client.create_bucket(src)
    page.goto(f"{server.url}/ui/#/replication")
    page.wait_for_selector("#task-form")
    page.fill("#task-name", task)
    page.fill("#task-src", src)
    page.fill("#task-dst-url", "http://127.0.0.1:9")
    page.fill("#task-dst-bucket", "dst")
    page.fill("#task-entries", "cam*, !cam-debug")
    page.fill("#task-dst-prefix", "robot-1")
    page.select_option("#task-dst-api", "reductstore")
    page.select_option("#task-compression", "zstd")
    page.select_option("#task-mode", "paused")
    page.click("#task-create")
    row = f"#replications tr[data-task='{task}']"
    page.wait_for_selector(f"{row} td.phase.paused")
    s = client.get_replication(task)["settings"]
    assert (s["entries"], s["dst_prefix"], s["dst_api"], s["compression"], s["mode"]) == (
        ["cam*", "!cam-debug"], "robot-1", "reductstore", "zstd", "paused")
    text = page.inner_text(row)
    assert "robot-1" in text and "ReductStore" in text
    # Disable keeps the other settings (a pause once dropped them).
    page.click(f"{row} button.disable")
    page.wait_for_selector(f"{row} td.phase.disabled")
    s = client.get_replication(task)["settings"]
    assert (s["mode"], s["dst_prefix"], s["dst_api"], s["compression"]) == ("disabled", "robot-1", "reductstore", "zstd")
    page.click(f"{row} button.resume")
    page.wait_for_selector(f"{row} button.pause")
    assert client.get_replication(task)["settings"]["dst_prefix"] == "robot-1"
    client.remove_replication(task)
    client.remove_bucket(src)
    assert page.errors == []


def test_replication_page_shows_tasks_and_creates_pauses_resumes_and_removes_them(server, page, client) -> None:
    src = f"ui-{uuid.uuid4().hex[:10]}"
    task = f"t-{uuid.uuid4().hex[:6]}"
    client.create_bucket(src)
    client.write(src, "cam", b"x" * 100)
    page.goto(f"{server.url}/ui/")
    page.click("#nav a[href='#/replication']")
    page.wait_for_selector("#task-form")
    # A destination nobody listens on: the task backs off and shows its last error.
    page.fill("#task-name", task)
    page.fill("#task-src", src)
    page.fill("#task-dst-url", "http://127.0.0.1:9")
    page.fill("#task-dst-bucket", "dst")
    page.fill("#task-entries", "cam")
    page.click("#task-create")
    row = f"#replications tr[data-task='{task}']"
    page.wait_for_selector(row)
    client.write(src, "cam", b"y" * 100)
    page.wait_for_function(f"() => (document.querySelector(\"{row} .last-error\")?.textContent || '').length > 5",
                           timeout=15_000)
    text = page.inner_text(row)
    assert "127.0.0.1:9" in text and src in text
    assert page.inner_text(f"{row} .lag") != "–"
    page.click(f"{row} button.pause")
    page.wait_for_selector(f"{row} td.phase.paused")
    assert client.get_replication(task)["settings"]["mode"] == "paused"
    page.click(f"{row} button.resume")
    page.wait_for_selector(f"{row} button.pause")
    assert client.get_replication(task)["settings"]["mode"] == "enabled"
    page.click(f"{row} .remove-task")
    page.wait_for_timeout(300)
    assert client.get_replication(task)["name"] == task
    page.click(f"{row} .remove-task")
    page.wait_for_function(f"() => !document.querySelector(\"{row}\")")
    assert task not in [t["name"] for t in client.list_replications()]
    client.remove_bucket(src)
    assert page.errors == []


def test_tier_page_shows_status_errors_and_tiered_buckets(browser, server, tmp_path, monkeypatch) -> None:
    # An object store nobody listens on: uploads queue and the page shows the store's error.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "ui-test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "ui-test")
    srv = type(server)(tmp_path / "tier", ["--tier-url", "s3://tsblob-ui/x", "--tier-endpoint", "http://127.0.0.1:9"]).start()
    try:
        with srv.client() as db:
            db.create_bucket("cold", max_block_size=4096, tier_local_max=0)
            for i in range(6):
                db.write("cold", "e", os.urandom(3000))
        ctx = browser.new_context()
        page = ctx.new_page()
        page.set_default_timeout(10_000)
        page.goto(f"{srv.url}/ui/#/tier")
        page.wait_for_function("() => (document.querySelector('#tier-status .v')?.textContent) === 'unavailable'",
                               timeout=15_000)
        assert "Connection refused" in page.inner_text("#tier-error")
        assert int(page.inner_text("#tier-queue .v")) > 0
        assert "tsblob_tier_available" in page.inner_text("#tier-counters")
        row = page.inner_text("#tier-bucket-rows tr[data-bucket='cold']")
        assert "0 B" in row
        ctx.close()
    finally:
        srv.stop()


def test_tier_page_says_when_there_is_no_tier(server, page) -> None:
    page.goto(f"{server.url}/ui/#/tier")
    assert "--tier-url" in page.wait_for_selector("#tier-off").inner_text()
    page.wait_for_selector("#tier-total")
    assert page.errors == []


def test_phone_layout_keeps_labels_and_puts_the_preview_under_the_selection(browser, server, camera) -> None:
    bucket, entry, base = camera
    ctx = browser.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True)
    page = ctx.new_page()
    page.set_default_timeout(10_000)
    page.goto(entry_url(server, bucket, entry))
    tr = page.wait_for_selector(f"#record-rows tr[data-ts='{base + 20_000_000}']")
    labels = page.query_selector(f"#record-rows tr[data-ts='{base + 20_000_000}'] td.labels")
    assert labels.is_visible() and "camera=front" in labels.inner_text()
    # Each cell names its column.
    assert page.evaluate("(td) => getComputedStyle(td, '::before').content", labels) == '"labels"'
    tr.click()
    page.wait_for_function("() => { const i = document.querySelector('#preview-image');"
                           " return i && i.complete && i.naturalWidth > 0; }")
    gap = page.evaluate("""() => document.querySelector('#preview-image').getBoundingClientRect().top
                           - document.querySelector('#record-rows tr.sel').getBoundingClientRect().bottom""")
    assert 0 <= gap < 250, gap
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    ctx.close()


def test_arrow_keys_step_through_the_frames(server, page, camera) -> None:
    bucket, entry, base = camera
    page.goto(entry_url(server, bucket, entry))
    page.click(f"#record-rows tr[data-ts='{base + 4_000_000}']")
    page.wait_for_selector("#preview-image")
    sel = "() => document.querySelector('#record-rows tr.sel')?.dataset.ts"
    page.keyboard.press("ArrowDown")
    page.wait_for_function(f"() => ({sel})() === '{base + 6_000_000}'")
    page.keyboard.press("ArrowRight")
    page.wait_for_function(f"() => ({sel})() === '{base + 8_000_000}'")
    page.keyboard.press("ArrowUp")
    page.keyboard.press("ArrowLeft")
    page.wait_for_function(f"() => ({sel})() === '{base + 4_000_000}'")
    page.wait_for_function(f"() => (document.querySelector('#preview dd.mono')?.textContent || '').includes('{base + 4_000_000}')")
    # Not while typing in a field.
    page.click("#filter-labels")
    page.keyboard.press("ArrowDown")
    page.wait_for_timeout(200)
    assert page.evaluate(sel) == str(base + 4_000_000)
    assert page.errors == []


def test_the_timeline_follows_the_live_view(server, page, client, camera, jpeg) -> None:
    bucket, entry, base = camera
    page.goto(entry_url(server, bucket, entry))
    page.wait_for_function("() => (document.querySelector('#window')?.textContent || '').includes('32 records')")
    page.click("#live")
    page.wait_for_selector("#live.on")
    ts = client.write(bucket, entry, jpeg, content_type="image/jpeg", labels={"camera": "live"})
    page.wait_for_function(f"() => Number(document.querySelector('#timeline').dataset.stop) > {ts}", timeout=3000)
    # The histogram of the followed window holds the new record.
    page.wait_for_function(f"() => Number(document.querySelector('#timeline').dataset.start) <= {ts}"
                           " && /· [1-9][0-9,]* records/.test(document.querySelector('#window').textContent)",
                           timeout=3000)
    page.click("#live")
    assert page.errors == []


@pytest.mark.skipif(not os.environ.get("TSBLOB_SCREENSHOTS"),
                    reason="set TSBLOB_SCREENSHOTS=<folder> (docs/console) to take the documentation's screenshots")
def test_screenshots(browser, server, client, jpeg, tmp_path, monkeypatch) -> None:
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
        page.screenshot(path=str(out / "bucket.png"), full_page=True)
        client.put_replication("to-cloud", "logs", "http://127.0.0.1:9", "edge-1", entries=["robot1/*"])
        page.goto(f"{server.url}/ui/#/replication")
        page.wait_for_function("() => (document.querySelector('#replications .last-error')?.textContent || '').length > 5",
                               timeout=15_000)
        page.screenshot(path=str(out / "replication.png"), full_page=True)
        client.remove_replication("to-cloud")
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
        row = page.wait_for_selector(f"#record-rows tr[data-ts='{base + 50_000_000}']")
        row.click()
        page.wait_for_function("() => { const i = document.querySelector('#preview-image');"
                               " return i && i.complete && i.naturalWidth > 0; }")
        row.scroll_into_view_if_needed()
        page.evaluate("() => document.querySelector('#record-rows tr.sel').scrollIntoView({block: 'start'})")
        page.wait_for_timeout(300)
        page.screenshot(path=str(out / "entry-phone.png"))
        phone.close()

        # The tier page of a server whose object store is down (nobody listens on port 9).
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "ui-test")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "ui-test")
        tiered = type(server)(tmp_path / "tier", ["--tier-url", "s3://tsblob-ui/x",
                                                  "--tier-endpoint", "http://127.0.0.1:9"]).start()
        try:
            with tiered.client() as db:
                db.create_bucket("cams", max_block_size=4096, tier_local_max="1MiB", tier_after="1d")
                db.write_batch("cams", "robot1/front", [(base + i * 1_000_000, jpeg, {}, "image/jpeg") for i in range(200)])
            ctx = browser.new_context(viewport={"width": 1280, "height": 800})
            page = ctx.new_page()
            page.goto(f"{tiered.url}/ui/#/tier")
            page.wait_for_selector("#tier-error", timeout=15_000)
            page.screenshot(path=str(out / "tier.png"), full_page=True)
            ctx.close()
        finally:
            tiered.stop()
    finally:
        stop.set()
        t.join()


def test_a_huge_record_is_not_held_whole_in_the_browser(server, page, client) -> None:
    """Bug "console memory": the preview of an `image/*` record and every download fetched
    the whole record into the page's memory, so a writer's multi-gigabyte image took the
    memory of whoever opened it. An image over 32 MiB is not previewed (no request for its
    payload), and a download over 64 MiB goes through a query link the browser saves as it
    arrives; smaller ones are as before."""
    name = f"ui-{uuid.uuid4().hex[:10]}"
    client.create_bucket(name)
    base = 1_767_225_600_000_000
    big = bytes(range(256)) * ((65 << 20) // 256)
    client.write(name, "cam", big, ts=base, content_type="image/jpeg")
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(entry_url(server, name, "cam"))
    page.click(f"#record-rows tr[data-ts='{base}']")
    notice = page.wait_for_selector("#preview-too-large").inner_text()
    assert "larger than the 32.0 MiB" in notice, notice
    assert not any(f"ts={base}" in u for u in requests), requests
    with page.expect_download(timeout=60_000) as d:
        page.click("#download")
    got = d.value
    assert "/api/v1/links/" in got.url, got.url
    assert Path(got.path()).stat().st_size == len(big)
    assert not any(f"cam?ts={base}" in u for u in requests), requests
    assert page.errors == []
    client.remove_bucket(name)


def test_a_link_with_dot_dot_in_a_name_acted_on_another_bucket(server, page, client) -> None:
    """Bug (hostile probe of 2026-11-28): `#/b/scratch/e/x/..%2F..%2Fprod/cam` showed
    "scratch" in its heading while every request (its Delete button included) went to
    `prod/cam`: the browser resolved the `..` in the request's URL. Such a name is refused
    with a message, and nothing is requested of the other bucket."""
    prod, scratch = f"ui-{uuid.uuid4().hex[:10]}", f"ui-{uuid.uuid4().hex[:10]}"
    for name in (prod, scratch):
        client.create_bucket(name)
    client.write(prod, "cam", b"keep", ts=1)
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    for link in (f"#/b/{scratch}/e/x/..%2F..%2F{prod}/cam", f"#/b/{scratch}/e/..%2F{prod}%2Fcam",
                 "#/b/..%2Fb", "#/b/%E0%A4%A"):
        page.goto("about:blank")  # (a fresh load each time: no error box of the last link)
        page.goto(f"{server.url}/ui/{link}")
        text = page.wait_for_selector(".error").inner_text()
        assert "not a valid name" in text, (link, text)
    assert not any(f"/b/{prod}" in u for u in requests), requests
    assert client.read(prod, "cam", ts=1).data == b"keep"
    assert page.errors == []
    for name in (prod, scratch):
        client.remove_bucket(name)


def test_a_download_is_saved_with_a_writer_chosen_extension(server, page, client, jpeg) -> None:
    """Bug (hostile probe of 2026-11-28): the Download button named the file after the
    record's content type, so a writer chose `.html`, `.svg`, `.exe` or `.hta` for the
    operator's downloads folder (an `.html` opened from there runs as a local file). Only
    passive types name their extension; any other type saves as `.bin`, as query links do."""
    name = f"ui-{uuid.uuid4().hex[:10]}"
    client.create_bucket(name)
    cases = [("text/html", "bin"), ("image/svg+xml", "bin"), ("application/hta", "bin"),
             ("application/x.pdf.exe", "bin"), ("image/jpeg", "jpg"), ("application/json", "json"),
             ("text/plain; charset=utf-8", "txt")]
    for ts, (ct, _) in enumerate(cases, start=1):
        client.write(name, "cam", jpeg if ct == "image/jpeg" else b"<b>x</b>", ts=ts, content_type=ct)
    page.goto(entry_url(server, name, "cam"))
    for ts, (ct, ext) in enumerate(cases, start=1):
        page.click(f"#record-rows tr[data-ts='{ts}']")
        page.wait_for_selector("#download")
        with page.expect_download() as d:
            page.click("#download")
        assert d.value.suggested_filename == f"cam-{ts}.{ext}", (ct, d.value.suggested_filename)
    assert page.errors == []
    client.remove_bucket(name)


def test_an_image_preview_of_a_listed_type_ran_as_a_page_of_the_console(server, page, client) -> None:
    """Bug (browser probe of 2026-11-29): a record of type `image/png;,text/html` was
    previewed as an image, but `Response.blob()` typed its blob by the last type of the list,
    `text/html`: opened in a tab, the blob ran as a page of the console's origin (and loaded
    a script record by `<script src>`). The preview's blob now has the image type the console
    matched, and the API refuses to be loaded as a script (`Sec-Fetch-Dest: script`)."""
    name = f"ui-{uuid.uuid4().hex[:10]}"
    client.create_bucket(name)
    client.write(name, "cam", b"<script src='/api/v1/b/%s/js?ts=2'></script>" % name.encode(),
                 ts=1, content_type="image/png;,text/html")
    client.write(name, "js", b"window.ran = true;", ts=2, content_type="text/javascript")
    # The types of the blobs the console makes URLs of (the page's CSP keeps a test from
    # fetching a blob: URL back).
    page.add_init_script("""(() => { const made = URL.createObjectURL; window.blobTypes = [];
        URL.createObjectURL = (b) => { window.blobTypes.push(b.type); return made(b); }; })()""")
    page.goto(entry_url(server, name, "cam"))
    page.click("#record-rows tr[data-ts='1']")
    page.wait_for_selector("#preview-image")
    assert page.evaluate("window.blobTypes") == ["image/png"]
    # A page of the console's origin that loads a record as a script: refused, not run.
    ran = page.evaluate(f"""() => new Promise((done) => {{
        const s = document.createElement('script');
        s.src = '/api/v1/b/{name}/js?ts=2';
        s.onload = () => done(window.ran === true);
        s.onerror = () => done(false);
        document.head.append(s); }})""")
    assert ran is False
    client.remove_bucket(name)


def test_a_bidi_override_in_a_label_reordered_the_labels_after_it(server, page, client) -> None:
    """Bug (browser probe of 2026-11-29): a right-to-left override in one label value made
    the labels shown after it read reversed (`status=…` could read "approved"); invisible
    and direction characters are shown as `\\u{XXXX}`, and a row shows at most 200
    characters of a value."""
    name = f"ui-{uuid.uuid4().hex[:10]}"
    client.create_bucket(name)
    client.write(name, "cam", b"x", ts=1, labels={"a": "x\u202edevorppa", "b": "v" * 3000})
    page.goto(entry_url(server, name, "cam"))
    row = page.wait_for_selector("#record-rows tr[data-ts='1']")
    text = row.inner_text()
    assert "\u202e" not in text and "\\u{202E}" in text, text
    assert len(text) < 1000, len(text)
    assert page.errors == []
    client.remove_bucket(name)
