"""LoRA adapters (models_lib.core.lora) in peft's format (no peft import): the encoder families,
T5 (T5ForConditionalGeneration) and GPT-2 (GPT2LMHeadModel).

    to_peft(model, "adapter/")          # adapter_config.json + adapter_model.safetensors
    with lora.detached(model): hf.to_pretrained(model, "base/")   # the transformers model it goes on

peft loads the folder onto that transformers model (PeftModel.from_pretrained(base, "adapter/"))
with our outputs. Each adapted slice becomes one transformers module's lora_A / lora_B, named
along the format's NameMap, and adapter_config.json lists those modules by their full names so
that peft adapts exactly them:

- where transformers keeps separate layers and we keep one fused matrix (the encoders' and T5's
  query/key/value, T5's cross-attention key/value), each slice's adapter is written to its own
  layer (the slices share nothing, as we train them);
- where transformers fuses them too (GPT-2's c_attn), the slices' adapters are written as one of
  rank r * (slices adapted): A stacks the slices' A, B holds each slice's B in its rows and its
  block of columns (zeros elsewhere), so B A is the fused update; rank_pattern and alpha_pattern
  give that layer its rank and an alpha that keeps the scale alpha / r. GPT-2's projections are
  Conv1D (weights stored (in, out)), so the config says fan_in_fan_out; lora_A / lora_B keep
  the torch Linear shapes peft gives them there too.
"""
from __future__ import annotations

import json
from pathlib import Path

import safetensors.torch
import torch
from torch import nn

from models_lib.core import lora
from models_lib.core.config import EncoderConfig

PEFT_PREFIX = "base_model.model."


class _Layout:
    """Where a model's adapters go in transformers: our full weight name -> transformers' weight
    names (one, or one per slice), their prefix, and what adapter_config.json says of the model."""

    def __init__(self, names: dict[str, tuple[str, ...]], prefix: str, task_type: str | None,
                 fan_in_fan_out: bool = False):
        self.names, self.prefix, self.task_type, self.fan_in_fan_out = names, prefix, task_type, fan_in_fan_out


NOT_WRITABLE = ("LoRA adapters are written in peft's format for the encoder families (BERT, RoBERTa, ALBERT, "
                "ELECTRA, DistilBERT, SpanBERT, UniLM), T5 and GPT-2 style GPT language models; {what}. Its "
                "checkpoints hold the merged weights.")


def _layout(model: nn.Module) -> _Layout:
    from models_lib.families.gpt import GPTLMHeadModel
    from models_lib.families.pretraining import EncoderWithHeads
    from models_lib.families.t5 import T5ForConditionalGeneration

    if isinstance(model, T5ForConditionalGeneration):
        from models_lib.hf import t5

        return _Layout(dict(t5.names(model.config)), "", "SEQ_2_SEQ_LM")
    if type(model) is GPTLMHeadModel:  # not GPT-1's task models built on it: GPT-2 has no place for their heads
        from models_lib.hf import gpt2

        if model.config.norm_placement != "pre":
            raise ValueError(NOT_WRITABLE.format(what="this GPT-1 style (post-norm) model has no GPT-2 layout"))
        return _Layout({ours: (theirs,) for ours, theirs, _ in gpt2.weight_names(model.config)},
                       gpt2.BASE_PREFIX, "CAUSAL_LM", fan_in_fan_out=True)
    config = getattr(model, "config", None)
    if not isinstance(config, EncoderConfig) or not isinstance(model, EncoderWithHeads):
        raise ValueError(NOT_WRITABLE.format(what=f"{type(model).__name__} is not one"))
    from models_lib.hf import encoder_format

    fmt = encoder_format(config.family)
    prefix = model.backbone_name + "."
    return _Layout({prefix + ours: theirs for ours, theirs in fmt.backbone_names(config)}, fmt.base_prefix, None)


def _fused(adapter: lora.LoRAAdapter) -> tuple[torch.Tensor, torch.Tensor]:
    """One (A, B) pair whose product B A is the adapter's whole update (before the scale): the
    slices' A stacked, each slice's B in its rows and its own block of columns."""
    r = adapter.r
    a = torch.cat(list(adapter.lora_A), dim=0)
    b = a.new_zeros(adapter.size * adapter.parts, r * len(adapter.enabled))
    for k, i in enumerate(adapter.enabled):
        b[i * adapter.size:(i + 1) * adapter.size, k * r:(k + 1) * r] = adapter.lora_B[k]
    return a, b


def to_peft(model: nn.Module, folder: str | Path) -> Path:
    """Write `model`'s adapters as a peft LoRA adapter; ValueError when there is none or the model
    has no transformers layout here. The adapters' dropout and scale are written as trained."""
    layout = _layout(model)
    tensors: dict[str, torch.Tensor] = {}
    modules: list[str] = []
    ranks: dict[str, int] = {}
    alphas: dict[str, float] = {}
    settings: set[tuple[int, float, float]] = set()
    for name, _, adapter in lora.adapted(model):
        theirs = layout.names.get(f"{name}.weight")
        if theirs is None or len(theirs) not in (1, adapter.parts):
            raise ValueError(f"The adapted layer {name} has no transformers counterpart to write it to.")
        if len(theirs) == adapter.parts:  # one transformers layer per slice
            pairs = [(theirs[i], adapter.lora_A[k], adapter.lora_B[k]) for k, i in enumerate(adapter.enabled)]
        else:  # transformers fuses the slices as we do (GPT-2's c_attn)
            pairs = [(theirs[0], *_fused(adapter))]
            if len(adapter.enabled) > 1:
                # the pattern is matched against the name's end behind a "." (peft's get_pattern_key)
                key = theirs[0].removesuffix(".weight")
                ranks[key] = adapter.r * len(adapter.enabled)
                alphas[key] = adapter.alpha * len(adapter.enabled)  # the scale stays alpha / r
        for their_name, a, b in pairs:
            module = layout.prefix + their_name.removesuffix(".weight")
            tensors[f"{PEFT_PREFIX}{module}.lora_A.weight"] = a
            tensors[f"{PEFT_PREFIX}{module}.lora_B.weight"] = b
            modules.append(module)
        settings.add((adapter.r, adapter.alpha, float(adapter.dropout.p)))
    if not modules:
        raise ValueError("The model has no LoRA adapter to write.")
    if len(settings) != 1:
        raise ValueError("peft's format holds one rank, alpha and dropout for all adapters; these differ.")
    (r, alpha, dropout), = settings
    config = {
        "peft_type": "LORA", "task_type": layout.task_type, "r": r, "lora_alpha": alpha, "lora_dropout": dropout,
        "target_modules": sorted(modules), "bias": "none", "fan_in_fan_out": layout.fan_in_fan_out,
        "modules_to_save": None, "init_lora_weights": True, "use_rslora": False, "use_dora": False,
        "rank_pattern": ranks, "alpha_pattern": alphas, "inference_mode": True, "base_model_name_or_path": None,
    }
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu", torch.float32).clone().contiguous() for k, v in tensors.items()}
    safetensors.torch.save_file(tensors, str(folder / "adapter_model.safetensors"), metadata={"format": "pt"})
    (folder / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n")
    return folder
