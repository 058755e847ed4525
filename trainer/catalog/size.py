"""Whether a model fits before anything allocates it: one check for launching a run and for
importing a Hugging Face model.

A model's parameter count comes from its config alone (`count_params(embeddings=True)` of the
models_lib config classes), so a config with an absurd or merely too large size is refused
with a sentence that names the field, instead of the worker allocating gigabytes or failing
with an allocator's message. Memory is estimated per parameter: training keeps fp32 weights,
their gradients and AdamW's two moments (16 bytes); loading keeps the weights (4 bytes). The
limit is the smaller of MAX_MODEL_PARAMS (a setting, environment variable of the same name)
and what the machine's available memory can hold.

Training also keeps every layer's activations for the backward pass, which grow with the
batch and (through the attention scores) with the square of the length: given the batch
(`Batch`), the same check adds them (`activation_bytes`, as the model's family estimates them:
Family.activation_bytes, trainer.families.activations), so batch_size 8,192 of 8,192 tokens is
refused with a sentence naming those fields, not by the kernel's OOM killer.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from trainer.errors import ConfigError
from trainer.families.activations import transformer_activation_bytes

MAX_MODEL_PARAMS = int(os.environ.get("MAX_MODEL_PARAMS", 3_000_000_000))
TRAIN_BYTES_PER_PARAM = 16  # fp32 weights + gradients + AdamW's exp_avg and exp_avg_sq
LOAD_BYTES_PER_PARAM = 4    # fp32 weights
# The config fields that set a model's size, in the order a message names the culprit.
SIZE_FIELDS = ("hidden_size", "intermediate_size", "num_layers", "num_heads", "embedding_size", "vocab_size",
               "max_position_embeddings", "d_model", "d_ff", "d_kv", "num_decoder_layers", "n_embd", "n_layer",
               "n_inner", "n_positions", "embedding_dim", "projection_dim", "num_hidden_layers", "max_positions")


@dataclass(frozen=True)
class Batch:
    """What one training process holds at once: ``size`` sequences of ``length`` tokens, named by
    the fields the user set them with (``batch_size``, ``seq_len`` or ``max_length``).
    ``processes``: processes of the run on this machine (a CPU run over gloo), each with its own."""
    size: int
    length: int
    size_field: str = "batch_size"
    length_field: str = "seq_len"
    processes: int = 1
    recompute: bool | None = False  # activation checkpointing: each layer's input kept, one layer's worth live;
    # None: the run has no such setting (fine-tuning), so the refusal does not suggest it


def batch_of(config: Any, *, processes: int = 1) -> Batch:
    """The Batch of a pre-training RunConfig (batch_size x seq_len) or a FinetuneConfig
    (batch_size x max_length, no activation_checkpointing setting)."""
    if hasattr(config, "max_length"):  # first: a FinetuneConfig answers seq_len too (its max_length)
        return Batch(int(config.batch_size), int(config.max_length), "batch_size", "max_length", processes, None)
    return Batch(int(config.batch_size), int(config.seq_len), "batch_size", "seq_len", processes,
                 bool(getattr(config, "activation_checkpointing", False)))


def activation_bytes(model_cfg: Any, batch: Batch) -> int:
    """Bytes of activations one training step keeps for its backward pass, per process, as the
    config's family estimates them (Family.activation_bytes); a config of no registered family
    gets the transformer stack's estimate."""
    from trainer import families

    family = families.find(getattr(model_cfg, "family", None))
    if family is None:
        return transformer_activation_bytes(model_cfg, batch)
    return family.activation_bytes(model_cfg, batch)


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
                     memory: int | None | bool = None, max_params: int | None = None,
                     batch: Batch | None = None, memory_of: str = "this machine has free") -> int:
    """The model's parameter count, or ConfigError naming the field (`fields`: the size settings
    the user gave, e.g. model_overrides or config.json's, by the name to show) when it does not fit.
    `memory`: bytes free (None: this machine's now; False: the setting alone, for checks that must
    not depend on the moment, such as reading a stored config); `memory_of` says whose it is in
    the message. With `batch` (training), the activations it keeps count too, in every process."""
    params = int(model_cfg.count_params(embeddings=True))
    per_param = TRAIN_BYTES_PER_PARAM if training else LOAD_BYTES_PER_PARAM
    limit = MAX_MODEL_PARAMS if max_params is None else max_params
    memory = available_memory() if memory is None else (None if memory is False else memory)
    why = ""
    if params > limit:
        why = f"more than the {limit:,} this installation allows (MAX_MODEL_PARAMS)"
    elif memory is not None and params * per_param > memory:
        why = f"more than the {_gb(memory)} of memory {memory_of}"
    elif memory is not None and batch is not None and training:
        _check_activations(model_cfg, batch, params * per_param, memory, where, memory_of)
    if not why:
        return params
    culprit = _culprit(fields)
    named = f"{culprit[0]} = {culprit[1]:,} gives" if culprit else "gives"
    need = f"about {_gb(params * per_param)} to {'train' if training else 'load'}"
    advice = f" Use a smaller {culprit[0]}." if culprit else " Choose a smaller preset."
    raise ConfigError(f"{where}: {named} a model of {params:,} parameters, which needs {need}, {why}.{advice}")


def _check_activations(model_cfg: Any, batch: Batch, weights: int, memory: int, where: str, memory_of: str) -> None:
    activations = activation_bytes(model_cfg, batch)
    need = batch.processes * (weights + activations)
    if need <= memory:
        return
    each = f" in each of its {batch.processes} processes" if batch.processes > 1 else ""
    raise ConfigError(
        f"{where}: {batch.size_field} = {batch.size:,} sequences of {batch.length_field} = {batch.length:,} tokens "
        f"keep about {_gb(activations)} of activations for the backward pass{each} (on top of {_gb(weights)} for "
        f"the model's weights, gradients and optimizer state), more than the {_gb(memory)} of memory {memory_of}. "
        f"Use a smaller {batch.size_field} or {batch.length_field} (raise grad_accum to keep the effective batch)"
        f"{', or turn on activation_checkpointing' if batch.recompute is False else ''}.")


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
