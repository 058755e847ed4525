"""Real processes: scripts/serve.py (what ./run.sh runs) starts a worker again when it dies, with a
line saying so, and keeps the web server up meanwhile; SIGTERM stops it all. The stack uses the
test database and a redis-server of the test's own, so the session's live stack is not touched."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest
import requests

from tests.livestack import ROOT, RedisServer, _free_port, stack_env, stop_process

pytestmark = [pytest.mark.e2e]


def wait_for_line(log, pattern: str, timeout: float, after: int = 0) -> re.Match:
    deadline = time.time() + timeout
    while time.time() < deadline:
        found = re.compile(pattern).search(log.read_text(errors="replace"), after)
        if found:
            return found
        time.sleep(0.2)
    pytest.fail(f"no line like {pattern!r} in {timeout} s:\n{log.read_text(errors='replace')[-6000:]}")


def test_serve_starts_a_killed_worker_again_and_keeps_the_web_server_up(django_db_setup, tmp_path):
    broker = RedisServer(tmp_path / "redis").start()
    port = _free_port()
    log = tmp_path / "serve.log"
    env = {**stack_env(broker.url), "STORAGE_ROOT": str(tmp_path / "storage")}
    serve = subprocess.Popen([sys.executable, "scripts/serve.py", "--port", str(port)], cwd=ROOT, env=env,
                             stdout=open(log, "wb"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/login/"
    try:
        wait_for_line(log, r"LM Workbench is running", 240)
        first = wait_for_line(log, r"==> worker: started \(pid (\d+)\)", 10)
        old_pid = int(first.group(1))
        assert requests.get(url, timeout=30).status_code == 200

        os.kill(old_pid, signal.SIGKILL)
        died = wait_for_line(log, rf"==> worker \(pid {old_pid}\) was killed by SIGKILL after \d+ s; "
                                  r"starting it again in 1 s", 30)
        again = wait_for_line(log, r"==> worker: started \(pid (\d+)\)", 30, after=died.end())
        assert int(again.group(1)) != old_pid
        assert serve.poll() is None, log.read_text()
        assert requests.get(url, timeout=30).status_code == 200  # the web server never went away

        serve.send_signal(signal.SIGTERM)
        assert serve.wait(timeout=90) == 0
        assert "Stopping..." in log.read_text()
    finally:
        stop_process(serve, timeout=60)
        broker.stop()
