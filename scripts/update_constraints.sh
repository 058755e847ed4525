#!/usr/bin/env bash
# Pins every package of .venv (except PyTorch, which bootstrap.sh installs for the machine's
# hardware) into constraints.txt, which run.sh and test.sh install with. Run it after a
# deliberate upgrade (pip install -U NAME in .venv, then the whole test suite), and commit the result.
set -euo pipefail
cd "$(dirname "$0")/.."
{
  echo "# The versions the test suite passed with; scripts/bootstrap.sh installs with them."
  echo "# Regenerate with scripts/update_constraints.sh after a deliberate upgrade. PyTorch is"
  echo "# left out: bootstrap.sh picks the build for the machine (CPU or CUDA)."
  .venv/bin/python -m pip freeze --exclude-editable 2>/dev/null \
    | grep -viE '^(torch|triton|nvidia-[a-z0-9-]+|pip|setuptools|wheel)==' | LC_ALL=C sort -f
} > constraints.txt
echo "constraints.txt: $(grep -vc '^#' constraints.txt) pins"
