"""LoRA adapters (models_lib.core.lora) in peft's format, for the encoder families (no peft import).

    to_peft(model, "adapter/")          # adapter_config.json + adapter_model.safetensors
    with lora.detached(model): hf.to_pretrained(model, "base/")   # the transformers model it goes on

peft loads the folder onto that transformers model (PeftModel.from_pretrained(base, "adapter/"))
with our outputs. Each adapted slice becomes one transformers module's lora_A / lora_B (a fused
Q/K/V adapter is written as three: query, key and value share nothing, as we train them), named
along the format's NameMap, and adapter_config.json lists those modules by their full names so
that peft adapts exactly them.
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


def _names(model: nn.Module) -> tuple[dict[str, tuple[str, ...]], str]:
    """Our full parameter name -> transformers' names (one, or three for Q/K/V), and the HF prefix."""
    from models_lib.families.pretraining import EncoderWithHeads
    from models_lib.hf import FAMILY_FORMATS, FORMATS

    config = getattr(model, "config", None)
    if not isinstance(config, EncoderConfig) or not isinstance(model, EncoderWithHeads):
        raise ValueError(f"LoRA adapters are written in peft's format for the encoder families (BERT, RoBERTa, "
                         f"ALBERT, ELECTRA, DistilBERT, SpanBERT, UniLM); {type(model).__name__} is not one. Its "
                         f"checkpoints hold the merged weights.")
    fmt = FORMATS[FAMILY_FORMATS[config.family]]
    prefix = model.backbone_name + "."
    return {prefix + ours: theirs for ours, theirs in fmt.backbone_names(config)}, fmt.base_prefix


def to_peft(model: nn.Module, folder: str | Path) -> Path:
    """Write `model`'s adapters as a peft LoRA adapter; ValueError when there is none or the family
    has no transformers layout here. The adapters' dropout and scale are written as trained."""
    names, hf_prefix = _names(model)
    tensors: dict[str, torch.Tensor] = {}
    modules: list[str] = []
    settings: set[tuple[int, float, float]] = set()
    for name, _, adapter in lora.adapted(model):
        theirs = names.get(f"{name}.weight")
        if theirs is None or len(theirs) != adapter.parts:
            raise ValueError(f"The adapted layer {name} has no transformers counterpart to write it to.")
        for k, i in enumerate(adapter.enabled):
            module = hf_prefix + theirs[i].removesuffix(".weight")
            tensors[f"{PEFT_PREFIX}{module}.lora_A.weight"] = adapter.lora_A[k]
            tensors[f"{PEFT_PREFIX}{module}.lora_B.weight"] = adapter.lora_B[k]
            modules.append(module)
        settings.add((adapter.r, adapter.alpha, float(adapter.dropout.p)))
    if not modules:
        raise ValueError("The model has no LoRA adapter to write.")
    if len(settings) != 1:
        raise ValueError("peft's format holds one rank, alpha and dropout for all adapters; these differ.")
    (r, alpha, dropout), = settings
    config = {
        "peft_type": "LORA", "task_type": None, "r": r, "lora_alpha": alpha, "lora_dropout": dropout,
        "target_modules": sorted(modules), "bias": "none", "fan_in_fan_out": False, "modules_to_save": None,
        "init_lora_weights": True, "use_rslora": False, "use_dora": False, "inference_mode": True,
        "base_model_name_or_path": None,
    }
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu", torch.float32).clone().contiguous() for k, v in tensors.items()}
    safetensors.torch.save_file(tensors, str(folder / "adapter_model.safetensors"), metadata={"format": "pt"})
    (folder / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n")
    return folder
