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

# What must import afterwards: the app's packages, plus the test suite's references and browser
# driver and report_to's trackers with --test (a missing one would otherwise turn whole test files
# into skips).
modules="django, torch, tokenizers, celery, channels, axes, drf_spectacular_sidecar, tensorboard, sklearn, scipy, seqeval, rouge_score, sacrebleu, pyarrow, zstandard, xxhash"
[ "$want" = requirements-test.txt ] && modules="$modules, transformers, playwright, mlflow, wandb"

stamp=".venv/.installed-$(basename "$want" .txt)"
sum=$(cat requirements*.txt constraints.txt | cksum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$sum" ]; then
  echo "==> installing $want"
  # The grep hides pip's harmless "is ignored: it is neither a file nor a directory" lines. It
  # exits 1 when it prints nothing (a quiet, successful pip), so its status is dropped; pip's is
  # kept (pipefail makes it the pipeline's) and stops the script before the stamp is written.
  status=0
  # constraints.txt: the versions the suite passed with (scripts/update_constraints.sh).
  "$vpy" -m pip install -q -r "$want" -c constraints.txt 2>&1 \
    | { grep -v "is ignored: it is neither a file nor a directory" || true; } || status=$?
  if [ "$status" -ne 0 ]; then
    echo "pip could not install $want (exit status $status); its error is above." >&2
    exit "$status"
  fi
  "$vpy" -c "import $modules" || { echo "installation failed: one of $modules does not import" >&2; exit 1; }
  echo "$sum" > "$stamp"
fi
