"""Training and inference for LM Workbench: corpus preparation, tokenizers, data shards, training runs (no HTTP)."""

__version__ = "0.1.0"  # the app's one version: `python -m trainer --version` and the API schema (webapp.settings)
