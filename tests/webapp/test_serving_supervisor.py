"""The serve worker's side of a model server (webapp.serving.supervisor), on a stand-in server that
keeps `python -m trainer serve`'s command-line contract and loads no model (serve_stub.py): the
supervisor runs in a thread of the test, as the task runs in a pool process. It hands the key in a
file only its user can read (never on the command line), records the address once the server
listens, stops it when the row is asked to (SIGTERM, SIGKILL after the grace period) or its worker
shuts down, and fails the row with a sentence and the server's last lines when it dies or refuses
to start. (The real command under a real worker: tests/e2e/test_serving.py.)"""
from __future__ import annotations

import json
import os
import signal
import stat
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.livestack import gone
from tests.webapp.runs_helpers import make_checkpoint, make_run
from webapp.runs.models import RunStatus
from webapp.serving import services, supervisor
from webapp.serving.models import ServedModel
from webapp.serving.tasks import serve_model

pytestmark = pytest.mark.django_db(transaction=True)

STUB = Path(__file__).with_name("serve_stub.py")
WAIT_S = 60  # bounded waits: a stand-in starts in well under a second on an idle machine


@pytest.fixture
def served(alice, settings, monkeypatch):
    """A starting server row of Alice's checkpoint, the stand-in as the serve command."""
    settings.SERVE_COMMAND = [sys.executable, str(STUB)]
    settings.SERVE_STOP_GRACE_S = 1.0
    monkeypatch.setattr(serve_model, "apply_async", lambda *a, **kw: None)  # the test runs the task's body itself
    ckpt = make_checkpoint(make_run(alice, status=RunStatus.SUCCEEDED, name="tiny gpt", family="gpt"), step=20)
    ckpt.folder.mkdir(parents=True, exist_ok=True)
    (ckpt.folder / "model_config.json").write_text('{"family": "gpt"}')
    row, _ = services.serve_start(checkpoint=ckpt)
    return row


class Supervision:
    """supervise() in a thread, as a serve worker's pool process runs it."""

    def __init__(self, served_id):
        from django.db import connection

        def run() -> None:
            try:
                supervisor.supervise(served_id, node="serve-test@here")
            finally:
                connection.close()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def ended(self) -> bool:
        self.thread.join(timeout=WAIT_S)
        return not self.thread.is_alive()


def row(served) -> ServedModel:
    return ServedModel.objects.get(pk=served.pk)


def wait_for(served, statuses: set[str]) -> ServedModel:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        current = row(served)
        if current.status in statuses:
            return current
        time.sleep(0.05)
    pytest.fail(f"the server did not reach {statuses}: {row(served).status} {row(served).error}")


def get(url: str, key: str | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_it_serves_with_the_key_in_a_private_file_and_stops_when_asked(alice, served):
    from rest_framework.authtoken.models import Token

    supervision = Supervision(served.pk)
    up = wait_for(served, {"serving", "failed"})
    assert up.status == "serving", (up.error, up.stderr_tail)
    key = Token.objects.get(user=alice).key
    assert up.host == "127.0.0.1" and up.port and up.base_url == f"http://127.0.0.1:{up.port}/v1"
    assert up.endpoints == ["/v1/models", "/v1/completions"]  # the server's own /v1/capabilities
    assert up.node == "serve-test@here" and up.worker_pid == os.getpid() and up.key_fingerprint
    assert up.started_at is not None and up.seen_at is not None

    cmdline = Path(f"/proc/{up.pid}/cmdline").read_bytes().split(b"\0")
    assert key.encode() not in b" ".join(cmdline)  # what `ps` shows
    assert key.encode() not in Path(f"/proc/{up.pid}/environ").read_bytes()
    key_file = Path(cmdline[cmdline.index(b"--api-key-file") + 1].decode())
    assert key_file.read_text().strip() == key
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600 and stat.S_IMODE(key_file.parent.stat().st_mode) == 0o700

    assert get(f"http://127.0.0.1:{up.port}/health") == (200, {"status": "ok", "model": "tiny-gpt-step-20"})
    assert get(f"{up.base_url}/models")[0] == 401
    code, models = get(f"{up.base_url}/models", key)
    assert code == 200 and [m["id"] for m in models["data"]] == ["tiny-gpt-step-20"]

    services.serve_stop(served=up)
    assert supervision.ended()
    done = row(served)
    assert done.status == "stopped" and done.stop_reason == services.STOPPED_BY_USER and done.stopped_at
    assert gone(up.pid) and not key_file.parent.exists()  # the key file goes with its folder


def test_a_server_that_refuses_to_start_fails_the_row_with_its_sentence(served, monkeypatch):
    monkeypatch.setenv("STUB_MODE", "refuse")
    supervision = Supervision(served.pk)
    assert supervision.ended()
    failed = row(served)
    assert failed.status == "failed"
    assert failed.error == (f"The model server refused to start: {served.checkpoint.folder} holds a model this server "
                            "has nothing to answer with.")
    assert "stub serving" in failed.stderr_tail and failed.stopped_at


def test_a_server_that_dies_while_serving_fails_the_row_with_its_last_lines(served):
    supervision = Supervision(served.pk)
    up = wait_for(served, {"serving", "failed"})
    os.kill(up.pid, signal.SIGKILL)
    assert supervision.ended()
    failed = row(served)
    assert failed.status == "failed"
    assert failed.error.startswith("The model server was killed by SIGKILL while serving. Its last line: stub serving")
    assert "stub serving" in failed.stderr_tail


def test_a_worker_shutting_down_stops_its_servers_and_says_so(served):
    from webapp.runs import shutdown

    supervision = Supervision(served.pk)
    up = wait_for(served, {"serving", "failed"})
    shutdown._requested.set()  # what a warm shutdown's NOTICE sets in each pool process
    try:
        assert supervision.ended()
    finally:
        shutdown._requested.clear()
    done = row(served)
    assert done.status == "stopped" and done.stop_reason == supervisor.WORKER_SHUTDOWN and gone(up.pid)


def test_a_server_that_ignores_sigterm_is_killed_after_the_grace_period(served, monkeypatch):
    monkeypatch.setenv("STUB_MODE", "ignore-term")
    supervision = Supervision(served.pk)
    up = wait_for(served, {"serving", "failed"})
    services.serve_stop(served=up)
    assert supervision.ended()
    assert row(served).status == "stopped" and gone(up.pid)


def test_stop_while_it_starts_stops_it_and_a_second_delivery_starts_nothing(served, monkeypatch):
    monkeypatch.setattr(supervisor, "wait_until_ready", _stop_first(supervisor.wait_until_ready))
    supervision = Supervision(served.pk)
    assert supervision.ended()
    done = row(served)
    assert done.status == "stopped" and done.port is None and gone(done.pid)
    assert supervisor.claim(served.pk) is None  # the same message again finds no row to take


def _stop_first(wait):
    def stop_then_wait(served, proc, folder):
        services.serve_stop(served=ServedModel.objects.get(pk=served.pk))
        return wait(served, proc, folder)
    return stop_then_wait


def test_ports_come_from_serve_ports_when_it_names_some(served, settings):
    assert supervisor.ports("8100-8102,8200") == [8100, 8101, 8102, 8200] and supervisor.ports("") == []
    assert supervisor.pick_port(served) == 0  # by default the server takes any free port
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        taken = s.getsockname()[1]
        settings.SERVE_PORTS = f"{taken}"
        with pytest.raises(supervisor.UserError, match="SERVE_PORTS"):
            supervisor.pick_port(served)
