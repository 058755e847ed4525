"""A labelled dataset in the system Chromium: upload a small CSV through the streaming form, see its first
rows with the suggested roles, confirm, and see the labels as a bar chart and the token lengths a tokenizer
gives. Django serves the pages from a thread of this process (live_server) and the ingest job runs in it
as soon as the mapping is committed (Celery eager). Screenshots: test-artifacts/screenshots/dataset-*.png."""
from __future__ import annotations

import pytest

from tests.webapp.datasets_helpers import conll, review_csv
from tests.webapp.runs_helpers import make_data

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def tokenizer(alice):
    return make_data(alice, real=True, name="docstrings")[1]


def test_upload_map_confirm_and_chart_a_csv(eager, tokenizer, alice_cookie, live_server_page, shots):
    page = live_server_page
    page.context.add_cookies([alice_cookie])
    page.goto("/datasets/")
    page.click("text=Upload a dataset")
    page.set_input_files("#id_file", files=[{"name": "reviews.csv", "mimeType": "text/csv",
                                             "buffer": review_csv(60)}])
    page.fill("#id_name", "Weather reviews")
    page.click("#upload-submit")

    # The mapping page: the first rows under the columns, a suggested role under each.
    page.wait_for_selector("#preview-table")
    assert page.eval_on_selector_all("#preview-table thead tr:first-child th", "ths => ths.map(t => t.textContent)") \
        == ["review", "label"]
    assert page.eval_on_selector_all("#preview-table tbody tr", "rows => rows.length") == 10
    assert page.input_value("select[name=role_0]") == "text" and page.input_value("select[name=role_1]") == "label"
    assert page.input_value("select[name=task]") == "classification"
    assert "Needs columns mapped to text and label" in page.inner_text("#task-help")
    page.check("input[name=strategy][value=column]")  # no split column: the fractions are hidden, then back
    assert page.is_hidden("#split-fractions")
    page.check("input[name=strategy][value=random]")
    page.fill("#id_train", "0.6")
    page.fill("#id_validation", "0.2")
    page.fill("#id_test", "0.2")
    page.screenshot(path=str(shots / "dataset-mapping.png"), full_page=True)
    page.click("#confirm-mapping")

    # Ingested in the same request (eager): the page is ready with its chart.
    page.wait_for_selector("#status-badge.ready")
    page.wait_for_function("() => { const el = document.getElementById('label-chart'); return el && el.data; }")
    traces = page.evaluate("""() => document.getElementById('label-chart').data.map(
        t => ({ name: t.name, x: Array.from(t.x), total: Array.from(t.y).reduce((a, b) => a + b, 0) }))""")
    assert [t["name"] for t in traces] == ["train", "validation", "test"]
    assert all(t["x"] == ["calm", "mild", "storm"] for t in traces)
    assert [t["total"] for t in traces] == [36, 12, 12]
    assert page.inner_text('[data-split="train"] b') == "36"

    # Token lengths: the user's tokenizer is chosen; another max_length is measured through the API.
    assert page.input_value("#id_tokenizer") == str(tokenizer.id)
    page.fill("#id_max_length", "28")
    page.click("#lengths-submit")
    page.wait_for_function("() => { const el = document.getElementById('length-chart'); return el && el.data; }")
    summary = page.inner_text("#lengths-summary")
    assert "of the 60 examples" in summary and "are longer than 28 tokens and would be cut" in summary
    assert "max_length=28" in page.url
    page.screenshot(path=str(shots / "dataset.png"), full_page=True)


def test_a_train_file_and_a_test_file_through_the_streaming_form(eager, alice_cookie, live_server_page):
    """The script sends every file input of the form: the test file beside the train file is the test split."""
    page = live_server_page
    page.context.add_cookies([alice_cookie])
    page.goto("/datasets/upload/")
    page.set_input_files("#id_file", files=[{"name": "train.conll", "mimeType": "text/plain", "buffer": conll(10)}])
    page.click("details.split-files summary")
    page.set_input_files("#id_test_file", files=[{"name": "test.conll", "mimeType": "text/plain",
                                                  "buffer": b"Bob\tB-PER\nsaw\tO\nRome\tB-LOC\n"}])
    page.click("#upload-submit")
    page.wait_for_selector("#preview-table")
    assert page.inner_text('[data-split-file="test"]') == "test.conll"
    assert page.is_checked("input[name=strategy][value=files]")
    page.click("#confirm-mapping")
    page.wait_for_selector("#status-badge.ready")
    assert page.inner_text('[data-split="test"] b') == "1"
    assert page.inner_text('[data-split="test"] .origin') == "from test.conll"
