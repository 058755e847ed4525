"""A run's model and its training step, from the run's family and objectives.

The engine calls `build(config, ...)` for a fresh model and its `Step` (trainer.objectives.base),
then only ever sees `StepOutput`s: a loss to back-propagate, the named losses it is made of,
and (hits, total) pairs for the ratio metrics. The family builds the model
(trainer.catalog), the objective that trains the run's objective set
(trainer.objectives.resolve) says which Step computes its loss and metrics, and prepares what
the step needs besides the model (DistilBERT's teacher).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from trainer import objectives
from trainer import families
from trainer.catalog import validation
from trainer.catalog.size import batch_of, check_model_size, overrides_of
from trainer.errors import ConfigError
from trainer.objectives.base import Step
from trainer.objectives.examples import SpecialIds
from trainer.config import RunConfig


# ---------------------------------------------------------------------------- building
def token_ids(pad_id: int, tokenizer: Any = None) -> dict[str, int]:
    """The special ids a models_lib config may take, by SpecialIds name: from the tokenizer
    (a TokenizerBundle) when given; without one, the pad id and the separator's fixed id
    (trainer.prep.tokenization.ROLES order) as EOS, as SpecialIds does."""
    if tokenizer is not None:
        special = SpecialIds.from_tokenizer(tokenizer)
        return {"pad": special.pad, "eos": special.eos, "sep": special.sep, "cls": special.cls}
    from trainer.prep.tokenization import ROLES

    return {"pad": pad_id, "eos": ROLES.index("sep"), "sep": ROLES.index("sep"), "cls": ROLES.index("cls")}


def model_config(config: RunConfig, vocab_size: int, pad_id: int, tokenizer: Any = None) -> Any:
    """The models_lib config of a run: its preset, its model_overrides, the tokenizer's vocabulary
    and the special ids the family takes (Family.token_fields: T5's pad, EOS and decoder start
    = pad; GPT's pad and EOS; everyone's pad)."""
    spec = families.get(config.family)
    overrides = dict(config.model_overrides)
    ids = token_ids(pad_id, tokenizer)
    tokens = {name: ids[role] for name, role in spec.token_fields.items()}
    cfg = spec.preset_config(config.preset, vocab_size=vocab_size, **tokens, **overrides)
    if validation.max_positions(cfg) < config.seq_len:  # validation.validate refuses this; belt and braces
        raise ConfigError(f"seq_len {config.seq_len} is longer than the model's {validation.max_positions(cfg)} positions.")
    return cfg


def build(config: RunConfig, *, vocab_size: int, pad_id: int, device: str,
          data_dir: Path | None = None, tokenizer: Any = None) -> tuple[nn.Module, Step]:
    """A fresh pre-training model of the run's family (on `device`, in train mode) and its Step.
    `tokenizer` (the run's TokenizerBundle; loaded from data_dir when needed and not given)
    supplies the special ids and, for ELMo's character CNN, the vocabulary's spellings.
    DistilBERT's student starts from every other layer of the teacher (loaded here, frozen)."""
    spec = families.get(config.family)
    objective = objectives.resolve(config.objectives)
    if spec.needs_teacher:
        validation.validate_teacher(config)
    if tokenizer is None and data_dir is not None:
        from trainer.prep.tokenization import load_tokenizer

        tokenizer = load_tokenizer(Path(data_dir))
    cfg = model_config(config, vocab_size, pad_id, tokenizer)
    # Before allocating; on the CPU the activations of batch_size x seq_len come out of the same memory.
    check_model_size(cfg, training=True, fields=overrides_of(config), where="This run's model",
                     batch=batch_of(config) if str(device).startswith("cpu") else None)
    model = spec.build_model(cfg)
    spec.prepare_model(model, tokenizer)  # ELMo's character table
    extra = objective.prepare(config, model, vocab_size=vocab_size, data_dir=data_dir, device=device) \
        if objective.prepare else {}
    model = model.to(device).train()
    return model, objective.step(config, model, device, **extra)
