"""Training and inference for LM Workbench: corpus preparation, tokenizers, data shards, training runs (no HTTP)."""
import os

__version__ = "0.1.0"  # the app's one version: `python -m trainer --version` and the API schema (webapp.settings)

# oneDNN, PyTorch's CPU kernels, keeps a compiled primitive per input shape, 1,024 of them by default.
# Packed batches change shape from step to step, so that cache grew a CPU run's memory without end
# (bert-mini: 613 MB at step 1, 1,070 MB at step 300; issue 31, point 7); 8 keep it flat (676 MB at
# step 200 against 962 MB) at the same speed (70 s against 72 s for 200 steps; bench/RESULTS.md).
# It is read when the library first runs, so it is set here, before any of our modules imports torch;
# a value the environment already has wins.
PRIMITIVE_CACHE = "8"
os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", PRIMITIVE_CACHE)
