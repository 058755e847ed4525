"""Why a fine-tuning run scored below its dataset's lexical baseline, from the run's own record.

    below_baseline_causes(record) -> [Cause, ...]   the likely causes, each with what points to it

Each cause follows from something in the record, and says what it is: a run whose validation loss
was still falling when it stopped is told to train longer first (with the epochs it would take);
the learning rate is blamed only when the training loss says so (rising: too high; barely moving:
too low), and the range suggested never contains the rate used; the base checkpoint is blamed only
when its own pre-training record calls for it (an imported model, or one of the user's that
trained long enough, is not). Issue 31, point 1: a MiniLM import at 2e-5..5e-5 was told it "learned
little in pre-training" and to try "2e-5 to 5e-5".
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

STILL_FALLING = 0.01   # the last validation loss is the lowest and at least 1% under the one before it
ROSE_AFTER_BEST = 0.05  # the last validation loss is 5% or more above the best: it learnt the train split by heart
BARELY_MOVED = 0.05    # the training loss fell by less than this share over the run: the rate may be too low
MORE_EPOCHS = 3.0      # "train longer": this many times the epochs (or steps) it ran


@dataclass(frozen=True)
class Record:
    """What the advice reads: the run's settings and curves, and its base checkpoint's record."""

    lr: float
    steps: int
    valid_losses: list[tuple[int, float]] = field(default_factory=list)  # (step, loss), oldest first
    train_losses: list[tuple[int, float]] = field(default_factory=list)
    epochs: float | None = None            # passes over the train split it made, when known
    base_imported: bool = False            # an imported (pre-trained elsewhere) model
    base_notes: tuple[str, ...] = ()       # trainer.inference.readiness.record_notes of its own base


@dataclass(frozen=True)
class Cause:
    key: str        # still_learning, overfit, lr_high, lr_low, base, unclear
    cause: str      # the cause, a sentence
    evidence: str   # what in the record points to it
    action: str     # what to try


def _finite(points: list[tuple[int, float]]) -> list[tuple[int, float]]:
    return [(int(s), float(v)) for s, v in points
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]


def _g(x: float) -> str:
    """A learning rate in two figures: 2e-5, 0.0017."""
    return f"{x:.2g}".replace("e-0", "e-")


def below_baseline_causes(record: Record) -> list[Cause]:
    causes: list[Cause] = []
    valid, train = _finite(record.valid_losses), _finite(record.train_losses)
    longer = (f"it ran {record.epochs:.1f} epochs ({record.steps:,} steps); try "
              f"{record.epochs * MORE_EPOCHS:.1f} epochs (about {round(record.steps * MORE_EPOCHS):,} steps)"
              if record.epochs else
              f"it ran {record.steps:,} steps; try about {round(record.steps * MORE_EPOCHS):,}")
    if len(valid) >= 2:
        (s0, first), (s_prev, prev), (s_last, last) = valid[0], valid[-2], valid[-1]
        best_step, best = min(valid, key=lambda p: p[1])
        if last <= best and last < prev * (1 - STILL_FALLING):
            causes.append(Cause(
                "still_learning", "It stopped while it was still learning.",
                f"Its validation loss fell from {first:.4f} (step {s0:,}) to {last:.4f} (step {s_last:,}), and was "
                f"still falling at the last validation ({prev:.4f} at step {s_prev:,}).",
                f"Train longer first: {longer}."))
        elif last > best * (1 + ROSE_AFTER_BEST) and best_step < s_last:
            causes.append(Cause(
                "overfit", "It learnt the training split by heart after a point.",
                f"Its validation loss was lowest at step {best_step:,} ({best:.4f}) and rose to {last:.4f} by step "
                f"{s_last:,}.",
                f"Stop near step {best_step:,} (max_steps {best_step:,}), or keep the checkpoint of that step."))
    if len(train) >= 2:
        (t0, first), (t_last, last) = train[0], train[-1]
        if last > first:
            causes.append(Cause(
                "lr_high", f"The learning rate ({_g(record.lr)}) is likely too high.",
                f"Its training loss rose from {first:.4f} (step {t0:,}) to {last:.4f} (step {t_last:,}) instead of "
                f"falling.",
                f"Relaunch with a lower one: {_g(record.lr / 10)} to {_g(record.lr / 3)}."))
        elif first > 0 and (first - last) / first < BARELY_MOVED and not any(c.key == "still_learning" for c in causes):
            causes.append(Cause(
                "lr_low", f"The learning rate ({_g(record.lr)}) may be too low.",
                f"Its training loss barely moved: {first:.4f} at step {t0:,}, {last:.4f} at step {t_last:,} "
                f"(less than {BARELY_MOVED:.0%} lower).",
                f"Relaunch with a higher one: {_g(record.lr * 3)} to {_g(record.lr * 10)}."))
    if record.base_notes and not record.base_imported:
        causes.append(Cause(
            "base", "The base checkpoint learned little in pre-training.",
            "Its own record: " + " ".join(record.base_notes),
            "Pre-train the base model longer, or import a pre-trained Hugging Face checkpoint and fine-tune it."))
    if not causes:
        base = ("an imported, pre-trained model" if record.base_imported
                else "a base whose pre-training record shows nothing wrong")
        causes.append(Cause(
            "unclear", "Nothing in the run's record points to one cause.",
            f"Its losses fell and settled, on {base}.",
            "The words alone may give this task away: try more labelled examples, a larger base model, "
            "or compare against the baseline on more data before changing the settings."))
    return causes
