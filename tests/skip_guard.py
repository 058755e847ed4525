"""A pytest plugin (loaded by tests/conftest.py): with LMWB_FAIL_ON_SKIP=1 in the environment,
as .ci/run sets it, a run in which any test was skipped fails, after listing the skips.

In CI a skip means something the suite needs was missing (transformers, Playwright, Chromium,
a service), and a green run would hide that. Counted as skips: tests skipped at setup or in
their body (pytest.skip, skipif), whole modules skipped while collecting
(pytest.importorskip at the top of a file), and xfail(run=False) tests, which never run. An
xfail test that ran and failed as expected is not a skip. Without the variable nothing changes.
"""
from __future__ import annotations

import os

import pytest

ENV = "LMWB_FAIL_ON_SKIP"


def enabled() -> bool:
    return os.environ.get(ENV, "").strip() not in ("", "0")


def skip_reason(report: pytest.CollectReport | pytest.TestReport) -> str | None:
    """Why this report is a skip, or None when it is not one."""
    if not report.skipped:
        return None
    wasxfail = getattr(report, "wasxfail", None)
    if wasxfail is not None:  # an expected failure; it ran unless marked run=False
        return f"xfail, not run: {wasxfail}" if str(wasxfail).startswith("[NOTRUN]") else None
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # (path, line, "Skipped: reason")
        return str(longrepr[2])
    return str(longrepr)


class SkipGuard:
    def __init__(self) -> None:
        self.skipped: dict[str, str] = {}  # node id -> reason

    def _note(self, report: pytest.CollectReport | pytest.TestReport) -> None:
        reason = skip_reason(report)
        if reason is not None:
            self.skipped.setdefault(report.nodeid or "<collection>", reason)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self._note(report)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._note(report)

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.skipped:
            return
        terminalreporter.section(f"{ENV}: skipped tests fail this run", sep="=", red=True, bold=True)
        for nodeid, reason in self.skipped.items():
            terminalreporter.write_line(f"SKIPPED {nodeid} - {reason}")

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.skipped and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_configure(config: pytest.Config) -> None:
    if enabled() and not config.pluginmanager.has_plugin("lmwb-skip-guard"):
        config.pluginmanager.register(SkipGuard(), "lmwb-skip-guard")
