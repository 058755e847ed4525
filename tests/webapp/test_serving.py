"""The Serve action's web side (webapp.serving): starting a checkpoint's server queues one task on
the serve queue and gives the same server when started again, stop ends it (at once when no worker
took it yet), a server whose worker died is marked failed on the next read and by the scheduler's
reaper, the endpoints offered come from the checkpoint's family and task, the page shows the
address, the key and the snippets, and another user's checkpoint or server is a 404 on every URL.
(The worker's side: test_serving_supervisor.py; real processes: tests/e2e/test_serving.py.)"""
from __future__ import annotations

import subprocess
import sys
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from tests.webapp.runs_helpers import make_checkpoint, make_run
from webapp.runs.models import Checkpoint, RunKind, RunStatus
from webapp.serving import services
from webapp.serving.models import ServedModel, ServeStatus
from webapp.serving.tasks import reap_servers, serve_model

pytestmark = pytest.mark.django_db


@pytest.fixture
def queued(monkeypatch):
    """The serve_model messages sent (no worker here): [(args, kwargs)]."""
    sent = []
    monkeypatch.setattr(serve_model, "apply_async", lambda *a, **kw: sent.append((a, kw)))
    return sent


@pytest.fixture
def checkpoint(alice, settings, tmp_path):
    """A checkpoint of Alice's tiny GPT run with its model_config.json on disk (no weights: nothing loads it)."""
    ckpt = make_checkpoint(make_run(alice, status=RunStatus.SUCCEEDED, name="tiny gpt", family="gpt"), step=20)
    ckpt.folder.mkdir(parents=True, exist_ok=True)
    (ckpt.folder / "model_config.json").write_text('{"family": "gpt"}')
    return ckpt


def serve_url(ckpt) -> str:
    return reverse("api-checkpoint-serve", args=[ckpt.id])


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def claimed(served: ServedModel, **fields) -> ServedModel:
    """The row as a serve worker of this machine leaves it once it took it (and, with status=serving, listens)."""
    import os
    import socket

    values = dict(node="serve-1@here", machine=socket.gethostname(), worker_pid=os.getpid(), seen_at=timezone.now())
    values.update(fields)
    ServedModel.objects.filter(pk=served.pk).update(**values)
    served.refresh_from_db()
    return served


# ---------------------------------------------------------------------------- start and stop
def test_start_queues_one_server_on_the_serve_queue_and_a_second_start_gives_the_same(
        alice_api, checkpoint, queued, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        first = alice_api.post(serve_url(checkpoint))
    assert first.status_code == 202, first.content
    body = first.json()
    assert body["status"] == "starting" and body["waiting_for_worker"] is True and body["base_url"] == ""
    assert body["model"] == "tiny-gpt-step-20" and body["endpoints"] == ["/v1/completions"]
    assert body["endpoints_reported"] is False
    assert queued == [((), {"args": [body["id"]], "queue": "serve"})]

    with django_capture_on_commit_callbacks(execute=True):
        again = alice_api.post(serve_url(checkpoint))
    assert again.status_code == 200 and again.json()["id"] == body["id"]
    assert len(queued) == 1 and ServedModel.objects.count() == 1
    assert alice_api.get(serve_url(checkpoint)).json()["id"] == body["id"]


def test_the_serve_task_goes_to_the_serve_queue_only():
    from webapp.celery import app

    assert app.conf.task_routes["webapp.serving.tasks.serve_model"] == {"queue": "serve"}
    assert serve_model.acks_late is False  # a server outlives the broker's visibility timeout: never redelivered


def test_stop_before_a_worker_took_it_stops_at_once_and_a_new_start_is_a_new_server(
        alice_api, checkpoint, queued, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        first = alice_api.post(serve_url(checkpoint)).json()
    stopped = alice_api.post(reverse("api-checkpoint-serve-stop", args=[checkpoint.id]))
    assert stopped.status_code == 200
    assert stopped.json()["status"] == "stopped" and stopped.json()["stop_reason"] == services.STOPPED_BEFORE_START
    from webapp.serving.supervisor import claim

    assert claim(first["id"]) is None  # the message that arrives later finds nothing to start
    with django_capture_on_commit_callbacks(execute=True):
        second = alice_api.post(serve_url(checkpoint))
    assert second.status_code == 202 and second.json()["id"] != first["id"] and len(queued) == 2


def test_stop_of_a_serving_server_asks_its_worker_and_start_meanwhile_is_refused(alice_api, checkpoint, queued):
    served, _ = services.serve_start(checkpoint=checkpoint)
    claimed(served, status=ServeStatus.SERVING, host="127.0.0.1", port=8123, pid=4242)
    body = alice_api.get(serve_url(checkpoint)).json()
    assert body["base_url"] == "http://127.0.0.1:8123/v1" and body["status"] == "serving"

    r = alice_api.post(reverse("api-server-stop", args=[served.pk]))
    assert r.status_code == 200 and r.json()["status"] == "stopping" and r.json()["base_url"] == ""
    refused = alice_api.post(serve_url(checkpoint))
    assert refused.status_code == 409 and "stopping" in refused.json()["error"]


def test_limits_and_missing_files_are_sentences(alice, alice_api, checkpoint, queued, settings):
    settings.SERVE_MAX_PER_USER = 1
    services.serve_start(checkpoint=checkpoint)
    other = make_checkpoint(checkpoint.run, step=40)
    other.folder.mkdir(parents=True, exist_ok=True)
    (other.folder / "model_config.json").write_text("{}")
    r = alice_api.post(serve_url(other))
    assert r.status_code == 429 and "SERVE_MAX_PER_USER" in r.json()["error"]

    gone = make_checkpoint(checkpoint.run, step=60)  # no folder on disk
    settings.SERVE_MAX_PER_USER = 5
    r = alice_api.post(serve_url(gone))
    assert r.status_code == 400 and r.json()["error"] == services.FILES_GONE
    assert not ServedModel.objects.filter(checkpoint=gone).exists()
    assert alice_api.get(serve_url(gone)).status_code == 404  # never served: a sentence saying how to start


def test_a_broker_that_does_not_answer_fails_the_server_with_a_sentence(
        alice_api, checkpoint, monkeypatch, django_capture_on_commit_callbacks):
    def down(*a, **kw):
        raise ConnectionError("Redis is away")

    monkeypatch.setattr(serve_model, "apply_async", down)
    with django_capture_on_commit_callbacks(execute=True):
        r = alice_api.post(serve_url(checkpoint))
    assert r.status_code == 202
    assert alice_api.get(serve_url(checkpoint)).json()["error"] == services.QUEUE_DOWN


# ---------------------------------------------------------------------------- dead workers
def test_a_server_whose_worker_process_died_is_failed_on_the_next_read(alice_api, alice_client, checkpoint, queued):
    served, _ = services.serve_start(checkpoint=checkpoint)
    pid = dead_pid()
    claimed(served, status=ServeStatus.SERVING, host="127.0.0.1", port=8123, pid=99, worker_pid=pid)
    page = alice_client.get(reverse("serving:page", args=[checkpoint.id]))
    assert page.status_code == 200
    served.refresh_from_db()
    assert served.status == ServeStatus.FAILED and f"pid {pid}" in served.error and "died" in served.error
    assert "The server failed" in page.content.decode() and "Serve again" in page.content.decode()


def test_the_reaper_fails_servers_whose_worker_went_silent_or_died(alice, checkpoint, queued, settings):
    alive, _ = services.serve_start(checkpoint=checkpoint)
    claimed(alive, status=ServeStatus.SERVING)
    other = make_checkpoint(checkpoint.run, step=40)
    (other.folder).mkdir(parents=True, exist_ok=True)
    (other.folder / "model_config.json").write_text("{}")
    silent, _ = services.serve_start(checkpoint=other)
    old = timezone.now() - timedelta(seconds=settings.SERVE_HEARTBEAT_TIMEOUT_S + 5)
    claimed(silent, machine="another-machine", worker_pid=1, seen_at=old)
    waiting = make_checkpoint(checkpoint.run, step=60)
    waiting.folder.mkdir(parents=True, exist_ok=True)
    (waiting.folder / "model_config.json").write_text("{}")
    settings.SERVE_MAX_PER_USER = 5
    unclaimed, _ = services.serve_start(checkpoint=waiting)  # waits for a worker: nobody to miss yet

    assert reap_servers() == 1
    statuses = {row.pk: row.status for row in ServedModel.objects.all()}
    assert statuses == {alive.pk: "serving", silent.pk: "failed", unclaimed.pk: "starting"}
    assert "stopped answering" in ServedModel.objects.get(pk=silent.pk).error
    assert "reap-servers" in settings.CELERY_BEAT_SCHEDULE


# ---------------------------------------------------------------------------- what it answers
def test_expected_endpoints_follow_the_family_and_the_fine_tuning_task(alice, checkpoint):
    from webapp.serving.endpoints import expected_endpoints

    assert expected_endpoints(checkpoint) == ["/v1/completions"]
    bert = make_checkpoint(make_run(alice, name="bert", family="bert"), step=10)
    assert expected_endpoints(bert) == ["/v1/embeddings", "/v1/fill-mask"]
    t5 = make_checkpoint(make_run(alice, name="t5", family="t5"), step=10)
    assert expected_endpoints(t5) == ["/v1/completions", "/v1/embeddings"]
    tuned = make_run(alice, name="sentiment", family="bert", kind=RunKind.FINETUNE, objectives=["classification"])
    assert expected_endpoints(make_checkpoint(tuned, step=10)) == ["/v1/text-classification"]
    chat = make_run(alice, name="chat", family="gpt", kind=RunKind.FINETUNE, objectives=["sft"])
    assert expected_endpoints(make_checkpoint(chat, step=10)) == ["/v1/completions", "/v1/chat/completions"]


def test_the_page_shows_the_address_the_key_and_snippets_for_what_the_server_reports(
        alice, alice_client, checkpoint, queued):
    from rest_framework.authtoken.models import Token

    page_url = reverse("serving:page", args=[checkpoint.id])
    before = alice_client.get(page_url).content.decode()
    assert 'id="serve-start"' in before and "/v1/completions" in before and "snippets appear here" in before

    served, _ = services.serve_start(checkpoint=checkpoint)
    claimed(served, status=ServeStatus.SERVING, host="127.0.0.1", port=8123, pid=4242,
            endpoints=["/v1/models", "/v1/completions", "/v1/embeddings"])
    html = alice_client.get(page_url).content.decode()
    key = Token.objects.get(user=alice).key
    assert 'value="http://127.0.0.1:8123/v1"' in html and 'id="serve-stop"' in html and key in html
    assert f"curl http://127.0.0.1:8123/v1/completions \\\n  -H &#x27;Authorization: Bearer {key}&#x27;" in html
    assert f"OpenAI(base_url=&#x27;http://127.0.0.1:8123/v1&#x27;, api_key=&#x27;{key}&#x27;)" in html
    assert "client.completions.create(model=&#x27;tiny-gpt-step-20&#x27;" in html
    assert "client.embeddings.create(" in html and "client.models.list()" in html
    assert "fill-mask" not in html  # the server's own list wins over the guess
    assert 'id="serve-key-changed"' not in html

    ServedModel.objects.filter(pk=served.pk).update(key_fingerprint="0123456789abcdef")  # the token changed since
    assert 'id="serve-key-changed"' in alice_client.get(page_url).content.decode()

    stop = alice_client.post(reverse("serving:stop", args=[checkpoint.id]))
    assert stop.status_code == 302
    served.refresh_from_db()
    assert served.status == ServeStatus.STOPPING


def test_the_run_page_and_the_checkpoint_api_link_the_serve_page(alice_client, alice_api, checkpoint):
    url = reverse("serving:page", args=[checkpoint.id])
    assert f'href="{url}"' in alice_client.get(reverse("runs:detail", args=[checkpoint.run_id])).content.decode()
    body = alice_api.get(reverse("api-run-checkpoints", args=[checkpoint.run_id])).json()
    assert [c["serve_url"] for c in body] == [url]
    from webapp.runs.sink import checkpoint_event

    assert checkpoint_event(checkpoint)["serve_url"] == url


# ---------------------------------------------------------------------------- ownership
def test_another_users_checkpoint_or_server_is_a_404_everywhere(bob_api, bob_client, checkpoint, queued):
    served, _ = services.serve_start(checkpoint=checkpoint)
    claimed(served, status=ServeStatus.SERVING, host="127.0.0.1", port=8123, pid=4242)
    for method, url in [("get", serve_url(checkpoint)), ("post", serve_url(checkpoint)),
                        ("post", reverse("api-checkpoint-serve-stop", args=[checkpoint.id])),
                        ("get", reverse("api-server", args=[served.pk])),
                        ("post", reverse("api-server-stop", args=[served.pk]))]:
        r = getattr(bob_api, method)(url)
        assert r.status_code == 404, (method, url, r.content)
        assert r.json()["error"]
    assert bob_api.get(reverse("api-servers")).json() == []
    for method, url in [("get", reverse("serving:page", args=[checkpoint.id])),
                        ("post", reverse("serving:page", args=[checkpoint.id])),
                        ("post", reverse("serving:stop", args=[checkpoint.id]))]:
        assert getattr(bob_client, method)(url).status_code == 404, (method, url)
    served.refresh_from_db()
    assert served.status == ServeStatus.SERVING and ServedModel.objects.count() == 1  # nothing changed


def test_anonymous_requests_are_refused(anon_api, client, checkpoint):
    assert anon_api.post(serve_url(checkpoint)).status_code in (401, 403)
    assert anon_api.get(reverse("api-servers")).status_code in (401, 403)
    page = client.get(reverse("serving:page", args=[checkpoint.id]))
    assert page.status_code == 302 and "/login/" in page["Location"]


def test_the_servers_list_holds_only_your_own(alice_api, bob_api, checkpoint, queued):
    served, _ = services.serve_start(checkpoint=checkpoint)
    assert [s["id"] for s in alice_api.get(reverse("api-servers")).json()] == [str(served.pk)]
    assert alice_api.get(reverse("api-server", args=[served.pk])).json()["checkpoint_label"] == checkpoint.label
    Checkpoint.objects.filter(pk=checkpoint.pk).delete()  # its servers go with it
    assert not ServedModel.objects.exists()
