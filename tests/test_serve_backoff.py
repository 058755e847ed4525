"""scripts/serve.py's supervisor: the delay before a dead process is started again doubles with each
quick death in a row (1, 2, 4 s ... at most a minute) and is back to 1 s for one that had run a
minute. (tests/e2e/own_broker/test_supervisor.py kills a real worker under a real serve.py.)"""
from __future__ import annotations

import importlib.util
import subprocess
import sys
import time

from tests.livestack import ROOT


def load_serve():
    spec = importlib.util.spec_from_file_location("serve_script", ROOT / "scripts" / "serve.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def test_a_process_that_keeps_dying_waits_longer_each_time_and_one_that_ran_a_while_does_not(capsys):
    serve = load_serve()
    child = serve.Child("worker", [sys.executable, "-c", "raise SystemExit(3)"], env={})
    child.start()
    delays, now = [], 0.0
    for ran in (0.5, 0.5, 0.5, 0.5, serve.HEALTHY_AFTER_S + 1):
        child.proc.wait(timeout=30)
        child.started_at = now - ran
        serve.supervise([child], now=now)
        assert child.proc is None
        delays.append(child.restart_at - now)
        now = child.restart_at
        serve.supervise([child], now=now)  # due: started again
        assert child.proc is not None
    child.proc.wait(timeout=30)
    assert delays == [1, 2, 4, 8, 1]
    assert "==> worker (pid " in capsys.readouterr().out
    assert [serve.restart_delay(n) for n in (1, 7, 8, 50)] == [1, 60, 60, 60]


def test_the_line_says_how_it_ended():
    serve = load_serve()
    assert serve.how_it_ended(-9) == "was killed by SIGKILL"
    assert serve.how_it_ended(1) == "exited with status 1"
    assert subprocess.run([sys.executable, str(ROOT / "scripts" / "serve.py"), "--help"],
                          capture_output=True, text=True).returncode == 0


def test_the_running_line_waits_for_a_web_server_that_starts_slowly_and_not_for_one_that_exited():
    """The web server can take more than ten seconds to answer when the workers import torch beside
    it on a busy machine (seen in CI): "is running" must wait for it, and a web process that exited
    must not hold the wait."""
    import socket

    serve = load_serve()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    slow = serve.Child("web", [sys.executable, "-c", (
        "import socket, time; time.sleep(3); s = socket.socket(); "
        f"s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1', {port})); s.listen(); "
        "time.sleep(30)")], env={})
    slow.start()
    try:
        assert not serve.answers("127.0.0.1", port)
        assert serve.wait_for_web([slow], "127.0.0.1", port, timeout=60)
    finally:
        slow.proc.kill()
        slow.proc.wait()
    dead = serve.Child("web", [sys.executable, "-c", "raise SystemExit(1)"], env={})
    dead.start()
    dead.proc.wait(timeout=30)
    started = time.monotonic()
    assert not serve.wait_for_web([dead], "127.0.0.1", port, timeout=60)
    assert time.monotonic() - started < 5
