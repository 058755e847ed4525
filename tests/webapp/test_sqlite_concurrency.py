"""SQLite under concurrent writers: processes that each read then write in transactions (as a
run's metric sink and API launches do) all finish, none with "database is locked"."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

WRITER = """
import os, sys, django
django.setup()
from django.db import transaction
from django.contrib.auth.models import Group
n = int(sys.argv[1])
for i in range(40):
    with transaction.atomic():
        Group.objects.count()  # a read first: the lock a deferred transaction would have to upgrade
        Group.objects.create(name=f"writer-{n}-{i}")
print("done", n)
"""


def _env(db: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "TEST_DATABASE_NAME")}
    env.update({"DATABASE_URL": f"sqlite:///{db}", "DJANGO_SETTINGS_MODULE": "webapp.settings",
                "PYTHONPATH": str(ROOT), **(extra or {})})
    return env


def test_concurrent_writers_on_sqlite_all_finish(tmp_path):
    db = tmp_path / "db.sqlite3"
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=_env(db), check=True,
                   timeout=300)
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(n)], cwd=ROOT, env=_env(db),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for n in range(4)]
    results = [w.communicate(timeout=300) for w in writers]
    for (out, err), w in zip(results, writers):
        assert w.returncode == 0 and "database is locked" not in err, err[-2000:]
    check = ("import django; django.setup(); from django.contrib.auth.models import Group; "
             "from django.db import connection; "
             "print(Group.objects.filter(name__startswith='writer-').count(), "
             "connection.cursor().execute('PRAGMA journal_mode').fetchone()[0])")
    out = subprocess.run([sys.executable, "-c", check], cwd=ROOT, env=_env(db), capture_output=True, text=True,
                         check=True, timeout=120).stdout.split()
    assert out == ["160", "wal"]
