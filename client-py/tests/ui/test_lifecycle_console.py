"""The bucket page's lifecycle rules (issue 28, item 3) in a real headless Chromium: a rule
added from the form, listed with what it removed, run now, removed after a confirmation; the
bucket's max age shown as the rule max_age."""

from __future__ import annotations

import time
import uuid

import pytest

import tsblob
from test_console import browser, page  # noqa: F401  (the browser fixtures)

pytestmark = pytest.mark.server

HOUR = 3_600_000_000


def test_bucket_page_adds_runs_and_removes_lifecycle_rules(server, page, client: tsblob.Client) -> None:  # noqa: F811
    name = f"ui-{uuid.uuid4().hex[:10]}"
    client.create_bucket(name, max_age="30d")
    old = int(time.time() * 1e6) - 2 * HOUR
    client.write(name, "cams/front", b"a", ts=old, labels={"kind": "raw"})
    client.write(name, "cams/front", b"b", ts=old + 1, labels={"kind": "jpeg"})
    client.write(name, "lidar", b"c", ts=old, labels={"kind": "raw"})
    page.goto(f"{server.url}/ui/#/b/{name}")
    page.wait_for_selector("#lifecycle-rules tr[data-rule='max_age']")
    page.fill("#lc-name", "raw")
    page.fill("#lc-older-than", "1h")
    page.fill("#lc-interval", "10m")
    page.fill("#lc-entries", "cams/*, !cams/rear")
    page.fill("#lc-when", '{"&kind": {"$eq": "raw"}}')
    page.select_option("#lc-mode", "disabled")
    page.click("#lc-save")
    row = page.wait_for_selector("#lifecycle-rules tr[data-rule='raw']")
    assert "cams/*, !cams/rear" in row.inner_text() and "10m" in row.inner_text()
    rule = client.get_lifecycle_rule(name, "raw")
    assert (rule.older_than, rule.interval, rule.mode) == (HOUR, 600_000_000, "disabled")
    assert rule.when == {"&kind": {"$eq": "raw"}}
    page.click("#lifecycle-rules tr[data-rule='raw'] .run-rule")
    assert "removed 1 records" in page.wait_for_selector("#lifecycle-status .notice").inner_text()
    assert client.get_entry(name, "cams/front").record_count == 1
    assert client.get_entry(name, "lidar").record_count == 1
    # A bad value is refused with the reason, before or by the server.
    page.fill("#lc-older-than", "soon")
    page.click("#lc-save")
    assert "not a duration" in page.wait_for_selector("#lifecycle-status .error").inner_text()
    page.fill("#lc-older-than", "1d")
    page.fill("#lc-when", "{nope")
    page.click("#lc-save")
    assert "not JSON" in page.wait_for_selector("#lifecycle-status .error").inner_text()
    # Removal asks once more.
    button = page.wait_for_selector("#lifecycle-rules tr[data-rule='raw'] .remove-rule")
    button.click()
    button.click()
    page.wait_for_selector("#lifecycle-rules tr[data-rule='raw']", state="detached")
    assert [r.name for r in client.lifecycle_rules(name)] == ["max_age"]
    client.remove_bucket(name)
    assert page.errors == []


def test_bucket_page_adds_and_runs_a_compress_rule(server, page, client: tsblob.Client) -> None:  # noqa: F811
    """The console showed no rule's action after compress rules came (issue 28): a compress
    rule made from the form is saved as one, listed as one, and its run says how many
    records it compressed and the bytes saved; the record reads back identical."""
    name = f"ui-{uuid.uuid4().hex[:10]}"
    client.create_bucket(name)
    old = int(time.time() * 1e6) - 2 * HOUR
    text = b"frame 0042: the same words again and again; " * 100
    client.write(name, "logs", text, ts=old, labels={"kind": "text"})
    page.goto(f"{server.url}/ui/#/b/{name}")
    page.wait_for_selector("#lifecycle-form")
    page.fill("#lc-name", "squeeze")
    page.fill("#lc-older-than", "1h")
    page.select_option("#lc-action", "compress")
    # Disabled: kept and run only by the button. Enabled, the retention thread's pass (every
    # second) could compress the record before the click, and the run then found nothing
    # left to compress (a CI failure: "squeeze: compressed 0 records").
    page.select_option("#lc-mode", "disabled")
    page.click("#lc-save")
    row = page.wait_for_selector("#lifecycle-rules tr[data-rule='squeeze']")
    assert "compress" in row.inner_text()
    assert client.get_lifecycle_rule(name, "squeeze").action == "compress"
    page.click("#lifecycle-rules tr[data-rule='squeeze'] .run-rule")
    notice = page.wait_for_selector("#lifecycle-status .notice").inner_text()
    assert "compressed 1 records" in notice and "saved" in notice, notice
    assert client.read(name, "logs", ts=old).data == text
    client.remove_bucket(name)
    assert page.errors == []
