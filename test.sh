#!/usr/bin/env bash
# Sets up the test environment on first use and runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/bootstrap.sh --test
bash scripts/ensure_chromium.sh || true
exec .venv/bin/python -m pytest "$@"
