"""The run page's side of checkpoint retention (trainer.training.retention): pins, what each
checkpoint holds on disk, and the rows of checkpoints the trainer removed.

The trainer decides what to remove after each save and reads the pins from the run folder's
pinned.json, which `set_pinned` writes (under the run's retention lock, so a pin never races a
removal); the worker's sink calls `checkpoints_removed` with the steps it removed, and their rows
go (their exports with them: the zips lived in the removed folders).
"""
from __future__ import annotations

from trainer.errors import UserError
from trainer.training import retention
from webapp.runs.models import Checkpoint, Run

HOLDS_RESUMABLE = "weights + optimizer state"
HOLDS_WEIGHTS = "weights"


def keep_last(run: Run) -> int:
    """The run's keep_last (a config saved before the setting trains with the default)."""
    try:
        return int(run.config.get("keep_last", retention.DEFAULT_KEEP_LAST))
    except (TypeError, ValueError):
        return retention.DEFAULT_KEEP_LAST


def set_pinned(checkpoint: Checkpoint, pinned: bool) -> None:
    """Pin (or unpin) one of a run's checkpoints; UserError with a sentence for an imported model
    or a step retention removed already."""
    if checkpoint.run_id is None:
        raise UserError("An imported model is never removed, so there is nothing to pin.")
    if pinned:
        retention.pin(checkpoint.run.folder, checkpoint.step)
    else:
        retention.unpin(checkpoint.run.folder, checkpoint.step)


def annotate(run: Run, checkpoints: list[Checkpoint]) -> list[Checkpoint]:
    """Each checkpoint with `disk` (trainer.training.retention.describe), `size_label`, `holds`
    and `pinned`, as the run page shows them."""
    pins = retention.read_pins(run.folder)
    for c in checkpoints:
        c.disk = retention.describe(c.folder)
        c.size_label = retention.human_size(c.disk["size_bytes"])
        c.holds = HOLDS_RESUMABLE if c.disk["resumable"] else HOLDS_WEIGHTS
        c.pinned = c.step in pins
    return checkpoints


def checkpoints_removed(run_id, steps: list[int]) -> list[int]:
    """Delete the rows of the steps the trainer removed (their exports go with them); -> the
    steps that had rows."""
    rows = Checkpoint.objects.filter(run_id=run_id, step__in=[int(s) for s in steps])
    found = sorted(rows.values_list("step", flat=True))
    for row in rows:
        row.delete()  # one by one: each export's post_delete removes its (already gone) folder
    return found
