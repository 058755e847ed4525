"""Loading a benchmark script of bench/ as a module, for the tests of its pieces."""
from __future__ import annotations

import contextlib
import importlib.util
import sys
from pathlib import Path
from typing import Iterator

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"


@contextlib.contextmanager
def bench_module(name: str) -> Iterator[object]:
    """bench/<name>.py imported as the module bench_<name>, registered in sys.modules while in use
    (its dataclasses look their module up there) and removed after."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH_DIR / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)
