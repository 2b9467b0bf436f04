"""The entry page's Attachments card (issue 28) in headless Chromium: the attachments an
entry has are listed, one is added and replaced through the form (a bad document is refused
in the page), and one is removed after a confirmation. The fixtures are the console's."""

from __future__ import annotations

import uuid

import tsblob
from test_console import browser, entry_url, page  # noqa: F401  (pytest fixtures)

import pytest

pytestmark = pytest.mark.server


def test_attachments_are_listed_added_edited_and_removed(server, page, client: tsblob.Client) -> None:  # noqa: F811
    bucket = f"ui-{uuid.uuid4().hex[:10]}"
    client.create_bucket(bucket)
    client.write(bucket, "robot1/front", b"x", ts=1_767_225_600_000_000)
    client.write_attachments(bucket, "robot1/front", {"schema": {"fps": 30}})
    page.goto(entry_url(server, bucket, "robot1/front"))
    shown = page.wait_for_selector("#attachments .attachment[data-name='schema']")
    assert '"fps": 30' in shown.inner_text()
    # Add one through the form.
    page.fill("#attachment-name", "calib")
    page.fill("#attachment-doc", '{"k": [0.5, 1.5]}')
    page.click("#attachment-save")
    page.wait_for_selector("#attachments .attachment[data-name='calib']")
    assert client.read_attachment(bucket, "robot1/front", "calib") == {"k": [0.5, 1.5]}
    # Not JSON: refused in the page, nothing sent.
    page.fill("#attachment-name", "bad")
    page.fill("#attachment-doc", "{nope")
    page.click("#attachment-save")
    assert "Not JSON" in page.wait_for_selector("#attachment-status .error").inner_text()
    # Edit fills the form with the document; saving replaces it.
    page.click("#attachments .attachment[data-name='schema'] button:text-is('Edit')")
    assert page.input_value("#attachment-name") == "schema"
    page.fill("#attachment-doc", '{"fps": 60}')
    page.click("#attachment-save")
    page.wait_for_function(
        "() => (document.querySelector(\"#attachments .attachment[data-name='schema'] pre\")?.textContent || '')"
        ".includes('60')")
    assert client.read_attachment(bucket, "robot1/front", "schema") == {"fps": 60}
    # Delete asks once more, then removes.
    delete = "#attachments .attachment[data-name='calib'] button.danger"
    page.click(delete)
    assert page.inner_text(delete) == "Confirm delete"
    page.click(delete)
    page.wait_for_selector("#attachments .attachment[data-name='calib']", state="detached")
    assert client.read_attachments(bucket, "robot1/front") == {"schema": {"fps": 60}}
    # The records are untouched: attachments are no records.
    assert client.get_entry(bucket, "robot1/front").record_count == 1
    assert page.errors == []
    client.remove_bucket(bucket)
