"""Bottleneck adapters as a fine-tuning technique (FinetuneConfig adapter_size d > 0; Houlsby et al.
2019, the T5 study's adapter layers): an adapter after every attention and feed-forward sublayer
(models_lib.core.adapters), on the encoder families, GPT and T5.

    apply(model, config, sink)   # before techniques.prepare: adapters on, the rest frozen

What trains: the adapters, every layer norm (Houlsby et al. train them too), and the model's head
group (model.layer_groups()[-1]: a task head, or the final norms and an untied output layer); every
other weight is frozen (requires_grad False, so techniques.prepare leaves it out of the optimizer).
freeze_embeddings / freeze_layers freeze those groups' adapters and norms too; gradual unfreezing,
which unfreezes whole layers, is refused with adapters (trainer.finetune.config.check_adapters), and
so is LoRA in the same run.

Adapters cannot be merged into the weights (they are not linear), so checkpoints keep them:
model_config.json records their size and models_lib.checkpoint.load_model attaches them again. Such a
checkpoint loads in the explorer and fine-tunes again: with the same adapter_size its adapters go on
training, with 0 everything trains, adapters included. The Hugging Face export refuses it with a
sentence (models_lib.hf.to_pretrained): transformers' classes have no layers for the adapters.
"""
from __future__ import annotations

from typing import Any

from torch import nn

from trainer.errors import ConfigError


def apply(model: nn.Module, config: Any, sink: Any = None) -> list[str]:
    """Attach the adapters config asks for (or keep the checkpoint's) and freeze the rest; [] when
    adapter_size is 0. ConfigError with a sentence for a model that cannot take them."""
    from models_lib.core import adapters

    size, present = int(config.adapter_size), adapters.adapter_size(model)
    if present and config.lora_r:
        raise ConfigError(f"This checkpoint carries bottleneck adapters (size {present}), and LoRA on top of them "
                          f"is not offered: set lora_r to 0 (adapter_size {present} goes on training its adapters).")
    if not size:
        if present and sink is not None:
            sink.log(f"The checkpoint carries bottleneck adapters (size {present}); with adapter_size 0 they train "
                     f"with every other weight.")
        return []
    if present and present != size:
        raise ConfigError(f"This checkpoint already carries bottleneck adapters of size {present}: set adapter_size "
                          f"to {present} to go on training them, or to 0 to train every weight.")
    if present:
        names = [name for name, *_ in adapters.adapted(model)]
    else:
        try:
            names = adapters.attach(model, size=size)
        except ValueError as e:
            raise ConfigError(f"Adapters: {e}") from None
    keep = {id(p) for p in model.layer_groups()[-1]}
    keep |= {id(p) for p in adapters.adapter_parameters(model)}
    keep |= {id(p) for p in adapters.norm_parameters(model)}
    for p in model.parameters():
        p.requires_grad_(id(p) in keep)
    if sink is not None:
        trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
        total = sum(p.numel() for p in model.parameters())
        kept = "The checkpoint's bottleneck adapters" if present else "Bottleneck adapters"
        sink.log(f"{kept} of size {size} after {len(names)} attention and feed-forward sublayers: "
                 f"{trained:,} of {total:,} parameters train ({100 * trained / total:.2f}%), the adapters, the "
                 f"layer norms and the head. Checkpoints keep the adapters, which cannot be merged into the "
                 f"weights, so they have no Hugging Face export.")
    return names
