#!/usr/bin/env bash
# Sets up the test environment on first use and runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/bootstrap.sh --test
# Without Chromium the rest of the suite still runs; the browser tests fail (never skip), and
# the script has said why above.
bash scripts/ensure_chromium.sh || echo "==> continuing without Chromium: expect the browser tests to fail" >&2
# pytest-xdist: one test process per CPU (TEST_WORKERS=0 runs them all in this one); the tests with
# real processes run together in one of them (tests/livestack.py). The 20 slowest are listed.
exec .venv/bin/python -m pytest -n "${TEST_WORKERS:-logical}" --dist loadscope --durations=20 "$@"
