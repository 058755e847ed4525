#!/usr/bin/env bash
# Creates .venv and installs what the app (or, with --test, the test suite) needs.
# Safe to run again: it only reinstalls when a requirements file changed.
set -euo pipefail
cd "$(dirname "$0")/.."
want=requirements.txt
[ "${1:-}" = "--test" ] && want=requirements-test.txt

py=""
for cand in python3.13 python3.12 python3.11 python3; do
  if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    py=$cand; break
  fi
done
[ -n "$py" ] || { echo "LM Workbench needs Python 3.11 or newer on PATH." >&2; exit 1; }

if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv with $py"
  "$py" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
fi
vpy=.venv/bin/python

# PyTorch first. On a machine without an NVIDIA GPU prefer the pinned release, which
# resolves to a local CPU build where one is provided instead of a multi-GB CUDA download.
if ! "$vpy" -c 'import torch' >/dev/null 2>&1; then
  echo "==> installing PyTorch"
  if command -v nvidia-smi >/dev/null 2>&1; then
    "$vpy" -m pip install -q "torch>=2.6"
  else
    "$vpy" -m pip install -q "torch==2.13.0" 2>/dev/null || "$vpy" -m pip install -q "torch>=2.6"
  fi
fi

stamp=".venv/.installed-$(basename "$want" .txt)"
sum=$(cat requirements*.txt | cksum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$sum" ]; then
  echo "==> installing $want"
  "$vpy" -m pip install -q -r "$want" 2>&1 | grep -v "is ignored: it is neither a file nor a directory" || true
  "$vpy" -c 'import django, torch, tokenizers, celery, channels' || { echo "installation failed" >&2; exit 1; }
  echo "$sum" > "$stamp"
fi
