"""One training step per family: the forward pass, the loss and the metric counts of a batch.

The engine calls `build(config, ...)` for the model and its `Step`, then only ever sees
`StepOutput`s: a loss to back-propagate, the named losses it is made of, and (hits, total)
pairs for the ratio metrics. So train and validation metrics are bookkept the same way for
every family, and a family's metrics are whatever its model output holds:

  BERT / RoBERTa / ALBERT / SpanBERT / UniLM (PreTrainingOutput): mlm_loss, nsp_loss,
      sop_loss, sbo_loss and mlm_acc, nsp_acc, sop_acc, sbo_acc, for the heads present.
  ELECTRA: mlm_loss (the generator's), rtd_loss (the discriminator's), mlm_acc, rtd_acc,
      rtd_precision, rtd_recall; loss = mlm + rtd_weight * rtd. The generator samples from a
      torch.Generator of its own whose state is checkpointed (exact resume); validation
      samples from a fresh one seeded the same way every time (the same corrupted batches).
  DistilBERT: soft_loss (KL(teacher_T || student_T) * T^2 at the masked positions), mlm_loss
      and cos_loss (final hidden states, real tokens), weighted 5 / 2 / 1 by default. The
      teacher (a BERT checkpoint, frozen, eval mode) is not part of the trained model.
  T5 (any of its denoising objectives): lm_loss (mean cross-entropy over the target tokens)
      and lm_acc (argmax accuracy over them); loss = lm_loss.
  GPT: lm_loss and lm_acc over the next-token predictions (labels shifted inside the model).
  ELMo: forward_loss and backward_loss (each weighted by its predicted tokens), forward_acc,
      backward_acc; loss = their mean.

Perplexity is exp of a loss, reported in validation as for MLM: each Step names its
perplexities (`perplexities`: metric -> the loss it exponentiates), "perplexity" from
mlm_loss or lm_loss, and ELMo's forward_perplexity / backward_perplexity per direction (its
"perplexity" is exp of the mean of the two losses, their geometric mean).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainer import families
from trainer.catalog import validation
from trainer.objectives.collators import IGNORE_INDEX, Batch, SpecialIds
from trainer.training.config import RunConfig
from trainer.errors import ConfigError

# Seed namespaces of the ELECTRA sampler (independent of the data generators' streams).
_SAMPLE_TRAIN, _SAMPLE_VALID = 11, 12


@dataclass
class StepOutput:
    loss: torch.Tensor                                    # what backward() uses (0-dim)
    losses: dict[str, torch.Tensor]                       # named parts, each a mean over its `weights`
    weights: dict[str, torch.Tensor | float]              # what each mean is over (targets, sequences, tokens)
    ratios: dict[str, tuple[torch.Tensor | float, torch.Tensor | float]] = field(default_factory=dict)
                                                          # name -> (hits, total), e.g. accuracies


class Step:
    """BERT-style models whose forward takes the batch's model inputs and returns a
    models_lib PreTrainingOutput; the losses and accuracies of the heads present are collected."""

    def __init__(self, config: RunConfig, model: nn.Module, device: str):
        self.config, self.model, self.device = config, model, device

    # metric -> the loss it is exp() of ("loss": the total), reported in validation
    perplexities: dict[str, str] = {"perplexity": "mlm_loss"}

    @property
    def loss_weights(self) -> dict[str, float]:
        """How the named losses add up to the loss (validation recomputes it from their means)."""
        return {"mlm_loss": 1.0, "nsp_loss": 1.0, "sop_loss": 1.0, "sbo_loss": 1.0}

    def inputs(self, batch: Batch) -> dict[str, torch.Tensor]:
        inputs = batch.model_inputs()
        if not getattr(self.model.config, "type_vocab_size", 2):
            inputs["token_type_ids"] = None  # DistilBERT has no token types (single segments only)
        return inputs

    def __call__(self, batch: Batch, *, train: bool) -> StepOutput:
        out = self.model(**self.inputs(batch))
        return collect(out, batch)

    # Extra state to checkpoint (a sampler's RNG); JSON/tensors only, loads with weights_only=True.
    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    def start_validation(self) -> None:
        """Called before each evaluation."""


def collect(out: Any, batch: Batch) -> StepOutput:
    """Losses and accuracies of every head present in a PreTrainingOutput."""
    losses: dict[str, torch.Tensor] = {}
    weights: dict[str, torch.Tensor | float] = {}
    ratios: dict[str, tuple[torch.Tensor | float, torch.Tensor | float]] = {}

    def add(name: str, loss: torch.Tensor | None, logits: torch.Tensor | None, targets: torch.Tensor | None) -> None:
        if loss is None or logits is None or targets is None:
            return
        n = targets.numel()
        losses[f"{name}_loss"] = loss.detach().float()
        weights[f"{name}_loss"] = float(n)
        ratios[f"{name}_acc"] = ((logits.detach().argmax(-1) == targets).sum(), float(n))

    add("mlm", out.mlm_loss, out.mlm_logits, out.mlm_targets)
    add("nsp", out.nsp_loss, out.nsp_logits, batch.nsp_labels)
    add("sop", getattr(out, "sop_loss", None), getattr(out, "sop_logits", None), batch.sop_labels)
    add("sbo", getattr(out, "sbo_loss", None), getattr(out, "sbo_logits", None), getattr(out, "sbo_targets", None))
    return StepOutput(out.loss, losses, weights, ratios)


class ElectraStep(Step):
    """Generator MLM + rtd_weight x discriminator RTD, sampling from a checkpointed generator."""

    def __init__(self, config: RunConfig, model: nn.Module, device: str):
        super().__init__(config, model, device)
        self.sampler = _generator(device, [_SAMPLE_TRAIN, config.seed])
        self.valid_sampler = self.sampler

    @property
    def loss_weights(self) -> dict[str, float]:
        return {"mlm_loss": 1.0, "rtd_loss": self.config.rtd_weight}

    def __call__(self, batch: Batch, *, train: bool) -> StepOutput:
        out = self.model(**self.inputs(batch), rtd_weight=self.config.rtd_weight,
                         generator=self.sampler if train else self.valid_sampler)
        n = out.mlm_targets.numel()
        losses = {"mlm_loss": out.mlm_loss.detach().float(), "rtd_loss": out.rtd_loss.detach().float()}
        weights = {"mlm_loss": float(n), "rtd_loss": out.rtd_tokens}
        ratios = {
            "mlm_acc": ((out.mlm_logits.detach().argmax(-1) == out.mlm_targets).sum(), float(n)),
            "rtd_acc": (out.rtd_correct, out.rtd_tokens),
            "rtd_precision": (out.rtd_true_positives, out.rtd_predicted_positives),
            "rtd_recall": (out.rtd_true_positives, out.rtd_positives),
        }
        return StepOutput(out.loss, losses, weights, ratios)

    def state_dict(self) -> dict[str, Any]:
        return {"sampler": self.sampler.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "sampler" in state:
            self.sampler.set_state(state["sampler"].cpu())

    def start_validation(self) -> None:
        self.valid_sampler = _generator(self.device, [_SAMPLE_VALID, self.config.seed])


class DistillationStep(Step):
    """DistilBERT: soft targets + MLM + cosine, against a frozen teacher."""

    def __init__(self, config: RunConfig, model: nn.Module, device: str, teacher: nn.Module):
        super().__init__(config, model, device)
        self.teacher = teacher

    @property
    def loss_weights(self) -> dict[str, float]:
        return self.config.distill_weights

    def __call__(self, batch: Batch, *, train: bool) -> StepOutput:
        from models_lib.families.distilbert import distillation_losses

        cfg = self.config
        student = self.model(batch.input_ids, batch.attention_mask, None, batch.mlm_labels,
                             output_hidden_states=True)
        with torch.no_grad():
            teacher = self.teacher(batch.input_ids, batch.attention_mask, batch.token_type_ids, batch.mlm_labels,
                                   output_hidden_states=True)
        # Soft targets over the masked positions (the (N, V) logits of both models, same order).
        soft, cos = distillation_losses(student.mlm_logits, teacher.mlm_logits, student.hidden_states[-1],
                                        teacher.hidden_states[-1], batch.attention_mask,
                                        temperature=cfg.distill_temperature)
        loss = cfg.distill_soft_weight * soft + cfg.distill_mlm_weight * student.mlm_loss + cfg.distill_cos_weight * cos
        n = student.mlm_targets.numel()
        losses = {"soft_loss": soft.detach().float(), "mlm_loss": student.mlm_loss.detach().float(),
                  "cos_loss": cos.detach().float()}
        weights = {"soft_loss": float(n), "mlm_loss": float(n), "cos_loss": batch.attention_mask.sum()}
        ratios = {"mlm_acc": ((student.mlm_logits.detach().argmax(-1) == student.mlm_targets).sum(), float(n))}
        return StepOutput(loss, losses, weights, ratios)


class Seq2SeqStep(Step):
    """T5: the encoder reads the corrupted input, the decoder the target shifted right (the
    collator's decoder_input_ids, starting with the pad id); loss and accuracy over the target
    tokens (labels != -100)."""

    perplexities = {"perplexity": "lm_loss"}

    @property
    def loss_weights(self) -> dict[str, float]:
        return {"lm_loss": 1.0}

    def __call__(self, batch: Batch, *, train: bool) -> StepOutput:
        out = self.model(batch.input_ids, batch.attention_mask, batch.decoder_input_ids,
                         batch.decoder_attention_mask, batch.labels)
        return lm_step_output(out.loss, out.logits, batch.labels)


class CausalLMStep(Step):
    """GPT: labels are the input ids (-100 at padding); the logits at t predict the label at t + 1."""

    perplexities = {"perplexity": "lm_loss"}

    @property
    def loss_weights(self) -> dict[str, float]:
        return {"lm_loss": 1.0}

    def __call__(self, batch: Batch, *, train: bool) -> StepOutput:
        out = self.model(batch.input_ids, batch.attention_mask, batch.labels)
        return lm_step_output(out.loss, out.logits[:, :-1], batch.labels[:, 1:])


class ElmoStep(Step):
    """ELMo: the forward LM predicts each next token, the backward LM each previous one; the
    loss is their mean, each reported with its accuracy and (in validation) its perplexity."""

    perplexities = {"forward_perplexity": "forward_loss", "backward_perplexity": "backward_loss",
                    "perplexity": "loss"}

    @property
    def loss_weights(self) -> dict[str, float]:
        return {"forward_loss": 0.5, "backward_loss": 0.5}

    def __call__(self, batch: Batch, *, train: bool) -> StepOutput:
        out = self.model(batch.input_ids, batch.attention_mask)
        losses = {"forward_loss": out.forward_loss.detach().float(), "backward_loss": out.backward_loss.detach().float()}
        weights = {"forward_loss": out.forward_tokens, "backward_loss": out.backward_tokens}
        ratios = {"forward_acc": (out.forward_correct, out.forward_tokens),
                  "backward_acc": (out.backward_correct, out.backward_tokens)}
        return StepOutput(out.loss, losses, weights, ratios)


def lm_step_output(loss: torch.Tensor, logits: torch.Tensor, targets: torch.Tensor) -> StepOutput:
    """lm_loss and lm_acc of (B, L, V) logits against (B, L) targets (-100 = not predicted);
    validation weights the loss by the number of predicted tokens."""
    predicted = targets != IGNORE_INDEX  # (B, L)
    n = predicted.sum()
    hits = ((logits.detach().argmax(-1) == targets) & predicted).sum()
    return StepOutput(loss, {"lm_loss": loss.detach().float()}, {"lm_loss": n}, {"lm_acc": (hits, n)})


STEPS: dict[str, type[Step]] = {"t5": Seq2SeqStep, "gpt": CausalLMStep, "elmo": ElmoStep}


def _generator(device: str, seed: list[int]) -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(int.from_bytes(hashlib.sha256(repr(seed).encode()).digest()[:8], "little") & (2**63 - 1))
    return g


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
    and the special ids the family takes (registry token_fields: T5's pad, EOS and decoder start
    = pad; GPT's pad and EOS; everyone's pad)."""
    spec = families.get(config.architecture)
    overrides = dict(config.model_overrides)
    ids = token_ids(pad_id, tokenizer)
    tokens = {name: ids[role] for name, role in spec.token_fields.items()}
    cfg = spec.preset_config(config.preset, vocab_size=vocab_size, **tokens, **overrides)
    if validation.max_positions(cfg) < config.seq_len:  # registry.validate refuses this; belt and braces
        raise ConfigError(f"seq_len {config.seq_len} is longer than the model's {validation.max_positions(cfg)} positions.")
    return cfg


def build(config: RunConfig, *, vocab_size: int, pad_id: int, device: str,
          data_dir: Path | None = None, tokenizer: Any = None) -> tuple[nn.Module, Step]:
    """A fresh pre-training model of the run's family (on `device`, in train mode) and its Step.
    `tokenizer` (the run's TokenizerBundle; loaded from data_dir when needed and not given)
    supplies the special ids and, for ELMo's character CNN, the vocabulary's spellings.
    DistilBERT's student starts from every other layer of the teacher (loaded here, frozen)."""
    spec = families.get(config.architecture)
    if tokenizer is None and data_dir is not None and spec.name in STEPS:
        from trainer.prep.tokenization import load_tokenizer

        tokenizer = load_tokenizer(Path(data_dir))
    cfg = model_config(config, vocab_size, pad_id, tokenizer)
    model = spec.build_model(cfg)
    if spec.name == "distilbert":
        teacher = load_teacher(config, vocab_size=vocab_size, data_dir=data_dir)
        init_student(model, teacher)
        return model.to(device).train(), DistillationStep(config, model, device, teacher.to(device))
    if spec.name == "elmo" and getattr(cfg, "char_cnn", False):
        set_char_table(model, tokenizer)
    model = model.to(device).train()
    if spec.name == "electra":
        return model, ElectraStep(config, model, device)
    return model, STEPS.get(spec.name, Step)(config, model, device)


def set_char_table(model: nn.Module, tokenizer: Any) -> None:
    """ELMo with the character CNN: each token id's spelling (its UTF-8 bytes between word
    markers), from the tokenizer's vocabulary; a checkpoint stores the table with the weights."""
    from models_lib.families.elmo import char_table
    from trainer.prep.segmenter import vocab_strings

    if tokenizer is None:
        raise ConfigError("ELMo's character CNN spells every token of the vocabulary, so it needs the run's "
                          "tokenizer; train with its tokenizer folder.")
    strings = [s or "" for s in vocab_strings(tokenizer)]  # gaps in the ids: empty spellings
    model.set_char_table(char_table(strings, max_chars=model.config.max_chars))


def load_teacher(config: RunConfig, *, vocab_size: int, data_dir: Path | None) -> nn.Module:
    """The DistilBERT teacher: a BERT checkpoint trained with the run's tokenizer, frozen, in eval mode."""
    from models_lib.checkpoint import load_model

    validation.validate_teacher(config)
    folder = Path(config.teacher_checkpoint)
    if data_dir is not None and (folder / "tokenizer.json").is_file():
        if _digest(folder / "tokenizer.json") != _digest(Path(data_dir) / "tokenizer.json"):
            raise ConfigError(f"The teacher checkpoint {folder.name} was trained with another tokenizer than this "
                              f"run's; a student reads the teacher's vocabulary, so train it on the teacher's "
                              f"tokenizer.")
    try:
        teacher = load_model(folder, map_location="cpu")
    except ValueError as e:
        raise ConfigError(f"The teacher checkpoint {folder.name} cannot be loaded: {e}") from None
    if teacher.config.vocab_size != vocab_size:
        raise ConfigError(f"The teacher's vocabulary has {teacher.config.vocab_size:,} tokens, the run's tokenizer "
                          f"{vocab_size:,}; train the student on the teacher's tokenizer.")
    if not hasattr(teacher, "mlm_head"):
        raise ConfigError(f"The teacher checkpoint {folder.name} has no masked-LM head to distil.")
    teacher.eval().requires_grad_(False)
    return teacher


@torch.no_grad()
def init_student(student: nn.Module, teacher: nn.Module) -> None:
    """Copy models_lib's distil_from_teacher initialisation (teacher layers 0, 2, 4, ...,
    embeddings, MLM head) into the student built from the run's config."""
    from models_lib.families.distilbert import distil_from_teacher

    try:
        student.load_state_dict(distil_from_teacher(teacher).state_dict(), strict=True)
    except (RuntimeError, ValueError) as e:  # registry.validate_teacher checks all this first; belt and braces
        raise ConfigError(f"The student does not fit its teacher: {e}") from None


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
