"""Generated samples on a text-to-text or SFT run's page (issue 9, section 4): at each validation a
few inputs, what the model generated and the reference, kept beside the metrics (samples.json),
streamed live over the run's websocket, shown escaped in a Samples panel and served by the API to
the run's owner only."""
from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator
from django.urls import reverse

from tests.webapp.runs_helpers import make_run
from tests.webapp.test_ws import session_headers
from webapp.asgi import application
from webapp.runs.models import RunKind, RunStatus
from webapp.runs.sink import DatabaseChannelsSink

HOSTILE = '<script>alert("x")</script> & <b>bold</b>'


def _generative_run(owner, task: str = "text_to_text", **fields):
    return make_run(owner, kind=RunKind.FINETUNE, objectives=[task], name=f"{task} run", **fields)


def _write_samples(run, validations):
    run.folder.mkdir(parents=True, exist_ok=True)
    (run.folder / "samples.json").write_text(json.dumps({"validations": validations}), encoding="utf-8")


@pytest.mark.django_db(transaction=False)
def test_the_page_shows_the_newest_validations_samples_escaped(alice, alice_client):
    run = _generative_run(alice, status=RunStatus.RUNNING)
    html = alice_client.get(reverse("runs:detail", args=[run.id])).content.decode()
    assert 'id="samples-panel"' in html and 'id="samples-empty"' in html  # waiting for the first validation
    _write_samples(run, [
        {"step": 10, "samples": [{"input": "old input", "generated": "old output", "reference": "old ref"}]},
        {"step": 20, "samples": [{"input": HOSTILE, "generated": "a summary", "reference": "the summary"}]},
    ])
    html = alice_client.get(reverse("runs:detail", args=[run.id])).content.decode()
    assert "at step 20" in html and "a summary" in html and "the summary" in html and "old output" not in html
    assert HOSTILE not in html and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &lt;b&gt;bold" in html


@pytest.mark.django_db(transaction=False)
@pytest.mark.parametrize("task", ["sft", "classification"])
def test_only_runs_that_generate_text_have_the_panel(alice, alice_client, task):
    run = _generative_run(alice, task=task)
    html = alice_client.get(reverse("runs:detail", args=[run.id])).content.decode()
    assert ('id="samples-panel"' in html) == (task == "sft")


@pytest.mark.django_db(transaction=False)
def test_the_api_serves_the_samples_to_the_owner_only(alice, alice_api, bob_api):
    run = _generative_run(alice, status=RunStatus.SUCCEEDED)
    url = reverse("api-run-samples", args=[run.id])
    assert alice_api.get(url).json() == {"validations": []}
    rows = [{"input": HOSTILE, "generated": "g", "reference": "r"}]
    _write_samples(run, [{"step": 4, "samples": rows}, {"step": "broken"}])
    assert alice_api.get(url).json() == {"validations": [{"step": 4, "samples": rows}]}
    response = bob_api.get(url)
    assert response.status_code == 404 and "not yours" in response.json()["error"]


@pytest.mark.django_db(transaction=True)
def test_the_sink_streams_a_validations_samples_to_the_owners_socket(alice, alice_client):
    run = _generative_run(alice, status=RunStatus.RUNNING)
    sink = DatabaseChannelsSink(run.id, claimed_by="test")
    rows = [{"input": HOSTILE, "generated": "out", "reference": "ref"}]

    async def go():
        comm = WebsocketCommunicator(application, f"/ws/runs/{run.id}/", headers=session_headers(alice_client))
        assert (await comm.connect(timeout=5))[0]
        await comm.receive_json_from(timeout=5)  # hello
        await sync_to_async(sink.samples)(12, rows)
        message = await comm.receive_json_from(timeout=5)
        await comm.disconnect()
        return message

    message = async_to_sync(go)()
    assert message["type"] == "samples" and message["step"] == 12 and message["samples"] == rows
