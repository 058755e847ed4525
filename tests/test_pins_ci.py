"""CI must not pass silently: the set-up script stops on a failed install, .ci/run fails a run
with skipped tests, and the browser tests fail without Chromium.

Each script runs for real in a scratch copy of the repository layout, with a stand-in
.venv/bin/python that plays pip and the import check (no network, nothing installed).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HARMLESS = "WARNING: Requirement 'extras' is ignored: it is neither a file nor a directory."


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "LMWB_FAIL_ON_SKIP", "TEST_WORKERS")}
    env.update(extra)
    return env


# ---------------------------------------------------------------------------- the skip guard
SAMPLE = '''
import pytest

def test_passes():
    pass

def test_skips_in_its_body():
    pytest.skip("no widget here")

@pytest.mark.skipif(True, reason="not on this machine")
def test_marked_skipif():
    pass

@pytest.mark.xfail(reason="known bug", strict=True)
def test_expected_failure_that_runs():
    assert False

@pytest.mark.xfail(run=False, reason="would hang")
def test_xfail_not_run():
    pass
'''
MODULE_SKIP = '''
import pytest
pytest.importorskip("a_module_that_is_not_installed_anywhere")

def test_never_collected():
    pass
'''
ONLY_PASSING = '''
import pytest

def test_passes():
    pass

@pytest.mark.xfail(reason="known bug", strict=True)
def test_expected_failure_that_runs():
    assert False
'''


def run_pytest(tmp_path: Path, files: dict[str, str], *, guard: bool, workers: int = 0) -> subprocess.CompletedProcess:
    """pytest in a subprocess on `files`, with the repository's skip guard plugin loaded (in
    `workers` xdist worker processes, as ./test.sh runs the suite, or in one process)."""
    for name, body in files.items():
        (tmp_path / name).write_text(textwrap.dedent(body))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = clean_env(PYTHONPATH=str(REPO))
    if guard:
        env["LMWB_FAIL_ON_SKIP"] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.skip_guard", "-p", "no:django",
                           "-p", "no:cacheprovider", "-q", "--rootdir", str(tmp_path), "-c",
                           str(tmp_path / "pytest.ini"), "-n", str(workers), *files],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_the_suite_loads_the_skip_guard(request):
    assert request.config.pluginmanager.has_plugin("tests.skip_guard")


@pytest.mark.parametrize("workers", [0, 2], ids=["one process", "two xdist workers"])
def test_with_the_guard_any_skip_fails_the_run_and_is_listed(tmp_path, workers):
    files = {"test_sample.py": SAMPLE, "test_module_skip.py": MODULE_SKIP}
    out = run_pytest(tmp_path, files, guard=True, workers=workers)
    text = out.stdout + out.stderr
    assert out.returncode == 1, text
    assert "LMWB_FAIL_ON_SKIP: skipped tests fail this run" in text
    listed = [line for line in text.splitlines() if line.startswith("SKIPPED ")]
    assert any("test_sample.py::test_skips_in_its_body" in line and "no widget here" in line for line in listed)
    assert any("test_sample.py::test_marked_skipif" in line and "not on this machine" in line for line in listed)
    assert any("test_sample.py::test_xfail_not_run" in line for line in listed)
    assert any("test_module_skip.py" in line and "a_module_that_is_not_installed_anywhere" in line
               for line in listed)
    assert not any("test_expected_failure_that_runs" in line or "test_passes" in line for line in listed)
    assert len(listed) == 4, listed


def test_without_the_guard_skips_pass_as_before(tmp_path):
    out = run_pytest(tmp_path, {"test_sample.py": SAMPLE, "test_module_skip.py": MODULE_SKIP}, guard=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "LMWB_FAIL_ON_SKIP" not in out.stdout


def test_with_the_guard_a_run_without_skips_passes(tmp_path):
    out = run_pytest(tmp_path, {"test_fine.py": ONLY_PASSING}, guard=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_ci_run_sets_the_guard_and_calls_test_sh(tmp_path):
    (tmp_path / ".ci").mkdir()
    shutil.copy2(REPO / ".ci" / "run", tmp_path / ".ci" / "run")
    fake = tmp_path / "test.sh"
    fake.write_text('#!/usr/bin/env bash\necho "guard=${LMWB_FAIL_ON_SKIP:-unset}" > called\nexit 3\n')
    fake.chmod(0o755)
    out = subprocess.run(["bash", str(tmp_path / ".ci" / "run")], env=clean_env(), capture_output=True, text=True,
                         timeout=60)
    assert (tmp_path / "called").read_text().strip() == "guard=1"
    assert out.returncode == 3  # test.sh's failure is CI's


# ---------------------------------------------------------------------------- bootstrap.sh
FAKE_PYTHON = r'''#!/usr/bin/env bash
# Stands in for .venv/bin/python: logs each call; plays pip and the import check.
here=$(cd "$(dirname "$0")/../.." && pwd)
echo "$*" >> "$here/calls.log"
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then
  case "${FAKE_PIP:-ok}" in
    fail)   echo "HARMLESS_LINE" >&2
            echo "ERROR: No matching distribution found for nosuchpackage==9.9" >&2
            exit 1 ;;
    ok)     echo "HARMLESS_LINE" >&2
            echo "note: pip said something worth reading" >&2
            exit 0 ;;
    silent) exit 0 ;;
  esac
fi
if [ "$1" = "-c" ]; then
  case "$2" in
    "import torch") exit 0 ;;
    *) exit "${FAKE_IMPORT_STATUS:-0}" ;;
  esac
fi
exit 0
'''


@pytest.fixture
def layout(tmp_path):
    """A scratch repository: scripts/bootstrap.sh, the requirements files, a stand-in venv."""
    (tmp_path / "scripts").mkdir()
    shutil.copy2(REPO / "scripts" / "bootstrap.sh", tmp_path / "scripts" / "bootstrap.sh")
    (tmp_path / "requirements.txt").write_text("django\n")
    (tmp_path / "requirements-test.txt").write_text("-r requirements.txt\npytest\n")
    (tmp_path / "constraints.txt").write_text("django==5.2\n")
    venv_bin = tmp_path / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    python = venv_bin / "python"
    python.write_text(FAKE_PYTHON.replace("HARMLESS_LINE", HARMLESS))
    python.chmod(0o755)
    bin_dir = tmp_path / "bin"  # a Python >= 3.11 for the script's version check
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    return tmp_path


def bootstrap(layout: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    path = f"{layout / 'bin'}:/usr/bin:/bin"
    return subprocess.run(["bash", str(layout / "scripts" / "bootstrap.sh"), *args], cwd=layout,
                          env=clean_env(PATH=path, **env), capture_output=True, text=True, timeout=60)


# The app's own packages: the web stack, sign-in throttling, the offline API page's assets, TensorBoard,
# and the fine-tuning metrics' libraries and the corpus readers' (requirements.txt), which the worker
# needs at run time.
APP_MODULES = "django, torch, tokenizers, celery, channels, axes, drf_spectacular_sidecar, tensorboard"
METRIC_LIBS = "sklearn, scipy, seqeval, rouge_score, sacrebleu, pyarrow, zstandard, xxhash"


def import_checks(layout: Path) -> list[str]:
    return [line for line in (layout / "calls.log").read_text().splitlines()
            if line.startswith("-c import ") and line != "-c import torch"]


@pytest.mark.parametrize("flag, stamp", [("--test", "requirements-test"), ("", "requirements")])
def test_a_failed_pip_install_stops_with_its_error_and_writes_no_stamp(layout, flag, stamp):
    out = bootstrap(layout, *([flag] if flag else []), FAKE_PIP="fail")
    text = out.stdout + out.stderr
    assert out.returncode != 0, text
    assert "No matching distribution found for nosuchpackage" in text  # pip's own error is shown
    assert HARMLESS not in text
    assert not (layout / ".venv" / f".installed-{stamp}").exists()
    assert import_checks(layout) == []  # it stopped at pip


def test_the_test_install_checks_transformers_and_playwright_then_stamps(layout):
    out = bootstrap(layout, "--test", FAKE_PIP="ok")
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    assert "pip said something worth reading" in text and HARMLESS not in text
    [check] = import_checks(layout)
    assert check == f"-c import {APP_MODULES}, {METRIC_LIBS}, transformers, playwright, mlflow, wandb"
    assert (layout / ".venv" / ".installed-requirements-test").is_file()
    again = bootstrap(layout, "--test", FAKE_PIP="fail")  # up to date: pip is not run again
    assert again.returncode == 0 and len(import_checks(layout)) == 1


def test_the_app_install_checks_only_the_app_packages(layout):
    out = bootstrap(layout, FAKE_PIP="silent")  # a quiet pip: grep prints nothing, which is fine
    assert out.returncode == 0, out.stdout + out.stderr
    assert import_checks(layout) == [f"-c import {APP_MODULES}, {METRIC_LIBS}"]
    assert (layout / ".venv" / ".installed-requirements").is_file()


def test_a_failed_import_check_fails_and_writes_no_stamp(layout):
    out = bootstrap(layout, "--test", FAKE_PIP="ok", FAKE_IMPORT_STATUS="1")
    assert out.returncode != 0
    assert "installation failed" in out.stderr
    assert not (layout / ".venv" / ".installed-requirements-test").exists()


# ---------------------------------------------------------------------------- Chromium
def test_ensure_chromium_fails_loudly_without_a_browser(tmp_path):
    bin_dir = tmp_path / "bin"  # no chromium and no apt-get on this PATH: nothing to install with
    bin_dir.mkdir()
    for tool in ("id", "mktemp", "tail", "rm"):
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    script = str(REPO / "scripts" / "ensure_chromium.sh")
    env = clean_env(PATH=str(bin_dir), CHROMIUM_PATH=str(tmp_path / "no-chromium"))
    out = subprocess.run([shutil.which("bash"), script], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "No system Chromium" in out.stderr
    browser = tmp_path / "chromium"
    browser.write_text("#!/bin/sh\n")
    browser.chmod(0o755)
    env["CHROMIUM_PATH"] = str(browser)
    out = subprocess.run([shutil.which("bash"), script], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_test_sh_keeps_ensure_chromiums_failure_visible_and_runs_pytest(tmp_path):
    (tmp_path / "scripts").mkdir()
    shutil.copy2(REPO / "test.sh", tmp_path / "test.sh")
    (tmp_path / "scripts" / "bootstrap.sh").write_text("exit 0\n")
    (tmp_path / "scripts" / "ensure_chromium.sh").write_text('echo "no chromium here" >&2; exit 1\n')
    venv_bin = tmp_path / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "python").write_text('#!/usr/bin/env bash\necho "$*" > "$(dirname "$0")/../../pytest-args"\n')
    (venv_bin / "python").chmod(0o755)
    out = subprocess.run(["bash", str(tmp_path / "test.sh"), "tests/x"], env=clean_env(), capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "no chromium here" in out.stderr and "browser tests to fail" in out.stderr
    # One test process per CPU, the live-stack tests kept together, the 20 slowest listed.
    assert (tmp_path / "pytest-args").read_text().strip() == \
        "-m pytest -n logical --dist loadscope --durations=20 tests/x"
    out = subprocess.run(["bash", str(tmp_path / "test.sh"), "tests/x"], env=clean_env(TEST_WORKERS="0"),
                         capture_output=True, text=True, timeout=60)
    assert (tmp_path / "pytest-args").read_text().strip() == "-m pytest -n 0 --dist loadscope --durations=20 tests/x"
    # A failed set-up stops test.sh.
    (tmp_path / "scripts" / "bootstrap.sh").write_text("exit 7\n")
    out = subprocess.run(["bash", str(tmp_path / "test.sh")], env=clean_env(), capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 7


def test_browser_tests_fail_rather_than_skip_without_chromium(monkeypatch, tmp_path):
    from tests.browser import conftest as browser

    monkeypatch.setattr(browser, "CHROMIUM", str(tmp_path / "no-chromium"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(pytest.fail.Exception, match="No system Chromium"):
        browser.chromium_executable()
    fake = tmp_path / "chromium"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    assert browser.chromium_executable() == str(fake)
