"""Idle memory (issue 22, point 6): Celery replaces a pool process whose resident memory has grown
past WORKER_MAX_MEMORY_PER_CHILD KiB once its task ends (the explorer's cache is bounded in bytes:
tests/trainer/test_inference.py)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize("env, expected", [(None, 1024 * 1024), ("2048", 2048), ("0", None)])
def test_the_worker_s_pool_processes_are_recycled_by_memory(settings, env, expected):
    code = "from webapp.celery import app; print(app.conf.worker_max_memory_per_child)"
    environ = {k: v for k, v in os.environ.items() if k != "WORKER_MAX_MEMORY_PER_CHILD"}
    if env is not None:
        environ["WORKER_MAX_MEMORY_PER_CHILD"] = env
    environ["DJANGO_SETTINGS_MODULE"] = "webapp.settings"
    done = subprocess.run([sys.executable, "-c", code], env=environ, cwd=settings.BASE_DIR, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == str(expected)
