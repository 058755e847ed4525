"""Deployment defaults (issue 29, point 7; issue 31, point 8): the app runs with DEBUG off unless
asked, on a key of its own (./run.sh writes one per install), refuses to start outside DEBUG
without one, and docker-compose.yml's environment passes `manage.py check --deploy`."""
from __future__ import annotations

import os
import re
import secrets
import stat
import subprocess
import sys
from pathlib import Path

import yaml

from tests.test_serve_backoff import load_serve

ROOT = Path(__file__).resolve().parents[1]
SHOW = "import django; django.setup(); from django.conf import settings; print(settings.DEBUG, settings.SECRET_KEY)"


def app_env(tmp_path: Path, **changes: str) -> dict:
    """The environment of a user who set nothing: no DEBUG, no SECRET_KEY."""
    env = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "SECRET_KEY", "DJANGO_SETTINGS_MODULE")}
    env.update(STORAGE_ROOT=str(tmp_path / "var"), DJANGO_SETTINGS_MODULE="webapp.settings", **changes)
    return env


def settings_of(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SHOW], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)


def test_debug_is_off_by_default_and_a_missing_key_is_a_sentence(tmp_path):
    out = settings_of(app_env(tmp_path))
    assert out.returncode != 0
    assert re.search(r"ImproperlyConfigured: SECRET_KEY is not set and .*secret_key does not exist: set SECRET_KEY "
                     r"to a long random string .* or start the app once with \./run\.sh", out.stderr)
    assert "insecure" not in out.stdout


def test_only_an_explicit_debug_runs_on_the_development_key(tmp_path):
    out = settings_of(app_env(tmp_path, DEBUG="1"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "insecure-local-development-key"]


def test_run_sh_writes_a_key_of_its_own_once_and_the_app_runs_on_it_with_debug_off(tmp_path, monkeypatch):
    monkeypatch.delenv("SECRET_KEY", raising=False)
    storage = tmp_path / "var"
    storage.mkdir()
    ensure = load_serve().ensure_secret_key
    path = ensure(storage)
    key = path.read_text().strip()
    assert len(key) >= 50 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert ensure(storage) == path and path.read_text().strip() == key  # kept, not rewritten
    out = settings_of(app_env(tmp_path))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", key]
    monkeypatch.setenv("SECRET_KEY", "from-the-environment")
    assert ensure(tmp_path / "elsewhere") is None  # a key in the environment wins; nothing is written
    assert settings_of(app_env(tmp_path, SECRET_KEY="from-the-environment")).stdout.split()[1] == "from-the-environment"


def compose_environment() -> dict:
    """docker-compose.yml's app environment with its defaults, as `docker compose` would fill it
    in for an operator who set only SECRET_KEY (a required one: ${SECRET_KEY:?...})."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    given = {"SECRET_KEY": secrets.token_urlsafe(50)}
    env = {}
    for name, value in compose["x-app"]["environment"].items():
        def fill(m):
            var, op, default = m.group(1), m.group(2), m.group(3)
            if var in given:
                return given[var]
            assert op == ":-", f"{name} needs {var}"
            return default
        env[name] = re.sub(r"\$\{(\w+)(:[-?])([^}]*)\}", fill, str(value))
    return env


def test_the_compose_defaults_pass_check_deploy(tmp_path):
    env = compose_environment()
    assert env["DJANGO_SETTINGS_MODULE"] == "webapp.settings_production" and env["SECURE_SSL_REDIRECT"] == "1"
    env["STORAGE_ROOT"] = str(tmp_path / "data")  # the container's volume, here
    # as a deployment's environment: none of the test session's own settings (the browser tests set
    # DJANGO_ALLOW_ASYNC_UNSAFE in this process, which check --deploy rightly refuses)
    run_env = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "SECRET_KEY", "DJANGO_ALLOW_ASYNC_UNSAFE")}
    run_env.update(env)
    out = subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"], cwd=ROOT,
                         env=run_env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "no issues" in out.stdout, out.stdout + out.stderr
    # and the plain-HTTP trial the file's comment mentions is what check --deploy warns about
    run_env["SECURE_SSL_REDIRECT"] = "0"
    out = subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"], cwd=ROOT,
                         env=run_env, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "security.W008" in out.stdout + out.stderr
