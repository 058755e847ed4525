"""Reproducible installs: constraints.txt pins every package the requirements name (PyTorch
aside: bootstrap.sh picks its build), and this environment has exactly those versions."""
from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _name(text: str) -> str:
    return re.sub(r"[-_.]+", "-", text).lower()


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not a pin (name==version)"
            pins[_name(name)] = version.strip()
    return pins


def _required() -> set[str]:
    names = set()
    for path in ROOT.glob("requirements*.txt"):
        for line in path.read_text().splitlines():
            line = line.split("#")[0].strip()
            if line and not line.startswith("-r"):
                names.add(_name(re.split(r"[<>=!~\[; ]", line, maxsplit=1)[0]))
    return names - {"torch"}


def test_every_requirement_is_pinned():
    missing = sorted(_required() - set(_pins()))
    assert not missing, f"not in constraints.txt (run scripts/update_constraints.sh): {missing}"


def test_the_suite_runs_with_the_pinned_versions():
    pins = _pins()
    differ = {n: (metadata.version(n), pins[n]) for n in sorted(_required()) if metadata.version(n) != pins[n]}
    assert not differ, f"installed vs constraints.txt: {differ}"
