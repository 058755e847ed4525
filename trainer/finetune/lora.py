"""LoRA as a fine-tuning technique (FinetuneConfig lora_r > 0), on any family's attention and
feed-forward projections (models_lib.core.lora).

    adapters = apply(model, config, sink)   # before techniques.prepare: adapters on, the rest frozen
    ...                                     # checkpoints hold the merged weights (a plain model)
    export(model, out_dir / "peft", sink)   # at the end: peft's adapter + the transformers base

What trains: the adapters and the model's head group (model.layer_groups()[-1]: a task head, or
the final norms and an untied output layer), as peft's task models train their classifier; every
other weight is frozen (requires_grad False, so techniques.prepare leaves it out of the
optimizer). freeze_embeddings / freeze_layers freeze the adapters of those groups too; gradual
unfreezing, which unfreezes whole layers, is refused with LoRA.

Checkpoints are written merged (W + (alpha / r) B A), so they load, explore, export and
fine-tune again like any checkpoint of their class; beside each best checkpoint of early stopping
the adapters are kept (ADAPTERS_FILE), so the best state is restored exactly. At the end of a run
of an encoder, T5 or a GPT language model (models_lib.hf.lora), out_dir/peft/adapter is the
adapter in peft's format and out_dir/peft/base the transformers model (the pre-trained weights with
the trained head: a task head, or T5's and GPT's final norms) that peft loads it onto.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import safetensors.torch
from torch import nn

from trainer.errors import ConfigError

ADAPTERS_FILE = "lora_adapters.safetensors"


def targets_of(config: Any) -> tuple[str, ...]:
    return tuple(t.strip() for t in str(config.lora_targets).split(",") if t.strip())


def apply(model: nn.Module, config: Any, sink: Any = None) -> list[str]:
    """Attach the adapters config asks for and freeze what they replace; [] when lora_r is 0."""
    if not config.lora_r:
        return []
    from models_lib.core import lora

    try:
        names = lora.attach(model, r=int(config.lora_r), alpha=float(config.lora_alpha),
                            dropout=float(config.lora_dropout), targets=targets_of(config))
    except ValueError as e:
        raise ConfigError(f"LoRA: {e}") from None
    head = {id(p) for p in model.layer_groups()[-1]}
    adapters = {id(p) for p in lora.lora_parameters(model)}
    for p in model.parameters():
        p.requires_grad_(id(p) in head or id(p) in adapters)
    if sink is not None:
        trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
        total = sum(p.numel() for p in model.parameters())
        sink.log(f"LoRA r={config.lora_r}, alpha={config.lora_alpha:g}, dropout={config.lora_dropout:g} on "
                 f"{', '.join(targets_of(config))} ({len(names)} projections): {trained:,} of {total:,} parameters "
                 f"train ({100 * trained / total:.2f}%), the adapters and the head; checkpoints hold the merged "
                 f"weights.")
    return names


def is_adapted(model: nn.Module) -> bool:
    from models_lib.core import lora

    return any(True for _ in lora.adapted(model))


def save_adapters(model: nn.Module, folder: Path) -> None:
    """The adapters' tensors beside a (merged) checkpoint, to restore the unmerged state exactly."""
    state = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items() if ".lora." in k}
    safetensors.torch.save_file(state, str(Path(folder) / ADAPTERS_FILE), metadata={"format": "pt"})


def restore(model: nn.Module, folder: Path) -> None:
    """Load a checkpoint written by an adapted run back into the adapted model: the trained
    (non-adapter) weights from its merged file, the adapters from ADAPTERS_FILE. The frozen weights
    stay as they are (the merged file holds W + BA for them)."""
    device = str(next(model.parameters()).device)
    merged = safetensors.torch.load_file(str(Path(folder) / "model.safetensors"), device=device)
    adapters = safetensors.torch.load_file(str(Path(folder) / ADAPTERS_FILE), device=device)
    trained = {n for n, p in model.named_parameters() if p.requires_grad and ".lora." not in n}
    missing = [n for n in trained if n not in merged]
    if missing:
        raise ConfigError(f"The checkpoint {Path(folder).name} lacks {', '.join(sorted(missing)[:3])}.")
    model.load_state_dict({**{n: merged[n] for n in trained}, **adapters}, strict=False)


def export(model: nn.Module, folder: Path, sink: Any = None) -> Path | None:
    """peft's adapter (folder/adapter) and the transformers model it goes on (folder/base), for an
    adapted encoder, T5 or GPT language model; None (and a log line) for a model whose adapters have
    no transformers layout here (GPT-1's classifier, ELMo's task model)."""
    from models_lib import hf
    from models_lib.core import lora
    from models_lib.hf.lora import to_peft

    folder = Path(folder)
    try:
        to_peft(model, folder / "adapter")
    except ValueError as e:
        if sink is not None:
            sink.log(f"No peft adapter written: {e}")
        return None
    with lora.detached(model):
        hf.to_pretrained(model, folder / "base")
    if sink is not None:
        sink.log(f"LoRA adapter in peft's format: {folder.name}/adapter (adapter_config.json, "
                 f"adapter_model.safetensors), for the transformers model in {folder.name}/base.")
    return folder
