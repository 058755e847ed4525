"""Which checkpoints of a run stay on disk: the last `keep_last`, the best by validation loss, the
ones the user pinned (and a fine-tuning run's early-stopping best); the optimizer state only in the
newest, the one a resume reads.

After every save the trainer calls `prune`. Removing a checkpoint is crash-safe: under the run's
retention lock (<run folder>/.retention.lock) its folder is renamed to a hidden
".removing-step-XXXXXXXX-<id>" (one atomic rename: `list_checkpoints` never sees it again), then
deleted; a crash in between leaves only a hidden folder, which the next `prune` deletes. A
checkpoint that something is reading (an export: `reading`) is left for a later save.

Pins live in the run folder's pinned.json ({"steps": [500, 1000]}), written atomically under the
same lock by the web app (`pin`, `unpin`), so the trainer needs no database, and a pin never
races with a removal: it is refused, with a sentence, for a step already removed.

No torch here: the web process pins and measures checkpoints too.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from trainer.errors import UserError

PINS_FILE = "pinned.json"          # in the run folder
LOCK_FILE = ".retention.lock"      # in the run folder
REMOVING = ".removing-"            # a folder being removed: checkpoints/.removing-step-00000500-<id>
READING = ".reading-"              # <run folder>/.reading-step-00000500: held (shared) while it is read
DEFAULT_KEEP_LAST = 3
OPTIMIZER_NAME = "optimizer.pt"    # trainer.training.checkpoints.OPTIMIZER_NAME
STATE_NAME = "trainer_state.json"  # trainer.training.checkpoints.STATE_NAME
MODEL_FILES = ("model.safetensors", "model_config.json", "tokenizer.json", "tokenizer_meta.json")

_NAME = re.compile(r"^step-(\d{8,})$")


@dataclass
class Pruned:
    """What one `prune` did: the steps removed, those whose optimizer state was deleted, and those
    kept past keep_last (step -> why: "best", "pinned")."""

    removed: list[int] = field(default_factory=list)
    slimmed: list[int] = field(default_factory=list)
    kept: dict[int, str] = field(default_factory=dict)
    busy: list[int] = field(default_factory=list)  # due for removal, but being read: left for later


def _base(run_folder: str | Path) -> Path:
    run_folder = Path(run_folder)
    return run_folder if run_folder.name == "checkpoints" else run_folder / "checkpoints"


def _run_folder(run_folder: str | Path) -> Path:
    run_folder = Path(run_folder)
    return run_folder.parent if run_folder.name == "checkpoints" else run_folder


def _complete(folder: Path) -> bool:
    return all((folder / n).is_file() for n in MODEL_FILES)


def step_folders(run_folder: str | Path) -> list[tuple[int, Path]]:
    """[(step, folder)] of the complete checkpoints, oldest first (as list_checkpoints)."""
    base = _base(run_folder)
    if not base.is_dir():
        return []
    found = []
    for child in base.iterdir():
        m = _NAME.match(child.name)
        if m and child.is_dir() and _complete(child):
            found.append((int(m.group(1)), child))
    return sorted(found)


@contextlib.contextmanager
def _locked(base: Path) -> Iterator[None]:
    """The run's retention lock (exclusive): pins, removals and the start of a read take it. It
    and the readers' locks lie in the run folder, beside checkpoints/ (whose listing stays the
    checkpoints)."""
    run = base.parent
    run.mkdir(parents=True, exist_ok=True)
    fd = os.open(run / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


# ---------------------------------------------------------------------------- pins
def read_pins(run_folder: str | Path) -> set[int]:
    """The pinned steps (none when pinned.json is missing or unreadable)."""
    try:
        data = json.loads((_run_folder(run_folder) / PINS_FILE).read_text(encoding="utf-8"))
        return {int(s) for s in data.get("steps", [])}
    except (OSError, ValueError, TypeError, AttributeError):
        return set()


def _write_pins(run_folder: Path, steps: set[int]) -> None:
    path = run_folder / PINS_FILE
    tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex}.tmp")
    tmp.write_text(json.dumps({"steps": sorted(steps)}) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def pin(run_folder: str | Path, step: int) -> None:
    """Keep checkpoint `step` whatever retention says. UserError with a sentence when it was
    removed already (or never saved)."""
    run, base = _run_folder(run_folder), _base(run_folder)
    with _locked(base):
        folder = base / f"step-{int(step):08d}"
        if not (folder.is_dir() and _complete(folder)):
            raise UserError(f"The checkpoint of step {int(step):,} is no longer on disk: the run's retention "
                            f"removed it (it keeps the last keep_last checkpoints, the best and the pinned ones), "
                            f"so it cannot be pinned.")
        _write_pins(run, read_pins(run) | {int(step)})


def unpin(run_folder: str | Path, step: int) -> None:
    """Let retention remove checkpoint `step` again (at the run's next save)."""
    run, base = _run_folder(run_folder), _base(run_folder)
    with _locked(base):
        pins = read_pins(run)
        if int(step) in pins:
            _write_pins(run, pins - {int(step)})


# ---------------------------------------------------------------------------- readers
@contextlib.contextmanager
def reading(folder: str | Path) -> Iterator[Path]:
    """Hold a run's checkpoint while it is read (an export): retention does not remove it
    meanwhile. UserError with a sentence when it is gone already. A folder that is not a run's
    checkpoint (an imported model) is yielded as it is."""
    folder = Path(folder)
    if not (_NAME.match(folder.name) and folder.parent.name == "checkpoints"):
        yield folder
        return
    base = folder.parent
    with _locked(base):
        if not (folder.is_dir() and _complete(folder)):
            raise UserError(f"The checkpoint {folder.name} is no longer on disk: the run's retention removed it.")
        fd = os.open(base.parent / (READING + folder.name), os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_SH)
    try:
        yield folder
    finally:
        os.close(fd)


def _being_read(base: Path, name: str) -> tuple[bool, int | None]:
    """(whether a reader holds checkpoint `name`, the lock's fd to close after the removal)."""
    path = base.parent / (READING + name)
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return False, None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES):
            return True, None
        raise
    return False, fd


# ---------------------------------------------------------------------------- what to keep
def valid_loss(folder: Path, step: int) -> float | None:
    """The validation loss measured at the checkpoint's own step (None: not validated there)."""
    try:
        state = json.loads((folder / STATE_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if "valid_step" in state and state["valid_step"] != step:
        return None  # the metrics are an earlier validation's
    loss = ((state.get("metrics") or {}).get("valid") or {}).get("loss")
    try:
        loss = float(loss)
    except (TypeError, ValueError):
        return None
    return loss if loss == loss and abs(loss) != float("inf") else None


def choose(steps: list[int], *, keep_last: int, best: int | None = None, pinned: Iterable[int] = (),
           also: Iterable[int] = ()) -> dict[int, str]:
    """{step: why it stays} of `steps` (oldest first): the newest keep_last ("last"; 0 keeps every
    one), the newest always, `best`, the pinned ones and `also` (a fine-tuning run's best)."""
    keep: dict[int, str] = {}
    newest = steps[-keep_last:] if keep_last > 0 else list(steps)
    for s in newest or steps[-1:]:
        keep[s] = "last"
    for s in also:
        keep.setdefault(int(s), "best")
    if best is not None:
        keep.setdefault(best, "best")
    for s in pinned:
        keep.setdefault(int(s), "pinned")
    return {s: keep[s] for s in steps if s in keep}


def prune(run_folder: str | Path, *, keep_last: int, also: Iterable[int] = ()) -> Pruned:
    """Remove the checkpoints retention does not keep and the optimizer state of all but the
    newest (the one a resume reads); delete what a crash left half-removed. `also`: steps to keep
    besides (fine-tuning's early-stopping best). keep_last 0 turns retention off: nothing is removed."""
    run, base = _run_folder(run_folder), _base(run_folder)
    done = Pruned()
    if keep_last <= 0 or not base.is_dir():  # 0: retention off, every checkpoint kept whole
        return done
    with _locked(base):
        found = step_folders(base)
        steps = [s for s, _ in found]
        losses = {s: valid_loss(f, s) for s, f in found}
        scored = [(loss, s) for s, loss in losses.items() if loss is not None]
        best = min(scored)[1] if scored else None
        kept = choose(steps, keep_last=keep_last, best=best, pinned=read_pins(run), also=also)
        done.kept = {s: why for s, why in kept.items() if why != "last"}
        doomed = []
        for step, folder in found:
            if step in kept:
                continue
            busy, fd = _being_read(base, folder.name)
            if busy:
                done.busy.append(step)
                continue
            try:
                hidden = base / f"{REMOVING}{folder.name}-{uuid.uuid4().hex[:8]}"
                os.replace(folder, hidden)  # atomic: from here on no one lists it
                doomed.append(hidden)
                done.removed.append(step)
                with contextlib.suppress(FileNotFoundError):
                    (base.parent / (READING + folder.name)).unlink()
            finally:
                if fd is not None:
                    os.close(fd)
        newest = found[-1][1] if found else None
        if newest is not None and (newest / OPTIMIZER_NAME).is_file():  # only then is an older one's useless
            for step, folder in found[:-1]:
                opt = folder / OPTIMIZER_NAME
                if step in kept and opt.is_file():
                    opt.unlink()
                    done.slimmed.append(step)
    for hidden in doomed + [p for p in base.iterdir() if p.name.startswith(REMOVING) and p not in doomed]:
        shutil.rmtree(hidden, ignore_errors=True)
    return done


# ---------------------------------------------------------------------------- what the page shows
def describe(folder: str | Path) -> dict:
    """{"size_bytes", "resumable", "exists"} of a checkpoint folder: its files' total size (its
    exports' zips included) and whether it holds the optimizer state a resume needs."""
    folder = Path(folder)
    size = 0
    if folder.is_dir():
        for root, _dirs, files in os.walk(folder):
            for name in files:
                with contextlib.suppress(OSError):
                    size += os.stat(os.path.join(root, name)).st_size
    return {"size_bytes": size, "resumable": (folder / OPTIMIZER_NAME).is_file(), "exists": folder.is_dir()}


def human_size(n: int) -> str:
    """1.3 GB, 420 MB, 12 kB (powers of 1000, as disks count)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}" if n < 10 * scale else f"{n / scale:,.0f} {unit}"
    return f"{n} B"
