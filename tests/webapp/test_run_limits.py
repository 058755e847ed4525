"""A user's queue is bounded (MAX_ACTIVE_RUNS_PER_USER: a 429 with a sentence beyond it), and
short jobs (ingest, tokenizer, import) go to a queue of their own."""
from __future__ import annotations

import pytest

from tests.webapp.runs_helpers import make_checkpoint, make_data, make_run
from webapp.runs.models import Run, RunStatus


@pytest.fixture
def limit_two(settings):
    settings.MAX_ACTIVE_RUNS_PER_USER = 2


def test_launches_beyond_the_limit_get_a_429_until_one_finishes(limit_two, alice, bob, alice_api, enqueued):
    _, tokenizer = make_data(alice)
    make_run(bob, status=RunStatus.RUNNING)  # another user's runs do not count
    make_run(bob, status=RunStatus.QUEUED)
    for _ in range(2):
        assert alice_api.post("/api/runs/", {"tokenizer": str(tokenizer.id)}, format="json").status_code == 201
    response = alice_api.post("/api/runs/", {"tokenizer": str(tokenizer.id)}, format="json")
    assert response.status_code == 429
    assert response.json()["error"] == ("You have 2 runs queued or running, the most one user may have at once (2). "
                                        "Wait for one to finish, or cancel one, then launch again.")
    first = Run.objects.filter(owner=alice).first()
    assert alice_api.post(f"/api/runs/{first.id}/clone/", {}, format="json").status_code == 429
    assert alice_api.post(f"/api/runs/{first.id}/cancel/").status_code == 200
    assert alice_api.post("/api/runs/", {"tokenizer": str(tokenizer.id)}, format="json").status_code == 201
    assert Run.objects.filter(owner=alice).count() == 3


def test_resuming_counts_too(limit_two, alice, alice_api, enqueued):
    stopped = make_run(alice, status=RunStatus.CANCELLED)
    make_checkpoint(stopped)
    make_run(alice, status=RunStatus.RUNNING)
    make_run(alice, status=RunStatus.QUEUED)
    response = alice_api.post(f"/api/runs/{stopped.id}/resume/")
    assert response.status_code == 429 and "the most one user may have" in response.json()["error"]
    assert Run.objects.get(pk=stopped.pk).status == RunStatus.CANCELLED


def test_the_launch_page_says_so(limit_two, alice, alice_client, enqueued):
    from tests.webapp.test_runs import post_form

    _, tokenizer = make_data(alice)
    make_run(alice, status=RunStatus.RUNNING)
    make_run(alice, status=RunStatus.QUEUED)
    page = post_form(alice_client, tokenizer)
    assert "the most one user may have at once (2)" in page.content.decode()
    assert Run.objects.filter(owner=alice).count() == 2


def test_short_jobs_have_their_own_queue(alice, monkeypatch, settings, django_capture_on_commit_callbacks):
    from webapp.explorer import imports
    from webapp.jobs import lifecycle

    assert settings.JOBS_QUEUE == "jobs" and lifecycle.QUEUE == imports.QUEUE == "jobs"
    sent = []
    monkeypatch.setattr("webapp.corpora.tasks.ingest_corpus.apply_async",
                        lambda args, queue: sent.append((args, queue)))
    from webapp.corpora.services import corpus_create_demo

    with django_capture_on_commit_callbacks(execute=True):
        corpus_create_demo(owner=alice)  # enqueues its ingest once the transaction commits
    assert [q for _, q in sent] == ["jobs"]
