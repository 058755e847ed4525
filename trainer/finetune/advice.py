"""Why a fine-tuning run scored below its dataset's lexical baseline, from the run's own record.

    below_baseline_causes(record) -> [Cause, ...]   the likely causes, each with what points to it

Each cause follows from something in the record, and says what it is: a run whose validation loss
was still falling when it stopped is told to train longer first (with the epochs it would take);
the learning rate is blamed only when the training loss says so (rising: too high; barely moving:
too low), and the range suggested never contains the rate used; a classifier whose training loss
stayed at the chance level (ln of its number of classes) learnt nothing, and is told so; the base
checkpoint is blamed only when its own pre-training record calls for it (an imported model, or one
of the user's that trained long enough, is not). Issue 31, point 1: a MiniLM import at 2e-5..5e-5
was told it "learned little in pre-training" and to try "2e-5 to 5e-5".

The curves are judged as curves, not by two of their points (issue 45, points 1 and 2): the
training loss's start and end are the means of its first and last quarter, and a change smaller
than the curve's own point-to-point noise (or than NOISE_FLOOR of its level) is no change, so a
loss flat at ln 5 reads the same whichever way the noise tipped its last point; the validation
loss's trend is its fall per step over the last stretch at least one validation interval long, so
an end-of-run validation a few steps after the last one does not hide a loss still falling.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

STILL_FALLING = 0.01   # the validation loss still falls by 1% or more of itself per validation interval
ROSE_AFTER_BEST = 0.05  # the last validation loss is 5% or more above the best: it learnt the train split by heart
BARELY_MOVED = 0.05    # the training loss fell by less than this share over the run: the rate may be too low
MORE_EPOCHS = 3.0      # "train longer": this many times the epochs (or steps) it ran
NOISE_FLOOR = 0.01     # a change of the training loss within 1% of its level is no change, however smooth the curve
NOISE_SIGMAS = 2.0     # ... nor one within this many standard errors of the curve's own noise
NOISE_POINTS = 5       # the noise is measured on a curve of at least this many points
CHANCE_BAND = 0.05     # a training loss above ln(classes) * (1 - this) is at the chance level
MEDIAN_ABS_NORMAL = 0.6745  # the median of |x| over a standard normal x


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
    classes: int | None = None             # a single-label classifier's classes: its chance-level loss is ln(classes)


@dataclass(frozen=True)
class Cause:
    key: str        # still_learning, overfit, lr_high, chance, lr_low, base, unclear
    cause: str      # the cause, a sentence
    evidence: str   # what in the record points to it
    action: str     # what to try


@dataclass(frozen=True)
class Trend:
    """Where a training loss started and ended (the means of its first and last quarter of points)
    and the change below which the difference is noise."""

    start: float
    end: float
    tolerance: float

    @property
    def rose(self) -> bool:
        return self.end - self.start > self.tolerance

    @property
    def flat(self) -> bool:
        return abs(self.end - self.start) <= self.tolerance


# Families whose classification loss is not a cross-entropy over the classes alone: T5 writes the
# label as text (a loss over its vocabulary), GPT-1's adds the auxiliary language-model loss.
NO_CHANCE_LEVEL = ("t5", "gpt")


def chance_classes(task: str, family: str, labels: object) -> int | None:
    """Record.classes for a run on a `task` dataset with these labels, fine-tuning a `family` model:
    the number of classes where its training loss is a cross-entropy over them, else None."""
    if task != "classification" or family in NO_CHANCE_LEVEL or not isinstance(labels, (list, tuple)):
        return None
    return len(labels) if len(labels) >= 2 else None


def _finite(points: list[tuple[int, float]]) -> list[tuple[int, float]]:
    return [(int(s), float(v)) for s, v in points
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]


def _g(x: float) -> str:
    """A learning rate in two figures: 2e-5, 0.0017."""
    return f"{x:.2g}".replace("e-0", "e-")


def noise(values: list[float]) -> float:
    """The standard deviation of a curve's point-to-point noise, from the median of its successive
    differences (robust to the steep fall at its start); 0 for fewer than NOISE_POINTS points."""
    if len(values) < NOISE_POINTS:
        return 0.0
    steps = [abs(b - a) for a, b in zip(values, values[1:])]
    return statistics.median(steps) / (MEDIAN_ABS_NORMAL * math.sqrt(2))


def trend(points: list[tuple[int, float]]) -> Trend:
    """The training loss's start and end levels and the tolerance of their difference: NOISE_SIGMAS
    standard errors of the difference of two means of `noise`, and at least NOISE_FLOOR of the level."""
    values = [v for _, v in points]
    m = max(1, len(values) // 4)
    start, end = statistics.fmean(values[:m]), statistics.fmean(values[-m:])
    tolerance = max(NOISE_FLOOR * max(abs(start), abs(end)), NOISE_SIGMAS * noise(values) * math.sqrt(2 / m))
    return Trend(start, end, tolerance)


def still_falling(valid: list[tuple[int, float]]) -> tuple[int, float, int, float] | None:
    """(reference step, its loss, the validation interval, the fall per interval) when the
    validation loss was still falling at the end, else None: its fall per step from the last
    validation at least one interval (the median gap between validations) before the last one,
    times the interval, is STILL_FALLING of the last loss or more, and the last loss is its best
    (within STILL_FALLING)."""
    if len(valid) < 2:
        return None
    s_last, last = valid[-1]
    best = min(v for _, v in valid)
    interval = max(1, round(statistics.median(b - a for (a, _), (b, _) in zip(valid, valid[1:]))))
    s_ref, ref = next(((s, v) for s, v in reversed(valid[:-1]) if s <= s_last - interval), valid[0])
    if s_ref >= s_last:
        return None
    fall = (ref - last) / (s_last - s_ref) * interval
    if fall >= STILL_FALLING * last and last <= best * (1 + STILL_FALLING):
        return s_ref, ref, interval, fall
    return None


def below_baseline_causes(record: Record) -> list[Cause]:
    causes: list[Cause] = []
    valid, train = _finite(record.valid_losses), _finite(record.train_losses)
    longer = (f"it ran {record.epochs:.1f} epochs ({record.steps:,} steps); try "
              f"{record.epochs * MORE_EPOCHS:.1f} epochs (about {round(record.steps * MORE_EPOCHS):,} steps)"
              if record.epochs else
              f"it ran {record.steps:,} steps; try about {round(record.steps * MORE_EPOCHS):,}")
    higher = (f"{_g(record.lr * 3)} to {_g(record.lr * 10)}" if record.lr > 0 else "three to ten times the one used")
    if len(valid) >= 2:
        (s0, first), (s_last, last) = valid[0], valid[-1]
        best_step, best = min(valid, key=lambda p: p[1])
        falling = still_falling(valid)
        if falling is not None:
            s_ref, ref, interval, fall = falling
            causes.append(Cause(
                "still_learning", "It stopped while it was still learning.",
                f"Its validation loss fell from {first:.4f} (step {s0:,}) to {last:.4f} (step {s_last:,}), and was "
                f"still falling at the end: from {ref:.4f} at step {s_ref:,}, about {fall / last:.0%} every "
                f"{interval:,} steps.",
                f"Train longer first: {longer}."))
        elif last > best * (1 + ROSE_AFTER_BEST) and best_step < s_last:
            causes.append(Cause(
                "overfit", "It learnt the training split by heart after a point.",
                f"Its validation loss was lowest at step {best_step:,} ({best:.4f}) and rose to {last:.4f} by step "
                f"{s_last:,}.",
                f"Stop near step {best_step:,} (max_steps {best_step:,}), or keep the checkpoint of that step."))
    if len(train) >= 2:
        (t0, first), (t_last, last) = train[0], train[-1]
        curve = trend(train)
        chance = math.log(record.classes) if record.classes and record.classes >= 2 else None
        if curve.rose:
            causes.append(Cause(
                "lr_high", f"The learning rate ({_g(record.lr)}) is likely too high.",
                f"Its training loss rose from {first:.4f} (step {t0:,}) to {last:.4f} (step {t_last:,}) instead of "
                f"falling (more than the ±{curve.tolerance:.4f} its noise allows).",
                f"Relaunch with a lower one: {_g(record.lr / 10)} to {_g(record.lr / 3)}."))
        elif (chance is not None and curve.end >= chance * (1 - CHANCE_BAND)
              and not any(c.key == "still_learning" for c in causes)):  # a validation loss still falling learns
            how = (f"stayed flat ({first:.4f} at step {t0:,}, {last:.4f} at step {t_last:,}: a change within its "
                   f"noise, ±{curve.tolerance:.4f})" if curve.flat else
                   f"went from {first:.4f} at step {t0:,} to {last:.4f} at step {t_last:,}, ending")
            causes.append(Cause(
                "chance", "It learnt nothing: its training loss is at the chance level.",
                f"Its training loss {how} at the loss of a model that gives each of the {record.classes:,} classes "
                f"the same probability (ln {record.classes:,} = {chance:.3f}).",
                f"Relaunch with a higher learning rate than {_g(record.lr)}: {higher}; or train longer: {longer}."))
        elif (curve.start > 0 and (curve.start - curve.end) / curve.start < BARELY_MOVED
              and not any(c.key == "still_learning" for c in causes)):
            causes.append(Cause(
                "lr_low", f"The learning rate ({_g(record.lr)}) may be too low.",
                f"Its training loss barely moved: {first:.4f} at step {t0:,}, {last:.4f} at step {t_last:,} "
                f"(less than {BARELY_MOVED:.0%} lower).",
                f"Relaunch with a higher one: {higher}."))
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
