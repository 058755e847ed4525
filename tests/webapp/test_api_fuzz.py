"""The OpenAPI schema tells the truth (issue 11, point 10): schemathesis generates requests from
/api/schema/ (valid and invalid ones) and runs all its checks against a live server: no 500, only
documented status codes and content types, responses that match their schemas, invalid requests
refused, valid ones accepted, authentication enforced.

The user owns a corpus, a tokenizer, a finished run with a real checkpoint, a ready dataset and a
model import, and the config points the id-taking operations at them, so those operations reach
their logic instead of a 404. Bounded for a 2-core machine: 5 examples per operation and phase.

Exclusions, each because a JSON Schema cannot state what decides the answer:
- `positive_data_acceptance` is off for the operations whose 400s depend on stored state or file
  contents, not on the request's shape: uploads (the file's type and content), the explorer's
  questions (the checkpoint's family and heads: BERT does not generate nor fill in by permutation;
  a text needs [MASK]; the word must be in both sentences; classify, choose, tag and answer need a checkpoint
  fine-tuned for that task, embed an encoder and two non-blank sentences, nearest neighbours an
  encoder and a dataset already embedded), run and fine-tuning launches (which family takes which
  objectives, the checkpoint's family, the dataset's state), sweeps (whose base run, tokenizer or
  checkpoint must be the user's and valid with the space), a token for a wrong password.
  Every other check stays on for them.
- Job-launching operations run here without a worker: what they queue (ingest, tokenizer
  training, runs) stays in the suite's Redis and is never executed, so the fuzzer cannot start
  hundreds of trainings; their validation and answers are what is checked.
- schemathesis' error feedback (it reads 400 bodies as DRF's {field: [messages]}) is off: it takes
  our error body's "fields" key for a request field and then calls its own requests valid.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from webapp.runs.models import RunStatus

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]

# Operations whose acceptance of a well-formed request depends on state or content (see above).
SEMANTIC_400 = [
    ("POST", "/api/auth/token/"),
    ("POST", "/api/corpora/"),
    ("POST", "/api/corpora/import/"),  # the path must name corpus files under CORPUS_IMPORT_ROOTS (none here)
    ("POST", "/api/datasets/"),
    ("POST", "/api/explore/imports/"),
    ("POST", "/api/runs/"),
    ("POST", "/api/finetune/"),
    ("POST", "/api/runs/{run_id}/finetune-on/"),  # the run must be a multi-task one, the dataset one of its tasks
    ("POST", "/api/sweeps/"),
    ("POST", "/api/explore/fill-mask/"),
    ("POST", "/api/explore/generate/"),
    ("POST", "/api/explore/generate-seq2seq/"),
    ("POST", "/api/explore/fill-spans/"),
    ("POST", "/api/explore/attention/"),
    ("POST", "/api/explore/word-similarity/"),
    ("POST", "/api/explore/next-sentence/"),
    ("POST", "/api/explore/sentence-order/"),
    ("POST", "/api/explore/compare/"),
    ("POST", "/api/explore/permutation/"),
    ("POST", "/api/explore/classify/"),
    ("POST", "/api/explore/choose/"),
    ("POST", "/api/explore/tag/"),
    ("POST", "/api/explore/answer/"),
    ("POST", "/api/explore/embed/"),
    ("POST", "/api/explore/neighbours/index/"),
    ("POST", "/api/explore/neighbours/"),
    ("POST", "/api/checkpoints/{checkpoint_id}/export/"),  # the format must hold the checkpoint (GGUF: GPT-2 only)
]


def _world(user) -> dict[str, str]:
    """The user's objects, one of each kind an operation takes by id (and spares to delete)."""
    from trainer.prep.labelled import DEMOS
    from webapp.celery import app
    from webapp.datasets.services import dataset_create_demo
    from webapp.explorer.models import InContextResult, ModelImport, NeighbourIndex

    from tests.webapp.runs_helpers import make_checkpoint, make_data, make_run

    corpus, tokenizer = make_data(user, real=True)
    run = make_run(user, corpus=corpus, tokenizer=tokenizer, status=RunStatus.SUCCEEDED)
    checkpoint = make_checkpoint(run, step=20, real=True)
    spare_corpus, spare_tokenizer = make_data(user, name="spare")
    eager = app.conf.task_always_eager
    app.conf.task_always_eager = True  # the dataset is ingested here, so it is ready
    try:
        dataset = dataset_create_demo(owner=user, name=next(iter(DEMOS)))
    finally:
        app.conf.task_always_eager = eager
    dataset.refresh_from_db()
    assert dataset.status == "ready", dataset.error
    InContextResult.objects.create(owner=user, checkpoint=checkpoint, dataset=dataset, template="{text} {label}",
                                   k_max=2, n_queries=4, accuracies=[0.25, 0.5, 0.5])  # the leaderboard lists it
    model_import = ModelImport.objects.create(owner=user, name="an import", archive_suffix=".zip", status="failed",
                                              error="Not a model.")
    index = NeighbourIndex.objects.create(owner=user, checkpoint=checkpoint, dataset=dataset, pooling="cls", limit=10,
                                          status="failed", error="Not an encoder.")
    return {"corpus": str(corpus.id), "tokenizer": str(tokenizer.id), "run": str(run.id),
            "checkpoint": str(checkpoint.id), "spare_corpus": str(spare_corpus.id),
            "spare_tokenizer": str(spare_tokenizer.id), "dataset": str(dataset.id),
            "model_import": str(model_import.id), "neighbour_index": str(index.id)}


def _config(world: dict[str, str], *, username: str, password: str) -> str:
    """schemathesis.toml: the ids per operation, the exclusions above."""
    ops = [
        ("/api/corpora/{id}/", "GET", {"path.id": world["corpus"]}),
        ("/api/corpora/{id}/", "DELETE", {"path.id": world["spare_corpus"]}),
        ("/api/tokenizers/{id}/", "GET", {"path.id": world["tokenizer"]}),
        ("/api/tokenizers/{id}/", "DELETE", {"path.id": world["spare_tokenizer"]}),
        ("/api/tokenizers/{id}/tokenize/", None, {"path.id": world["tokenizer"]}),
        ("/api/datasets/{id}/", "GET", {"path.id": world["dataset"]}),
        ("/api/datasets/{id}/stats/", None, {"path.id": world["dataset"], "query.tokenizer": world["tokenizer"]}),
        ("/api/datasets/{id}/mapping/", None, {"path.id": world["dataset"]}),
        ("/api/datasets/{id}/leaderboard/", None, {"path.id": world["dataset"]}),
        ("/api/explore/imports/{id}/", None, {"path.id": world["model_import"]}),
        ("/api/tokenizers/", "POST", {"body.corpus": world["corpus"]}),
        ("/api/runs/", "POST", {"body.tokenizer": world["tokenizer"], "body.corpus": world["corpus"]}),
        ("/api/finetune/", None, {"body.checkpoint": world["checkpoint"], "body.dataset": world["dataset"]}),
        ("/api/runs/{run_id}/finetune-on/", None, {"body.dataset": world["dataset"]}),
        ("/api/checkpoints/{checkpoint_id}/export/", None, {"path.checkpoint_id": world["checkpoint"]}),
        ("/api/checkpoints/{checkpoint_id}/export-hf.zip", None, {"path.checkpoint_id": world["checkpoint"]}),
        # Serving queues a server on the serve queue, which no worker consumes here (nothing is started)
        ("/api/checkpoints/{checkpoint_id}/serve/", None, {"path.checkpoint_id": world["checkpoint"]}),
        ("/api/checkpoints/{checkpoint_id}/serve/stop/", None, {"path.checkpoint_id": world["checkpoint"]}),
        ("/api/explore/inspect/", None, {"body.run": world["run"]}),
        ("/api/explore/compare/", None, {"body.checkpoints": [world["checkpoint"], world["checkpoint"]]}),
        ("/api/explore/neighbours/index/", "POST", {"body.dataset": world["dataset"]}),
        ("/api/explore/neighbours/", "POST", {"body.dataset": world["dataset"]}),
        ("/api/explore/neighbours/index/{id}/", None, {"path.id": world["neighbour_index"]}),
        ("/api/auth/token/", None, {"body.username": username, "body.password": password}),
    ]
    lines = []
    for path, method, params in ops:
        # One filter per entry: include-path and include-method given together would match either.
        lines += ["[[operations]]", f"include-name = {json.dumps(f'{method} {path}')}" if method
                  else f"include-path = {json.dumps(path)}"]
        lines += ["parameters = { " + ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in params.items())
                  + " }", ""]
    for method, path in SEMANTIC_400:
        lines += ["[[operations]]", f"include-name = {json.dumps(f'{method} {path}')}",
                  "checks.positive_data_acceptance.enabled = false", ""]
    lines += ["[checks]", "enabled = true", "",  # all of them (here, not on the command line, which would
              # override the exclusions above)
              "[phases.fuzzing.error-feedback]", "enabled = false", "",
              "[parameters]", f"\"path.run_id\" = {json.dumps(world['run'])}",
              f"\"body.checkpoint\" = {json.dumps(world['checkpoint'])}", ""]
    return "\n".join(lines)


@pytest.fixture
def web_server(transactional_db, tmp_path):
    """The app under uvicorn, as run.sh serves it, on the test database; no Celery worker."""
    from django.conf import settings

    from tests.livestack import _database_url, _free_port

    port = _free_port()
    env = dict(os.environ, DATABASE_URL=_database_url(settings.DATABASES["default"]), REDIS_URL=settings.REDIS_URL,
               STORAGE_ROOT=str(settings.STORAGE_ROOT), DJANGO_SETTINGS_MODULE="webapp.settings",
               CELERY_TASK_ALWAYS_EAGER="0", ALLOWED_HOSTS="localhost,127.0.0.1", PYTHONUNBUFFERED="1")
    log = tmp_path / "web.log"
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "webapp.asgi:application", "--host", "127.0.0.1",
                             "--port", str(port), "--lifespan", "off", "--log-level", "warning"],
                            cwd=ROOT, env=env, stdout=open(log, "wb"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while time.time() < deadline and proc.poll() is None:
        try:
            if requests.get(f"{url}/api/schema/?format=json", timeout=30).status_code == 200:  # also warms it up
                break
        except requests.RequestException:
            time.sleep(0.3)
    if proc.poll() is not None:
        pytest.fail("The web server did not start:\n" + log.read_text(errors="replace")[-5000:])
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()


def test_schemathesis_finds_nothing_against_a_live_server(web_server, django_user_model, tmp_path):
    from rest_framework.authtoken.models import Token

    user = django_user_model.objects.create_user(username="fuzzer", password="fuzzer-password-123")
    token = Token.objects.create(user=user).key
    world = _world(user)
    config = tmp_path / "schemathesis.toml"
    config.write_text(_config(world, username="fuzzer", password="fuzzer-password-123"))
    schema_url = f"{web_server}/api/schema/?format=json"
    cmd = [sys.executable, "-m", "schemathesis.cli", "--config-file", str(config), "run", schema_url,
           "--max-examples", "5", "--workers", "1", "--seed", "1",
           "--request-timeout", "60", "--wait-for-schema", "60", "--header", f"Authorization: Token {token}",
           "--no-color"]
    # In tmp_path: schemathesis keeps a cache of past failures (.schemathesis/) where it runs.
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path,
                            env={**os.environ, "SCHEMATHESIS_HOOKS": ""})
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-20000:]
    assert "Failures:" not in output, output[-20000:]
    selected = re.search(r"Selected: (\d+)/(\d+)", output)
    assert selected and selected[1] == selected[2] and f"Tested: {selected[1]}" in output, output[-5000:]
    print(output[-1500:])  # the summary: operations, phases, cases, time (pytest -s shows it)
