"""The Serve action in the system Chromium: "Serve" on the run's checkpoint row opens the server's
page; pressing Serve queues the server and the page waits for a worker; once the worker's side
(the supervisor, run by the test in a thread on the stand-in server of tests/webapp/serve_stub.py)
has it listening, the page shows the address, the key and the curl and openai snippets by itself,
and again after a reload; Stop stops it and the page says so."""
from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from tests.webapp.runs_helpers import make_checkpoint, make_run

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

STUB = Path(__file__).resolve().parents[1] / "webapp" / "serve_stub.py"


@pytest.fixture
def checkpoint(alice, settings):
    from webapp.runs.models import RunStatus

    settings.SERVE_COMMAND = [sys.executable, str(STUB)]
    ckpt = make_checkpoint(make_run(alice, status=RunStatus.SUCCEEDED, name="tiny gpt", family="gpt"), step=20)
    ckpt.folder.mkdir(parents=True, exist_ok=True)
    (ckpt.folder / "model_config.json").write_text('{"family": "gpt"}')
    return ckpt


def test_serve_shows_the_address_and_snippets_across_a_reload_and_stop_ends_it(checkpoint, alice, alice_cookie,
                                                                               live_server_page, monkeypatch, shots):
    from django.db import connection, connections
    from rest_framework.authtoken.models import Token

    from webapp.serving import supervisor
    from webapp.serving.models import ServedModel
    from webapp.serving.tasks import serve_model

    queued = []
    monkeypatch.setattr(serve_model, "apply_async", lambda *a, **kw: queued.append(kw["args"][0]))  # no worker
    page = live_server_page
    page.context.add_cookies([alice_cookie])
    page.goto(f"/runs/{checkpoint.run_id}/")
    page.click(f"#checkpoints-body tr[data-step='{checkpoint.step}'] a:has-text('Serve')")
    page.wait_for_selector("#serve-start")
    assert "/v1/completions" in page.text_content("#serve-endpoints")  # expected from the family, before it runs

    page.click("#serve-start")
    page.wait_for_selector("#serve-starting")
    assert "Waiting for a serve worker" in page.text_content("#serve-starting") and len(queued) == 1
    assert page.text_content("#serve-status").strip() == "Starting"

    def worker() -> None:  # the serve worker's part: claim, spawn, wait, supervise until stopped
        try:
            supervisor.supervise(queued[0], node="serve-browser@here")
        finally:
            connection.close()

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    page.wait_for_selector("#serve-base-url", timeout=60_000)  # the page reloads itself once it serves
    served = ServedModel.objects.get(pk=queued[0])
    key = Token.objects.get(user=alice).key
    base = f"http://127.0.0.1:{served.port}/v1"

    def check_page() -> None:
        assert page.input_value("#serve-base-url") == base
        assert page.text_content("#serve-status").strip() == "Serving"
        assert page.input_value("#serve-token") == key
        curls = page.eval_on_selector_all(".serve-curl", "els => els.map(e => e.value)")
        pythons = page.eval_on_selector_all(".serve-python", "els => els.map(e => e.value)")
        assert any(c.startswith(f"curl {base}/completions") and f"Bearer {key}" in c for c in curls), curls
        assert any(f"OpenAI(base_url='{base}', api_key='{key}')" in p and "client.completions.create(" in p
                   for p in pythons), pythons
        assert page.is_visible("#serve-stop")

    check_page()
    page.screenshot(path=str(shots / "serve.png"), full_page=True)
    page.reload()
    check_page()  # the state is the row's: a reload shows the same

    page.click("#serve-stop")
    page.wait_for_selector("#serve-stopped", timeout=60_000)  # stopping, then the worker's stopped
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert "Stopped by you" in page.text_content("#serve-stopped") and page.is_visible("#serve-start")
    assert page.text_content("#serve-start").strip() == "Serve again"
    assert ServedModel.objects.get(pk=queued[0]).status == "stopped"
    connections.close_all()  # this test's own queries ran in Playwright's loop, on a connection of their own
