"""The Serve action with real processes: through the live stack's API, a real Celery worker on the
serve queue starts `python -m trainer serve` on a tiny GPT checkpoint; the server answers /health
without a key, /v1/models with the user's API token and 401 without it; Stop ends the process.
Served again, the worker's warm shutdown (SIGTERM, as ./run.sh and `docker compose stop` send)
stops its server, marks it stopped and the worker exits."""
from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest
import requests

from tests.livestack import gone, start_worker, stop_process, token_session, wait_for, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def tiny_gpt(owner, storage: Path):
    from tests.trainer.inference_generate_helpers import make_checkpoint, make_tokenizer
    from webapp.runs.models import Checkpoint, CheckpointSource

    relative = Path("imports") / f"serve-{owner.pk}" / "checkpoint"
    make_checkpoint("gpt", storage / relative, make_tokenizer(storage / "test-cache" / "serve-tokenizer"))
    return Checkpoint.objects.create(owner=owner, source=CheckpointSource.IMPORT, name="tiny gpt", path=str(relative))


def test_a_serve_worker_runs_the_model_server_until_it_is_stopped(live_stack, django_user_model, tmp_path):
    s = token_session(django_user_model, "server")
    user = django_user_model.objects.get(username="server")
    key = s.headers["Authorization"].removeprefix("Token ")
    checkpoint = tiny_gpt(user, live_stack.storage)
    api = f"{live_stack.url}/api/checkpoints/{checkpoint.id}/serve/"
    log = tmp_path / "serve-worker.log"

    def logs() -> str:
        return live_stack.logs() + "\n----- serve-worker.log -----\n" + log.read_text(errors="replace")[-6000:]

    worker = start_worker("serve", log, queues="serve", concurrency=2)
    try:
        r = s.post(api)
        assert r.status_code == 202, r.text
        up = wait_for(s, api, "status", {"serving", "failed", "stopped"}, 240, live_stack)
        assert up["status"] == "serving", (up, logs())
        base = up["base_url"]
        assert base == f"http://127.0.0.1:{up['port']}/v1" and up["model"] == "tiny-gpt"
        assert up["endpoints_reported"] and "/v1/completions" in up["endpoints"]
        assert key not in Path(f"/proc/{up['pid']}/cmdline").read_text(errors="replace")  # never on `ps`

        health = requests.get(base.removesuffix("/v1") + "/health", timeout=30)
        assert health.status_code == 200 and health.json()["model"] == "tiny-gpt"
        models = requests.get(f"{base}/models", headers={"Authorization": f"Bearer {key}"}, timeout=30)
        assert models.status_code == 200 and [m["id"] for m in models.json()["data"]] == ["tiny-gpt"]
        assert requests.get(f"{base}/models", timeout=30).status_code == 401
        assert requests.get(f"{base}/models", headers={"Authorization": "Bearer not-the-key"},
                            timeout=30).status_code == 401

        assert s.post(api).json()["id"] == up["id"]  # started again: the same server
        stopping = s.post(f"{api}stop/")
        assert stopping.status_code == 200 and stopping.json()["status"] in ("stopping", "stopped")
        done = wait_for(s, api, "status", {"stopped", "failed"}, 60, live_stack)
        assert done["status"] == "stopped" and done["stop_reason"] == "Stopped by you.", done
        assert gone(up["pid"])

        again = s.post(api)
        assert again.status_code == 202 and again.json()["id"] != up["id"]
        second = wait_for(s, api, "status", {"serving", "failed", "stopped"}, 240, live_stack)
        assert second["status"] == "serving", (second, logs())
        worker.send_signal(signal.SIGTERM)  # a warm shutdown stops its servers first
        try:
            worker.wait(timeout=90)
        except subprocess.TimeoutExpired:
            pytest.fail("The serve worker did not exit after SIGTERM\n" + logs())
        ended = s.get(api).json()
        assert ended["status"] == "stopped" and "worker was shut down" in ended["stop_reason"], ended
        wait_until("the server's process ending", lambda: gone(second["pid"]), 30, logs)
    finally:
        stop_process(worker)
