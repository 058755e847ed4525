"""Packing a masked-LM batch: the same examples in fewer rows, so padding is not computed.

A collator pads its B examples to the longest; sentence pairs of a corpus of short documents
then fill about half of the positions (the demo corpus: 45%). `pack_rows` lays the B examples
end to end in R rows of at most seq_len tokens (first fit, longest first) and adds what the
encoder needs to keep each example to itself (models_lib.core.packing: segment ids for a
block-diagonal attention mask, positions that start again at each example, and where each
example's [CLS] is). Nothing else changes: the batch holds the same B examples with the same
masks and labels, NSP/SOP labels stay one per example in the same order, SBO's pairs point at
the same tokens in their new places, UniLM's per-example attention masks become blocks. So a
packed batch gives the padded batch's losses and accuracies, and the data order, the stream
position and exact resume are untouched: packing happens inside one batch.

`PackingCollator` wraps an objective's collator and packs each batch it makes; the objectives
whose steps take packed batches say so (`Objective.packs`).

Fine-tuning batches (trainer.finetune.tasks.TaskBatch) pack the same way. Their class names the
fields that stay as they are (`PACKING_KEEPS`: one label per example, or per-token labels that
stay in the padded layout), and they carry `padded_index` and `padded_width`: where each real
token was in the padded (B, T) batch, so that a head's per-token outputs go back there.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from models_lib.core.packing import Packed
from trainer.objectives.base import Batch
from trainer.objectives.masking import IGNORE_INDEX

ROW_MULTIPLE = 8  # packed rows are cut to a multiple of this many columns (at most seq_len)

# per-token fields (B, T) and the value their padding takes
TOKEN_FIELDS = {"input_ids": None, "attention_mask": 0, "token_type_ids": 0, "mlm_labels": IGNORE_INDEX,
                "span_ids": -1}
EXAMPLE_FIELDS = ("nsp_labels", "sop_labels", "lm_mode", "sbo_labels")  # one value per example (or per SBO row)
PACKING_FIELDS = ("segments", "positions", "starts", "real_tokens", "padded_index", "padded_width", "mlm_positions",
                  "full")


@dataclass(kw_only=True)
class PackableBatch(Batch):
    """A batch that may come packed (pack_rows): its B examples end to end in R <= B rows, its
    per-token fields (R, L), and the fields below set (models_lib.core.packing.Packed). The
    pre-training (MaskedBatch) and fine-tuning (TaskBatch) batches of the encoders extend it; its
    fields are keyword-only, after those of its subclasses."""

    segments: torch.Tensor | None = None     # (R, L) long: 0 = padding, k = the k-th example of its row
    positions: torch.Tensor | None = None    # (R, L) long: position within the example
    starts: torch.Tensor | None = None       # (B,) long: flat index of each example's first token
    real_tokens: torch.Tensor | None = None  # (N,) long: flat indices of the real tokens (the encoder's
                                             # token-wise layers compute these alone)

    @property
    def packed(self) -> Packed | None:
        """The packing the model takes (`packed=`), or None for a padded batch."""
        if self.segments is None:
            return None
        return Packed(self.segments, self.positions, self.starts, self.real_tokens)

    @property
    def size(self) -> int:
        """Examples in the batch (a packed batch has fewer rows)."""
        return int(self.starts.shape[0]) if self.starts is not None else int(self.input_ids.shape[0])


def first_fit(lengths: np.ndarray, capacity: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, offset) of each example: longest first, each into the first row with room for it."""
    order = np.argsort(-lengths, kind="stable")
    room = np.empty(0, dtype=np.int64)
    rows = np.empty(len(lengths), dtype=np.int64)
    offsets = np.empty(len(lengths), dtype=np.int64)
    for i in order:
        n = int(lengths[i])
        fits = np.flatnonzero(room >= n)
        if len(fits):
            r = int(fits[0])
        else:
            r = len(room)
            room = np.append(room, capacity)
        rows[i], offsets[i] = r, capacity - room[r]
        room[r] -= n
    return rows, offsets


def pack_rows(batch: Batch, *, seq_len: int, pad_id: int, unpad: bool = False) -> Batch:
    """The batch's examples in as few rows of at most seq_len tokens as first fit finds, with
    segments, positions and starts set (see the module docstring); the batch itself when
    packing would save no row (with `unpad`: only when nothing is padding, since the packed
    form also keeps the token-wise layers off the padding). Each example's real tokens must come
    first in its row (padding at the end), as the collators lay them out."""
    mask = batch.attention_mask.numpy()
    B, T = mask.shape
    lengths = mask.sum(axis=1).astype(np.int64)
    if B < 1 or int(lengths.max()) > seq_len or (B < 2 and not unpad):
        return batch
    rows, offsets = first_fit(lengths, seq_len)
    R = int(rows.max()) + 1
    if R == B and not (unpad and int(lengths.sum()) < B * T):
        return batch
    used = int((offsets + lengths).max())
    L = min(seq_len, -(-used // ROW_MULTIPLE) * ROW_MULTIPLE)
    # where each real token goes: example b's token j to row rows[b], column offsets[b] + j
    ex = np.repeat(np.arange(B), lengths)
    j = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    src = ex * T + j
    dst = rows[ex] * L + offsets[ex] + j

    segments = np.zeros(R * L, dtype=np.int64)
    # the k-th example placed in a row (by offset) is segment k
    rank = np.empty(B, dtype=np.int64)
    for r in range(R):
        here = np.flatnonzero(rows == r)
        rank[here[np.argsort(offsets[here])]] = np.arange(1, len(here) + 1)
    segments[dst] = rank[ex]

    keeps = (*EXAMPLE_FIELDS, *getattr(type(batch), "PACKING_KEEPS", ()))
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(batch):
        value = getattr(batch, f.name)
        if value is None or f.name in PACKING_FIELDS:
            continue
        if f.name in TOKEN_FIELDS:
            fill = pad_id if TOKEN_FIELDS[f.name] is None else TOKEN_FIELDS[f.name]
            out = np.full(R * L, fill, dtype=value.numpy().dtype)
            out[dst] = value.numpy().reshape(-1)[src]
            fields[f.name] = torch.from_numpy(out.reshape(R, L))
        elif f.name in keeps:
            fields[f.name] = value
        elif f.name == "sbo_pairs":  # (N, 5): row, left, right, target, relative -> packed places
            pairs = value.numpy().copy()
            b = pairs[:, 0]
            pairs[:, 1:4] += offsets[b][:, None]
            pairs[:, 0] = rows[b]
            fields[f.name] = torch.from_numpy(pairs)
        elif f.name == "self_attention_mask":  # (B, T, T) -> blocks of (R, L, L)
            fields[f.name] = torch.from_numpy(_pack_visibility(value.numpy(), lengths, rows, offsets,
                                                               segments.reshape(R, L)))
        else:
            raise ValueError(f"pack_rows does not know how to pack the field {f.name!r} of {type(batch).__name__}")
    positions = np.zeros(R * L, dtype=np.int64)
    positions[dst] = j
    names = {f.name for f in dataclasses.fields(batch)}
    if "mlm_positions" in names:  # the MLM head's positions in the rows, without a bool index
        fields["mlm_positions"] = torch.from_numpy(np.flatnonzero(fields["mlm_labels"].numpy() != IGNORE_INDEX))
    if "full" in names:  # the rows' ends are padding (or may be): the model reads the mask of the rows
        fields["full"] = False
    if "padded_index" in names:  # the way back to (B, T), in real_tokens' order
        fields.update(padded_index=torch.from_numpy(src[np.argsort(dst)]), padded_width=T)
    return dataclasses.replace(batch, **fields, segments=torch.from_numpy(segments.reshape(R, L)),
                               positions=torch.from_numpy(positions.reshape(R, L)),
                               starts=torch.from_numpy(rows * L + offsets),
                               real_tokens=torch.from_numpy(np.flatnonzero(segments)))


def _pack_visibility(masks: np.ndarray, lengths: np.ndarray, rows: np.ndarray, offsets: np.ndarray,
                     segments: np.ndarray) -> np.ndarray:
    """Each example's (n, n) visibility block at its place in the (R, L) rows whose `segments`
    are given; padding queries (segment 0) see themselves."""
    R, L = segments.shape
    out = np.zeros((R, L, L), dtype=bool)
    for b, n in enumerate(lengths.tolist()):
        o = int(offsets[b])
        out[rows[b], o:o + n, o:o + n] = masks[b, :n, :n]
    r, t = np.nonzero(segments == 0)
    out[r, t, t] = True
    return out


class PackingCollator:
    """An objective's collator whose batches come packed (pack_rows); every other attribute is
    the wrapped collator's."""

    def __init__(self, inner: Any, pad_id: int):
        self.inner, self.pad_id = inner, pad_id

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("inner", "pad_id"):  # (unpickling looks these up first)
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __call__(self, examples: Sequence[Any]) -> Batch:
        return pack_rows(self.inner(examples), seq_len=self.inner.seq_len, pad_id=self.pad_id, unpad=True)
