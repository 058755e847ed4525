"""Is a checkpoint worth fine-tuning? Two looks before a run is launched.

    record_notes(steps=..., tokens_seen=..., valid_loss=..., valid_accuracy=..., vocab_size=...)
                        what the checkpoint's own pre-training record says, as sentences
    probe(checkpoint_dir, data_dir, limit=64)
                        the sentence vectors of the dataset's first examples: how alike they are
                        (the mean cosine of every pair) and, with labels, how much closer an
                        example is to its own class than to the others

A checkpoint whose sentence vectors are nearly identical for every example gives a task head
nothing to tell the examples apart by: fine-tuning it ends near the majority class whatever its
settings (issue 21: a BERT pre-trained 79 steps had a cosine of 1.000 between every pair of
sentences and fine-tuned to 0.23-0.29 accuracy where a bag of words got 0.57). The vectors are
the mean of the last layer's token vectors (trainer.inference.downstream.sentence_vectors): a
[CLS] vector is nearly the same for every sentence even in a randomly initialised BERT, which
fine-tunes well enough, while the mean of a collapsed encoder's tokens is the same everywhere.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

PROBE_EXAMPLES = 64
SAMPLED_FROM = 2_000       # the probe's examples are spread evenly over the dataset's first texts this many
POOLING = "mean"           # the explorer's default; a [CLS] vector is nearly constant even in a random BERT
COLLAPSED_COSINE = 0.99    # a mean pairwise cosine above this: "nearly identical for every example"
FEW_STEPS = 2_000          # fewer pre-training steps than this rarely make a useful encoder
UNLEARNED_LOSS = 0.6       # a validation loss above this share of ln(vocabulary) is near guessing


def record_notes(*, steps: int | None = None, tokens_seen: int | None = None, valid_loss: float | None = None,
                 valid_accuracy: float | None = None, vocab_size: int | None = None) -> list[str]:
    """Sentences on a run's checkpoint that suggest it learned little in pre-training; [] when
    nothing does (or nothing is known: an imported model has no record here)."""
    notes = []
    if isinstance(steps, int) and 0 <= steps < FEW_STEPS:
        seen = f" ({tokens_seen:,} tokens)" if isinstance(tokens_seen, int) and tokens_seen > 0 else ""
        notes.append(f"It was pre-trained for only {steps:,} steps{seen}; encoders that help fine-tuning are "
                     f"pre-trained for tens of thousands of steps or more.")
    if _number(valid_loss) and isinstance(vocab_size, int) and vocab_size > 1:
        guessing = math.log(vocab_size)
        if valid_loss > UNLEARNED_LOSS * guessing:
            notes.append(f"Its validation loss ({valid_loss:.2f}) is close to guessing among its {vocab_size:,} "
                         f"tokens ({guessing:.2f}).")
    if _number(valid_accuracy) and valid_accuracy < 0.1:
        notes.append(f"It predicts only {valid_accuracy:.1%} of the held-out tokens right.")
    return notes


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def probe(checkpoint_dir: str | Path, data_dir: str | Path, *, limit: int = PROBE_EXAMPLES) -> dict[str, Any]:
    """The sentence vectors of `limit` texts of the dataset (spread evenly over its first
    SAMPLED_FROM, train first) under the checkpoint:

        {"examples", "pooling", "mean_cosine": over every pair, "collapsed": mean_cosine above
         COLLAPSED_COSINE, "within_class" / "between_class": the mean cosine of pairs of one class /
         of two (None without two classes among them), "separation": their difference}

    InferenceError with a sentence when the checkpoint is no encoder or cannot be read, or the
    dataset has no text."""
    import torch

    from trainer.errors import InferenceError
    from trainer.inference.downstream import sentence_vectors
    from trainer.inference.loading import load
    from trainer.inference.neighbours import dataset_texts

    found, _ = dataset_texts(data_dir, limit=SAMPLED_FROM)
    items = [found[i * len(found) // limit] for i in range(min(limit, len(found)))]
    if len(items) < 2:
        raise InferenceError("The dataset has fewer than two texts to compare.")
    unit, _ = sentence_vectors(load(checkpoint_dir), [it["text"] for it in items], pooling=POOLING)
    cosine = (unit.float() @ unit.float().T).clamp(-1.0, 1.0)
    n = cosine.shape[0]
    pairs = ~torch.eye(n, dtype=torch.bool)
    mean = float(cosine[pairs].mean())
    out: dict[str, Any] = {"examples": n, "pooling": POOLING, "mean_cosine": mean,
                           "collapsed": mean > COLLAPSED_COSINE, "within_class": None, "between_class": None,
                           "separation": None}
    labels = [it.get("label") for it in items]
    if all(label is not None for label in labels) and len(set(labels)) >= 2:
        codes = {label: i for i, label in enumerate(sorted(set(labels)))}
        ids = torch.tensor([codes[label] for label in labels])
        same = (ids[:, None] == ids[None, :]) & pairs
        other = ids[:, None] != ids[None, :]
        if bool(same.any()):
            within, between = float(cosine[same].mean()), float(cosine[other].mean())
            out.update(within_class=within, between_class=between, separation=within - between)
    return out
