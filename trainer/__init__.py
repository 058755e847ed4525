"""Training and inference for LM Workbench: corpus preparation, tokenizers, data shards, training runs (no HTTP)."""
