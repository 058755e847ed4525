"""A fine-tuning run below its dataset's lexical baseline, in the system Chromium (issue 21, point 3):
its page says so in a visible alert with the likely cause and a link to the importer, and the
dataset's page lists the baselines beside the run on the leaderboard. Django serves the pages from a
thread of this process (live_server). Screenshot: test-artifacts/screenshots/run-below-baseline.png."""
from __future__ import annotations

import pytest

from tests.webapp.test_baselines_readiness import finetune_run, make_dataset, stored  # noqa: F401 - a fixture

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def below(alice, stored):  # noqa: F811 - the fixture imported above
    dataset = make_dataset(alice, stored)
    floor = stored[1]["baselines"][1]["test"]["accuracy"]
    return finetune_run(alice, dataset, test_accuracy=max(0.0, floor - 0.25), valid_accuracy=max(0.0, floor - 0.2))


def test_a_below_baseline_run_page_says_so_and_links_the_importer(below, alice_cookie, live_server_page, shots):
    page = live_server_page
    page.context.add_cookies([alice_cookie])
    page.goto(f"/runs/{below.id}/")
    alert = page.locator("#below-baseline")
    alert.wait_for(state="visible")
    text = alert.inner_text()
    assert "Below the baseline" in text and "bag of words + logistic regression" in text
    # the causes its own record points to (trainer.finetune.advice), each with its evidence
    assert page.locator("#below-baseline-causes li").count() >= 1 and "What the run's own record points to" in text
    page.screenshot(path=str(shots / "run-below-baseline.png"), full_page=False)
    page.click("#below-baseline-import")
    page.wait_for_url("**/explore/import/")

    page.goto(f"/datasets/{below.dataset_id}/")
    rows = page.eval_on_selector_all("#leaderboard-table tbody tr", "rows => rows.map(r => r.dataset.baseline || 'run')")
    assert rows == ["run", "majority", "bow_logistic"]
    assert page.locator("#baselines-table").is_visible()


@pytest.fixture
def pair(alice, stored):  # noqa: F811 - the fixture imported above
    from django.core.cache import cache

    from tests.webapp.test_baselines_readiness import imported_checkpoint

    cache.clear()
    return imported_checkpoint(alice, collapsed=True), make_dataset(alice, stored)


def test_the_form_warns_as_soon_as_a_collapsed_checkpoint_and_a_dataset_are_chosen(
        pair, alice_cookie, live_server_page, shots):
    checkpoint, dataset = pair
    page = live_server_page
    page.context.add_cookies([alice_cookie])
    page.goto("/runs/finetune/")
    assert page.locator("#readiness").count() == 0
    page.select_option("#id_checkpoint", str(checkpoint.id))
    page.select_option("#id_dataset", str(dataset.id))
    warning = page.locator("#readiness-collapsed")
    warning.wait_for(state="visible")
    assert "nearly identical for every" in warning.inner_text()
    page.screenshot(path=str(shots / "finetune-readiness.png"), full_page=False)
    page.click("#readiness-import")
    page.wait_for_url("**/explore/import/")
