"""Decoder-only and biLM batches: GPT's next-token prediction (`clm`) and ELMo's forward and
backward language models (`bilm`).

Both read the corpus as one stream, documents one after another, each followed by EOS (GPT-2's
<|endoftext|> between texts), cut into rows of exactly seq_len tokens (trainer.objectives.collators.
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

from trainer.objectives.collators import COLLATORS, IGNORE_INDEX, Batch, CollatorSpec, Example, SpecialIds, TextLayout
from trainer.errors import ConfigError


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

    def __call__(self, examples: Sequence[Example]) -> Batch:
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
        return Batch(input_ids=torch.from_numpy(input_ids), attention_mask=torch.from_numpy(attention),
                     token_type_ids=torch.zeros(B, T, dtype=torch.long),
                     mlm_labels=torch.full((B, T), IGNORE_INDEX, dtype=torch.long), labels=torch.from_numpy(labels))


@dataclass
class BiLMCollator(CausalLMCollator):
    """ELMo's rows: the same packed rows as `clm`; the model predicts the next token with its
    forward LSTM and the previous one with its backward LSTM."""

    objective: ClassVar[str] = "bilm"


COLLATORS[frozenset({"clm"})] = CollatorSpec(CausalLMCollator, None, ("token",), "Causal LM (GPT)")
COLLATORS[frozenset({"bilm"})] = CollatorSpec(BiLMCollator, None, ("token",), "Bidirectional LM (ELMo)")
