"""The suite in parallel (./test.sh runs pytest-xdist, one process per CPU): the tests with real
processes stay together on one worker, go first there, and their live stack stops before that
worker goes on; every worker has a Redis database of its own."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path


from tests.env_setup import SUITE_REDIS_DBS, claim_redis_db
from tests.livestack import LIVE_STACK_GROUP, OWN_BROKER_GROUP, work_unit

REPO = Path(__file__).resolve().parents[1]

REAL = '''
import os
import pytest
from tests import livestack

def record(what):
    with open(os.environ["EVENTS"], "a") as f:
        f.write(f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')} {what}\\n")

@pytest.mark.e2e
@pytest.mark.parametrize("i", range(3))
def test_real(i):
    if not livestack._stops:  # stands in for the live stack's stop
        livestack._stops.append(lambda: record("stop"))
    record("real")
'''

PLAIN = '''
import os
import time
import pytest

@pytest.mark.parametrize("i", range({n}))
def test_plain(i):
    time.sleep({pause})
    with open(os.environ["EVENTS"], "a") as f:
        f.write(f"{{os.environ.get('PYTEST_XDIST_WORKER', 'main')}} plain\\n")
'''


def run_sample(tmp_path: Path, files: dict[str, str], *args: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    for name, body in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(body))
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    e2e: real processes\n    browser: a browser\n")
    events = tmp_path / "events.log"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "EVENTS": str(events)}
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.livestack", "-p", "no:django",
                          "-p", "no:cacheprovider", "-q", "--rootdir", str(tmp_path), "-c", str(tmp_path / "pytest.ini"),
                          *args, *files], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    return out, events.read_text().splitlines() if events.exists() else []


def test_work_units_put_the_real_process_folders_together_and_the_rest_by_module():
    assert work_unit("tests/e2e/test_families.py::test_bert[x]") == LIVE_STACK_GROUP
    assert work_unit("tests/browser/test_walkthrough.py::test_walk") == LIVE_STACK_GROUP
    assert work_unit("tests/e2e/own_broker/test_capacity.py::test_a") == OWN_BROKER_GROUP
    assert work_unit("tests/webapp/test_runs.py::test_a[1]") == "tests/webapp/test_runs.py"
    assert work_unit("tests/webapp/test_runs.py::TestX::test_b") == "tests/webapp/test_runs.py"


def test_real_process_tests_run_together_first_on_one_worker_and_stop_their_stack_before_the_rest(tmp_path):
    # The other worker's module of 20 takes 4 s, so the worker with the real-process unit, whose
    # three tests take none, is the one xdist gives the small module (a worker gets its next unit
    # once two of its tests are left): with instant tests the other one could run 18 of them
    # first on a loaded machine and take both (CI, once), leaving no test after the stop.
    files = {"tests/e2e/test_real.py": REAL, "tests/webapp/test_big.py": PLAIN.format(n=20, pause=0.2),
             "tests/webapp/test_small.py": PLAIN.format(n=5, pause=0)}
    out, events = run_sample(tmp_path, files, "-n", "2")
    assert out.returncode == 0, out.stdout + out.stderr
    workers = {line.split()[0] for line in events if line.endswith(" real")}
    assert len(workers) == 1, events  # one worker ran all three
    mine = [line.split()[1] for line in events if line.split()[0] in workers]
    # first on its worker (though the module of 20 has more tests), then the stop, then other tests
    assert mine[:4] == ["real", "real", "real", "stop"], mine
    assert mine.count("stop") == 1 and "plain" in mine[4:], mine
    assert sum(line.endswith(" plain") for line in events) == 25


OWN = '''
import os
import pytest

@pytest.mark.e2e
@pytest.mark.parametrize("i", range(3))
def test_own(i):
    with open(os.environ["EVENTS"], "a") as f:
        f.write(f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')} own\\n")
'''


def test_the_own_broker_tests_go_first_on_the_other_worker(tmp_path):
    """Not behind the live stack's unit: the worker without it takes them first, all three, though
    the module of 20 has more tests."""
    files = {"tests/e2e/test_real.py": REAL, "tests/e2e/own_broker/test_own.py": OWN,
             "tests/webapp/test_big.py": PLAIN.format(n=20, pause=0.1)}
    out, events = run_sample(tmp_path, files, "-n", "2")
    assert out.returncode == 0, out.stdout + out.stderr
    real = {line.split()[0] for line in events if line.endswith(" real")}
    own = {line.split()[0] for line in events if line.endswith(" own")}
    assert len(real) == 1 and len(own) == 1 and real != own, events
    theirs = [line.split()[1] for line in events if line.split()[0] in own]
    assert theirs[:3] == ["own", "own", "own"], theirs


def test_in_one_process_the_stack_stops_at_the_end_as_before(tmp_path):
    files = {"tests/e2e/test_real.py": REAL, "tests/webapp/test_small.py": PLAIN.format(n=2, pause=0)}
    out, events = run_sample(tmp_path, files)
    assert out.returncode == 0, out.stdout + out.stderr
    assert [line.split()[1] for line in events] == ["plain", "plain", "real", "real", "real"]


def test_a_real_process_test_outside_its_folders_is_refused_with_where_to_move_it(tmp_path):
    out, _ = run_sample(tmp_path, {"tests/webapp/test_stray.py": REAL})
    assert out.returncode != 0
    assert "start real processes (live_stack, e2e or browser) outside tests/e2e/ and tests/browser/" in out.stderr
    assert "tests/webapp/test_stray.py::test_real[0]" in out.stderr


CLAIM = """
import sys, time
sys.path.insert(0, {repo!r})
from tests.env_setup import claim_redis_db
print(claim_redis_db(), flush=True)
time.sleep(30)
"""


def test_each_test_process_claims_a_redis_database_no_other_one_holds():
    """Never the app's database 0; a database another process holds is never taken; this process
    runs on its own claim, or on an embedded server where no local one answers."""
    from django.conf import settings

    other = subprocess.Popen([sys.executable, "-c", CLAIM.format(repo=str(REPO))], stdout=subprocess.PIPE, text=True)
    try:
        theirs = int(other.stdout.readline())
        mine = claim_redis_db()  # while they hold theirs
        assert theirs in SUITE_REDIS_DBS and mine in SUITE_REDIS_DBS and mine != theirs
        if "127.0.0.1:6379/" in settings.REDIS_URL:
            assert int(settings.REDIS_URL.rsplit("/", 1)[1]) not in (theirs, mine, 0)  # claimed before both
        else:
            assert ":6379/" not in settings.REDIS_URL  # an embedded server of its own
    finally:
        other.kill()
        other.wait()
