"""Decoder-only and biLM batches: GPT's next-token prediction (`clm`) and ELMo's forward and
backward language models (`bilm`).

Both read the corpus as one stream, documents one after another, each followed by EOS (GPT-2's
<|endoftext|> between texts), cut into rows of exactly seq_len tokens (trainer.objectives.examples.
TextLayout "chunks"); only the stream's last row can be shorter, and only it is padded.
labels are the input ids with -100 at padding: the model shifts them itself (Hugging Face's
convention), and a biLM reads them in both directions. Nothing here is random, so static and
dynamic masking give the same batches; the epoch order still comes from trainer.training.data.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Sequence

import numpy as np
import torch

from trainer.errors import ConfigError
from trainer.charts import BLUE, GREEN, TRAIN, VALID, MetricSpec, StatSpec, train_then_valid
from trainer.charts import LM_METRICS as LM_CHARTS
from trainer.charts import LM_STATS
from trainer.objectives.base import Batch, Objective, Step, StepOutput
from trainer.objectives.denoising import LM_METRICS, lm_step_output
from trainer.objectives.examples import Example, SpecialIds, TextLayout
from trainer.objectives.masking import IGNORE_INDEX


@dataclass
class LMBatch(Batch):
    labels: torch.Tensor     # (B, T) long: the input ids, -100 at padding (the model shifts them)
    full: bool = False       # every row is real to its end (known on the host when collated): the
                             # model is given no padding mask, so it need not ask the device whether
                             # anything is padded (a sync in every step; a graph break when compiled)

    def model_inputs(self) -> dict[str, torch.Tensor]:
        return {"input_ids": self.input_ids, "attention_mask": self.attention_mask, "labels": self.labels}


@dataclass
class CausalLMCollator:
    """Packed rows of seq_len tokens with EOS after every document; labels = input ids.
    Takes build_collator's arguments (mask_prob and the masking options are unused)."""

    special: SpecialIds
    seq_len: int
    mask_prob: float = 0.15
    seed: int = 0
    masking_unit: str = "token"
    phrase_breaks: np.ndarray | None = field(default=None, repr=False)

    objective: ClassVar[str] = "clm"

    def __post_init__(self) -> None:
        if self.masking_unit != "token":
            raise ConfigError(f"The {self.objective} objective masks nothing; it takes no "
                              f"{self.masking_unit!r} masking.")
        if self.seq_len < 2:
            raise ConfigError(f"Language-model rows need a seq_len of at least 2, not {self.seq_len}.")

    @property
    def needs_word_starts(self) -> bool:
        return False

    @property
    def layout(self) -> TextLayout:
        return TextLayout("chunks", self.seq_len, doc_sep=self.special.eos)

    def __call__(self, examples: Sequence[Example]) -> LMBatch:
        if not examples:
            raise ValueError("cannot collate an empty list of examples")
        B, T = len(examples), self.seq_len
        input_ids = np.full((B, T), self.special.pad, dtype=np.int64)
        attention = np.zeros((B, T), dtype=np.int64)
        for b, ex in enumerate(examples):
            ids = np.asarray(ex.a, dtype=np.int64)
            if len(ids) > T:
                raise ValueError(f"{self.objective}: a row of {len(ids)} tokens is longer than seq_len {T}")
            input_ids[b, :len(ids)] = ids
            attention[b, :len(ids)] = 1
        labels = np.where(attention == 1, input_ids, IGNORE_INDEX)
        return LMBatch(input_ids=torch.from_numpy(input_ids), attention_mask=torch.from_numpy(attention),
                       labels=torch.from_numpy(labels), full=bool(attention.all()))


@dataclass
class BiLMCollator(CausalLMCollator):
    """ELMo's rows: the same packed rows as `clm`; the model predicts the next token with its
    forward LSTM and the previous one with its backward LSTM."""

    objective: ClassVar[str] = "bilm"


class CausalLMStep(Step):
    """GPT: labels are the input ids (-100 at padding); the logits at t predict the label at t + 1."""

    perplexities = {"perplexity": "lm_loss"}

    @property
    def loss_weights(self) -> dict[str, float]:
        return {"lm_loss": 1.0}

    def __call__(self, batch: LMBatch, *, train: bool) -> StepOutput:
        out = self.model(batch.input_ids, None if batch.full else batch.attention_mask, batch.labels)
        return lm_step_output(out.loss, out.logits[:, :-1], batch.labels[:, 1:])


class ElmoStep(Step):
    """ELMo: the forward LM predicts each next token, the backward LM each previous one; the
    loss is their mean, each reported with its accuracy and (in validation) its perplexity
    ("perplexity" is exp of the mean of the two losses, their geometric mean)."""

    perplexities = {"forward_perplexity": "forward_loss", "backward_perplexity": "backward_loss",
                    "perplexity": "loss"}

    @property
    def loss_weights(self) -> dict[str, float]:
        return {"forward_loss": 0.5, "backward_loss": 0.5}

    def __call__(self, batch: LMBatch, *, train: bool) -> StepOutput:
        out = self.model(batch.input_ids, batch.attention_mask)
        losses = {"forward_loss": out.forward_loss.detach().float(), "backward_loss": out.backward_loss.detach().float()}
        weights = {"forward_loss": out.forward_tokens, "backward_loss": out.backward_tokens}
        ratios = {"forward_acc": (out.forward_correct, out.forward_tokens),
                  "backward_acc": (out.backward_correct, out.backward_tokens)}
        return StepOutput(out.loss, losses, weights, ratios)


CLM = Objective(
    name="clm",
    label="Causal language modelling (CLM)",
    help="Next-token prediction, left to right, on packed sequences: the corpus is read as one stream "
         "cut into pieces of seq_len tokens, documents separated by the end-of-text token.",
    collator=CausalLMCollator, step=CausalLMStep, metrics=LM_METRICS, collator_label="Causal LM (GPT)",
    charts=LM_CHARTS,
    stats=LM_STATS,
    inspector_note="Causal language modelling: every token is predicted from the tokens before it; nothing is "
                   "hidden.",
)

BILM = Objective(
    name="bilm",
    label="Bidirectional LM (ELMo)",
    help="A forward LSTM language model predicts each next token, a backward one each previous token; "
         "they share the token representation and the softmax, and the loss is their mean.",
    collator=BiLMCollator, step=ElmoStep,
    metrics=("forward_loss", "backward_loss", "forward_acc", "backward_acc", "forward_perplexity",
             "backward_perplexity", "perplexity"),
    collator_label="Bidirectional LM (ELMo)",
    inspector_note="ELMo: the forward LM predicts every token from the tokens before it, the backward LM from "
                   "the tokens after it; nothing is hidden.",
    charts=(
        MetricSpec("forward_loss", "forward", chart="elmo_perplexity", splits=TRAIN, color=BLUE, transform="exp"),
        MetricSpec("backward_loss", "backward", chart="elmo_perplexity", splits=TRAIN, color=GREEN, transform="exp"),
        MetricSpec("forward_perplexity", "forward", chart="elmo_perplexity", splits=VALID, color=BLUE),
        MetricSpec("backward_perplexity", "backward", chart="elmo_perplexity", splits=VALID, color=GREEN),
        *train_then_valid(MetricSpec("forward_loss", "forward", chart="elmo_loss", color=BLUE),
                          MetricSpec("backward_loss", "backward", chart="elmo_loss", color=GREEN)),
        *train_then_valid(MetricSpec("forward_acc", "forward", chart="elmo_acc", color=BLUE),
                          MetricSpec("backward_acc", "backward", chart="elmo_acc", color=GREEN)),
    ),
    stats=(
        StatSpec("forward_perplexity", "forward perplexity", metric="forward_perplexity", digits=1, order=60),
        StatSpec("backward_perplexity", "backward perplexity", metric="backward_perplexity", digits=1, order=61),
    ),
)
