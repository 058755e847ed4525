"""The explorer's nearest-neighbours panel in Chromium: "Embed the dataset" queues the job and the
panel follows its progress until it is ready (the worker's part is run by the test), then a query
gets the k nearest texts of the dataset in a table, the ones the service finds, in its order."""
from __future__ import annotations

import pytest

from tests.webapp.test_runs_finetune import tiny_checkpoint

pytestmark = pytest.mark.django_db(transaction=True)

LIMIT = 16


@pytest.fixture
def encoder_and_dataset(alice, settings):
    from webapp.celery import app
    from webapp.datasets.services import dataset_create_demo

    settings.NEIGHBOURS_MAX_TEXTS = LIMIT
    eager = app.conf.task_always_eager
    app.conf.task_always_eager = True  # the dataset is ingested here, so it is ready
    try:
        dataset = dataset_create_demo(owner=alice, name="classification")
    finally:
        app.conf.task_always_eager = eager
    dataset.refresh_from_db()
    assert dataset.status == "ready", dataset.error
    return tiny_checkpoint(alice), dataset


def test_the_panel_follows_the_job_and_lists_the_neighbours(encoder_and_dataset, alice_cookie, live_server_page,
                                                            monkeypatch):
    from webapp.explorer import neighbours
    from webapp.explorer.models import NeighbourIndex
    from webapp.explorer.tasks import build_neighbour_index

    checkpoint, dataset = encoder_and_dataset
    queued = []
    monkeypatch.setattr(build_neighbour_index, "apply_async", lambda *a, **kw: queued.append(a))  # no worker
    page = live_server_page
    page.context.add_cookies([alice_cookie])
    page.goto(f"/explore/?checkpoint={checkpoint.id}")
    assert f"at most its first {LIMIT} texts" in " ".join(page.text_content("#neighbours").split())
    page.select_option("#id_nn_dataset", str(dataset.id))
    page.click("#neighbours-index-button")
    page.wait_for_selector("#neighbours-status [data-status=pending] .progress")
    assert page.url.endswith(f"/explore/?checkpoint={checkpoint.id}")  # asked by the script, not posted
    assert len(queued) == 1

    neighbours.index_process(index_id=NeighbourIndex.objects.get().pk)  # the worker
    page.wait_for_selector("#neighbours-status [data-status=ready]")
    assert f"ready: {LIMIT} of the dataset's" in page.text_content("#neighbours-status")
    assert "mean pooling: ready" in page.text_content("#neighbours-status")  # spaced as the server writes it

    text = "Return the absolute path of a file."
    page.fill("#id_nn_text", text)
    page.fill("#id_nn_k", "4")
    page.click("#neighbours-button")
    page.wait_for_selector("#neighbours-result:not([hidden]) table.explorer-neighbours")
    rows = page.locator("#neighbours-result tbody tr")
    expected = neighbours.search(checkpoint=checkpoint, dataset=dataset, text=text, k=4)["neighbours"]
    assert rows.count() == 4
    for i, n in enumerate(expected):
        cells = rows.nth(i).locator("td").all_text_contents()
        assert cells == [str(n["rank"]), n["text"], n["label"], n["split"], f"{n['similarity']:.3f}"]

    page.fill("#id_nn_text", "")
    page.click("#neighbours-button")
    page.wait_for_function("document.querySelector('[data-error=neighbours]').textContent.includes('text: ')")
    assert page.is_hidden("#neighbours-result")  # the API's sentence, in place of the table
