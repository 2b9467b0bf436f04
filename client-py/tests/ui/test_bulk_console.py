"""The entry page's Bulk edit card (issue 28) in headless Chromium: the labels of the records
of the window that match a `when` condition, then of the records ticked in the list, are
changed, and ticked records are deleted; each button asks once more (nothing is sent on the
first click) and the card shows how many records changed. The fixtures are the console's."""

from __future__ import annotations

import uuid
from typing import Dict

import tsblob
from test_console import browser, entry_url, page  # noqa: F401  (pytest fixtures)

import pytest

pytestmark = pytest.mark.server

BASE = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z


def _labels(client: tsblob.Client, bucket: str) -> Dict[int, Dict[str, str]]:
    return {r.ts: dict(r.labels) for r in client.query(bucket, "cam")}


def _confirm(page, button: str) -> None:  # noqa: F811
    """Clicks twice: the first click only arms the button."""
    page.click(button)
    assert page.inner_text(button).startswith("Confirm")
    page.click(button)


def test_bulk_label_updates_and_removal_from_the_entry_page(server, page, client: tsblob.Client) -> None:  # noqa: F811
    bucket = f"ui-{uuid.uuid4().hex[:10]}"
    client.create_bucket(bucket)
    for i in range(10):
        client.write(bucket, "cam", b"r%d" % i, ts=BASE + i * 1_000_000,
                     labels={"n": str(i), "odd": str(i % 2)})
    page.goto(entry_url(server, bucket, "cam"))
    page.wait_for_selector(f"#record-rows tr[data-ts='{BASE + 9_000_000}']")

    # The window and a condition: the odd records are marked; nothing before the confirmation.
    page.fill("#bulk-labels", "reviewed=yes")
    page.fill("#bulk-when", '{"&odd": {"$eq": 1}}')
    page.click("#bulk-update-where")
    assert page.inner_text("#bulk-update-where").startswith("Confirm")
    assert not any("reviewed" in ls for ls in _labels(client, bucket).values())
    page.click("#bulk-update-where")
    assert page.wait_for_selector("#bulk-result").inner_text().startswith("Updated 5 record(s)")
    got = _labels(client, bucket)
    assert [ts for ts, ls in got.items() if ls.get("reviewed") == "yes"] == [BASE + i * 1_000_000 for i in (1, 3, 5, 7, 9)]
    # The list is reloaded with the new labels.
    page.wait_for_function(
        f"() => (document.querySelector(\"#record-rows tr[data-ts='{BASE + 1_000_000}'] td.labels\")?.textContent || '')"
        ".includes('reviewed=yes')")

    # Ticked records: a label set and one removed (`key=`); the rows do not open their preview.
    for i in (2, 4):
        page.check(f"#record-rows tr[data-ts='{BASE + i * 1_000_000}'] input.pick")
    assert page.inner_text("#bulk-picked") == "2 record(s) ticked"
    page.fill("#bulk-labels", "flag=1 odd=")
    _confirm(page, "#bulk-update-picked")
    page.wait_for_function("() => (document.querySelector('#bulk-result')?.textContent || '') === 'Updated 2 record(s).'")
    got = _labels(client, bucket)
    for i in (2, 4):
        assert got[BASE + i * 1_000_000] == {"n": str(i), "flag": "1"}
    assert got[BASE] == {"n": "0", "odd": "0"}

    # Ticked records deleted.
    page.wait_for_selector(f"#record-rows tr[data-ts='{BASE + 6_000_000}'] input.pick:not(:checked)")
    for i in (6, 7):
        page.check(f"#record-rows tr[data-ts='{BASE + i * 1_000_000}'] input.pick")
    _confirm(page, "#bulk-remove-picked")
    page.wait_for_function("() => (document.querySelector('#bulk-result')?.textContent || '') === 'Removed 2 record(s).'")
    assert sorted(_labels(client, bucket)) == [BASE + i * 1_000_000 for i in (0, 1, 2, 3, 4, 5, 8, 9)]
    page.wait_for_selector(f"#record-rows tr[data-ts='{BASE + 6_000_000}']", state="detached")

    # Labels that are not key=value, and nothing ticked: refused in the page, nothing sent.
    page.fill("#bulk-labels", "nokey")
    _confirm(page, "#bulk-update-where")
    assert "is not key=value" in page.wait_for_selector("#bulk-status .error").inner_text()
    page.fill("#bulk-labels", "a=b")
    _confirm(page, "#bulk-remove-picked")
    assert "Tick records" in page.wait_for_selector("#bulk-status .error").inner_text()
    assert client.get_entry(bucket, "cam").record_count == 8
    assert page.errors == []
    client.remove_bucket(bucket)
