"""Statistics of a stored labelled dataset, for the dataset page's charts.

- :func:`label_counts`: labels (or, for regression, equal-width bins of the scores) with their
  counts per split, the data of a grouped bar chart.
- :func:`length_histogram`: how many tokens each example takes under a tokenizer, binned, and
  the share of examples that a given ``max_length`` would truncate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from trainer.errors import DatasetError
from trainer.prep.labelled.examples import SPLITS
from trainer.prep.labelled.store import iter_examples, read_meta
from trainer.prep.labelled.tasks import task_spec

SCORE_BINS = 10
LENGTH_BINS = 20
_BATCH = 256


def label_counts(out_dir: Path) -> dict:
    """``{"kind", "labels", "counts": {split: [count per label]}}`` for a bar chart.

    kind "classes" (labels of the kinds "classes", "multi": examples per label; "tags": tokens per
    tag; "choice": examples per position of the right choice, "choice 0", ...), "bins" ("number":
    SCORE_BINS equal-width bins of the scores, named "0.0–0.5"), or "none" (tasks without labels;
    labels and counts are empty). The kind is the dataset task's TaskSpec.labels.
    """
    meta = read_meta(out_dir)
    kind = task_spec(meta["task"]).labels
    if meta.get("labels"):
        labels = meta["labels"]
        return {"kind": "classes", "labels": labels,
                "counts": {split: [meta["label_counts"][split].get(label, 0) for label in labels] for split in SPLITS}}
    if kind == "choice":  # the right choice's position (index from 0)
        positions = sorted({p for counts in meta["label_counts"].values() for p in counts}, key=int)
        return {"kind": "classes", "labels": [f"choice {p}" for p in positions],
                "counts": {split: [meta["label_counts"][split].get(p, 0) for p in positions] for split in SPLITS}}
    if kind != "number":
        return {"kind": "none", "labels": [], "counts": {split: [] for split in SPLITS}}
    stats = meta["label_stats"].values()
    low, high = min(s["min"] for s in stats), max(s["max"] for s in stats)
    width = (high - low) / SCORE_BINS or 1.0
    edges = [low + i * width for i in range(SCORE_BINS + 1)]
    counts = {}
    for split in SPLITS:
        row = [0] * SCORE_BINS
        for example in iter_examples(out_dir, split):
            row[min(int((example["label"] - low) / width), SCORE_BINS - 1)] += 1
        counts[split] = row
    return {"kind": "bins", "labels": [f"{a:.3g}–{b:.3g}" for a, b in zip(edges, edges[1:])], "counts": counts}


@dataclass
class LengthHistogram:
    """Token lengths of a dataset's examples (special tokens included) and what max_length cuts."""

    max_length: int
    examples: int
    edges: list[int]  # bin i counts the lengths in [edges[i], edges[i + 1])
    counts: list[int]
    truncated: int  # examples longer than max_length
    truncated_share: float  # truncated / examples (0 for no examples)
    mean: float
    median: int
    p95: int
    longest: int

    def to_dict(self) -> dict:
        return asdict(self)


def length_histogram(out_dir: Path, tokenizer_dir: Path, max_length: int, *, splits: Sequence[str] = SPLITS,
                     bins: int = LENGTH_BINS, max_examples: int | None = None) -> LengthHistogram:
    """Tokenize every example of ``splits`` as the model will see it and bin the lengths.

    What is measured, with the tokenizer's own special tokens ([CLS] A [SEP] B [SEP] for a
    WordPiece tokenizer): the text, or the pair sentence1 + sentence2 (classification,
    regression, multi-label); the pre-split tokens (token classification); question + context
    (extractive QA: a longer context is split into windows rather than lost, but the share
    shows how often that happens); the input (text to text); prompt + response, or the
    messages' contents joined by line breaks (SFT); the context and question with the longest
    choice (multiple choice: each choice is read with them, the longest is what is cut). The bin width is a round number (1, 2 or
    5 times a power of ten) giving about ``bins`` bins up to the longer of the longest example
    and max_length. ``max_examples`` stops after that many (None: all).
    """
    from trainer.prep.tokenization import load_tokenizer  # tokenizers is needed here only

    if max_length < 1:
        raise DatasetError("The maximum length must be at least 1 token.")
    read_meta(out_dir)  # a folder without a stored dataset is refused before the tokenizer loads
    tok = load_tokenizer(Path(tokenizer_dir)).tok
    tok.no_truncation()
    tok.no_padding()
    lengths: list[int] = []
    batch: list = []

    def flush():
        pretokenized = bool(batch) and isinstance(batch[0], list)
        lengths.extend(len(e.ids) for e in tok.encode_batch(batch, is_pretokenized=pretokenized))
        batch.clear()

    for split in splits:
        for example in iter_examples(out_dir, split):
            if max_examples is not None and len(lengths) + len(batch) >= max_examples:
                break
            batch.append(model_input(example))
            if len(batch) >= _BATCH:
                flush()
    if batch:
        flush()
    return _histogram(lengths, max_length, bins)


def model_input(example: dict) -> str | tuple[str, str] | list[str]:
    """The text (or pair, or token list) of an example that the model reads (length_histogram),
    by the roles the example has (trainer.prep.labelled.examples): whatever its task, the same
    roles are read the same way."""
    if "tokens" in example:
        return example["tokens"]
    if "choices" in example:  # the longest of its sequences: context (question) and a choice
        first = " ".join(example[k] for k in ("context", "question") if k in example)
        return first, max(example["choices"], key=len)
    if "question" in example and "context" in example:  # extractive QA: the question, then its context
        return example["question"], example["context"]
    if "input" in example:
        return example["input"]
    if "messages" in example:
        return "\n".join(m["content"] for m in example["messages"])
    if "prompt" in example:
        return example["prompt"], example["response"]
    if "sentence1" in example:
        return example["sentence1"], example["sentence2"]
    return example["text"]


def _histogram(lengths: list[int], max_length: int, bins: int) -> LengthHistogram:
    n = len(lengths)
    longest = max(lengths, default=0)
    width = _round_width(max(longest, max_length) / max(bins, 1))
    n_bins = longest // width + 1
    counts = [0] * n_bins
    for length in lengths:
        counts[length // width] += 1
    ordered = sorted(lengths)
    truncated = sum(length > max_length for length in lengths)
    return LengthHistogram(
        max_length=max_length, examples=n, edges=[i * width for i in range(n_bins + 1)], counts=counts,
        truncated=truncated, truncated_share=truncated / n if n else 0.0, mean=sum(lengths) / n if n else 0.0,
        median=ordered[(n - 1) // 2] if n else 0, p95=ordered[min(n - 1, math.ceil(0.95 * n) - 1)] if n else 0,
        longest=longest)


def _round_width(raw: float) -> int:
    """The smallest of 1, 2, 5, 10, 20, 50, ... that is at least ``raw``."""
    width = 1
    while True:
        for step in (1, 2, 5):
            if width * step >= raw:
                return width * step
        width *= 10
