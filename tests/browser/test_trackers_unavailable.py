"""The launch form in Chromium shows a tracker whose package is missing as unavailable, with the
command that installs it, before anyone launches (issue 29, point 8); TensorBoard comes with the
app and can be ticked. Django serves the page from a thread of this process (live_server), so the
missing package is made so here (sys.modules)."""
from __future__ import annotations

import sys

import pytest

from tests.webapp.runs_helpers import make_data

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def ready(alice):
    return make_data(alice)


def test_a_missing_tracker_is_greyed_out_with_its_command(ready, alice_cookie, live_server_page, monkeypatch):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # as if it were not installed
    page = live_server_page
    page.context.add_cookies([alice_cookie])
    page.goto("/runs/new/")
    box = page.locator('input[name="report_to"][value="mlflow"]')
    assert box.is_disabled()
    label = page.locator("label", has=box)
    assert "not installed here: pip install mlflow" in label.text_content()
    details = page.locator("details", has=box)
    if details.count():  # in a fold of the form: opened, it shows the sentence beside the box
        details.first.locator("summary").first.click()
    assert label.is_visible() and "pip install mlflow" in label.inner_text()
    tensorboard = page.locator('input[name="report_to"][value="tensorboard"]')
    assert not tensorboard.is_disabled()
