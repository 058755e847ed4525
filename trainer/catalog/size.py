"""Whether a model fits before anything allocates it: one check for launching a run and for
importing a Hugging Face model.

A model's parameter count comes from its config alone (`count_params(embeddings=True)` of the
models_lib config classes), so a config with an absurd or merely too large size is refused
with a sentence that names the field, instead of the worker allocating gigabytes or failing
with an allocator's message. Memory is estimated per parameter: training keeps fp32 weights,
their gradients and AdamW's two moments (16 bytes); loading keeps the weights (4 bytes). The
limit is the smaller of MAX_MODEL_PARAMS (a setting, environment variable of the same name)
and what the machine's available memory can hold.
"""
from __future__ import annotations

import os
import re
from typing import Any

from trainer.errors import ConfigError

MAX_MODEL_PARAMS = int(os.environ.get("MAX_MODEL_PARAMS", 3_000_000_000))
TRAIN_BYTES_PER_PARAM = 16  # fp32 weights + gradients + AdamW's exp_avg and exp_avg_sq
LOAD_BYTES_PER_PARAM = 4    # fp32 weights
# The config fields that set a model's size, in the order a message names the culprit.
SIZE_FIELDS = ("hidden_size", "intermediate_size", "num_layers", "num_heads", "embedding_size", "vocab_size",
               "max_position_embeddings", "d_model", "d_ff", "d_kv", "num_decoder_layers", "n_embd", "n_layer",
               "n_inner", "n_positions", "embedding_dim", "projection_dim", "num_hidden_layers", "max_positions")


def available_memory() -> int | None:
    """Bytes of memory the machine can still give (MemAvailable), or None where unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_model_size(model_cfg: Any, *, training: bool, fields: dict[str, Any], where: str,
                     memory: int | None | bool = None, max_params: int | None = None) -> int:
    """The model's parameter count, or ConfigError naming the field (`fields`: the size settings
    the user gave, e.g. model_overrides or config.json's, by the name to show) when it does not fit.
    `memory`: bytes free (None: this machine's now; False: the setting alone, for checks that must
    not depend on the moment, such as reading a stored config)."""
    params = int(model_cfg.count_params(embeddings=True))
    per_param = TRAIN_BYTES_PER_PARAM if training else LOAD_BYTES_PER_PARAM
    limit = MAX_MODEL_PARAMS if max_params is None else max_params
    memory = available_memory() if memory is None else (None if memory is False else memory)
    why = ""
    if params > limit:
        why = f"more than the {limit:,} this installation allows (MAX_MODEL_PARAMS)"
    elif memory is not None and params * per_param > memory:
        why = f"more than the {_gb(memory)} of memory this machine has free"
    if not why:
        return params
    culprit = _culprit(fields)
    named = f"{culprit[0]} = {culprit[1]:,} gives" if culprit else "gives"
    need = f"about {_gb(params * per_param)} to {'train' if training else 'load'}"
    advice = f" Use a smaller {culprit[0]}." if culprit else " Choose a smaller preset."
    raise ConfigError(f"{where}: {named} a model of {params:,} parameters, which needs {need}, {why}.{advice}")


def overrides_of(config: Any) -> dict[str, Any]:
    """A run config's model_overrides, named as the launch form and API name them."""
    return {f"model_overrides.{k}": v for k, v in (config.model_overrides or {}).items()}


def _culprit(fields: dict[str, Any]) -> tuple[str, int] | None:
    """The size field with the largest value (the likeliest cause), by SIZE_FIELDS' names."""
    sized = [(name, int(value)) for name, value in fields.items()
             if re.split(r"[ .]", name)[-1] in SIZE_FIELDS and isinstance(value, int) and not isinstance(value, bool)]
    return max(sized, key=lambda item: item[1]) if sized else None


def _gb(n: int) -> str:
    return f"{n / 1024**3:,.1f} GB" if n >= 1024**3 / 10 else f"{n / 1024**2:,.0f} MB"
