"""The masking inspector page and API: a run's real batches, each token with its role."""
from __future__ import annotations

import pytest
from django.urls import reverse

from tests.webapp.test_runs_helpers import make_data, make_run
from webapp.corpora.models import JobStatus
from webapp.runs.models import RunStatus

pytestmark = pytest.mark.django_db


@pytest.fixture
def run(alice):
    corpus, tokenizer = make_data(alice, real=True)
    return make_run(alice, corpus=corpus, tokenizer=tokenizer, status=RunStatus.SUCCEEDED, name="tiny")


def inspect(api, run, seed=0):
    return api.post("/api/explore/inspect/", {"run": str(run.id), "seed": seed}, format="json")


def test_the_api_shows_the_runs_batch_with_roles_segments_and_pair_labels(alice_api, run):
    response = inspect(alice_api, run)
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["objectives"] == ["mlm", "nsp"] and body["masking"] == "dynamic" and len(body["examples"]) == 4
    for ex in body["examples"]:
        assert ex["pair"]["task"] == "nsp" and {t["segment"] for t in ex["tokens"]} == {0, 1}
        assert ex["tokens"][0]["role"] == "special" and ex["electra"] is None
    roles: set[str] = set()
    for seed in range(4):
        roles |= {t["role"] for ex in inspect(alice_api, run, seed).json()["examples"] for t in ex["tokens"]}
    assert {"masked", "random", "kept", "special", "none"} <= roles  # 80/10/10 over a few batches
    assert inspect(alice_api, run, 1).json()["examples"] != body["examples"]


def test_the_page_draws_chips_with_a_legend_and_a_reload_button(alice_client, run):
    page = alice_client.get(reverse("explorer:inspect") + f"?run={run.id}&seed=2")
    html = page.content.decode()
    assert page.status_code == 200 and page.context["sample"]["seed"] == 2
    assert "inspect-chip role-masked" in html and "inspect-boundary" in html and "NSP: " in html
    assert 'id="inspect-reload"' in html and 'value="3"' in html and "js/explorer_inspect.js" in html


def test_a_run_whose_data_is_not_ready_says_so(alice, alice_api, alice_client):
    corpus, tokenizer = make_data(alice, status=JobStatus.PROCESSING)
    pending = make_run(alice, corpus=corpus, tokenizer=tokenizer)
    response = inspect(alice_api, pending)
    assert response.status_code == 400 and "tokenizer is not ready" in response.json()["error"]
    page = alice_client.get(reverse("explorer:inspect") + f"?run={pending.id}")
    assert "tokenizer is not ready" in page.content.decode()


def test_other_users_runs_are_not_found(bob_api, bob_client, anon_api, run):
    assert inspect(bob_api, run).status_code == 404
    assert bob_client.get(reverse("explorer:inspect") + f"?run={run.id}").status_code == 404
    assert inspect(anon_api, run).status_code in (401, 403)
