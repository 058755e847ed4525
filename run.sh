#!/usr/bin/env bash
# Sets everything up on first use, then starts Redis (if none is reachable), the web
# server, a Celery worker and the scheduler (Celery beat), and prints the URL. Ctrl-C stops them all.
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/bootstrap.sh
exec .venv/bin/python scripts/serve.py "$@"
