"""Checkpoint folders of a run: out_dir/checkpoints/step-00000500/.

A checkpoint is written into `step-XXXXXXXX.tmp` and renamed into place when complete, so a
folder without the suffix is always whole (a crash leaves only a *.tmp behind, which
readers ignore and the next save replaces). Contents:
  model.safetensors, model_config.json   models_lib.checkpoint.save_model
  tokenizer.json, tokenizer_meta.json    copied from the tokenizer folder
  trainer_state.json                     step, tokens_seen, config, data position, metrics
  optimizer.pt                           optimizer, scheduler, RNG states (tensors and plain
                                         Python values only: loads with weights_only=True)
"""
from __future__ import annotations

import errno
import json
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from trainer.errors import UserError

STATE_NAME = "trainer_state.json"
OPTIMIZER_NAME = "optimizer.pt"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_meta.json")
MODEL_FILES = ("model.safetensors", "model_config.json")
FORMAT_VERSION = 1

_NAME = re.compile(r"^step-(\d{8,})$")


class CheckpointError(UserError):
    """A checkpoint could not be written (a full or read-only disk)."""


def checkpoint_name(step: int) -> str:
    return f"step-{step:08d}"


def checkpoints_dir(run_folder: Path) -> Path:
    return Path(run_folder) / "checkpoints"


def is_complete(folder: Path) -> bool:
    """A model (and its tokenizer) that the explorer can load."""
    return all((folder / n).is_file() for n in MODEL_FILES + TOKENIZER_FILES)


def list_checkpoints(run_folder: Path) -> list[tuple[int, Path]]:
    """[(step, folder)] of the complete checkpoints, oldest first. Accepts the run folder or
    its checkpoints/ folder; *.tmp folders (unfinished writes) are ignored."""
    run_folder = Path(run_folder)
    base = run_folder if run_folder.name == "checkpoints" and not (run_folder / "checkpoints").is_dir() \
        else checkpoints_dir(run_folder)
    if not base.is_dir():
        return []
    found = []
    for child in base.iterdir():
        m = _NAME.match(child.name)
        if m and child.is_dir() and is_complete(child):
            found.append((int(m.group(1)), child))
    return sorted(found)


def latest_resumable(run_folder: Path) -> Path | None:
    """The newest checkpoint that also has the trainer state (what resume needs)."""
    for _, folder in reversed(list_checkpoints(run_folder)):
        if (folder / STATE_NAME).is_file() and (folder / OPTIMIZER_NAME).is_file():
            return folder
    return None


def save_checkpoint(run_folder: Path, step: int, *, model: nn.Module, tokenizer_dir: Path,
                    state: dict[str, Any], optimizer_state: dict[str, Any],
                    model_state: dict[str, torch.Tensor] | None = None) -> Path:
    """Write a complete checkpoint atomically; returns its folder. When the disk refuses (full,
    read-only), the half-written folder is removed and CheckpointError says so: the earlier
    checkpoints stay as they were. model_state: the full weights to write instead of the
    model's own (a sharded model's, gathered: trainer.training.distributed.full_state)."""
    base = checkpoints_dir(run_folder)
    tmp = base / (checkpoint_name(step) + ".tmp")
    try:
        return _save(base, step, model=model, tokenizer_dir=tokenizer_dir, state=state, optimizer_state=optimizer_state,
                     model_state=model_state)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        kept = len(list_checkpoints(run_folder))
        earlier = (f"its {kept} earlier checkpoint{' is' if kept == 1 else 's are'} intact. Free some disk space, "
                   "then resume it." if kept else "it had none before. Free some disk space, then start it again.")
        if e.errno in (errno.ENOSPC, errno.EDQUOT):  # the run's end then begins as every full disk's does
            raise CheckpointError(f"The disk is full: the checkpoint of step {step:,} could not be written. The run "
                                  f"stopped there; {earlier}") from None
        raise CheckpointError(f"The checkpoint of step {step:,} could not be written ({e.strerror or e}). The run "
                              f"stopped there; {earlier}") from None


def _save(base: Path, step: int, *, model: nn.Module, tokenizer_dir: Path, state: dict[str, Any],
          optimizer_state: dict[str, Any], model_state: dict[str, torch.Tensor] | None = None) -> Path:
    from models_lib.checkpoint import save_model

    base.mkdir(parents=True, exist_ok=True)
    final = base / checkpoint_name(step)
    tmp = base / (final.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    save_model(model, tmp, state_dict=model_state)
    for name in TOKENIZER_FILES:
        shutil.copy2(Path(tokenizer_dir) / name, tmp / name)
    torch.save(optimizer_state, tmp / OPTIMIZER_NAME)
    _write_json(tmp / STATE_NAME, {"format_version": FORMAT_VERSION, **state})
    for f in tmp.iterdir():  # the data must be on disk before the rename makes it visible
        _fsync(f)
    _fsync(tmp)
    if final.exists():  # the same step saved again (e.g. cancelled right after a checkpoint)
        old = base / (final.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, final)
    _fsync(base)
    return final


def read_state(folder: Path) -> dict[str, Any]:
    return json.loads((Path(folder) / STATE_NAME).read_text(encoding="utf-8"))


def read_optimizer_state(folder: Path) -> dict[str, Any]:
    return torch.load(Path(folder) / OPTIMIZER_NAME, map_location="cpu", weights_only=True)


# ---------------------------------------------------------------------------- what a checkpoint holds
def read_model_meta(folder: str | Path) -> dict[str, Any]:
    """A checkpoint's model_config.json ({"family": "bert", "config": {...}, ...}), read without
    loading the model. UserError with a sentence when the files are gone or the file is broken."""
    folder = Path(folder)
    path = folder / "model_config.json"
    if not folder.is_dir():
        raise UserError("This checkpoint's files are no longer on disk.")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"The checkpoint {folder.name} is incomplete: {path.name} is missing.") from None
    except UnicodeDecodeError:
        raise UserError(f"The checkpoint {folder.name} has a broken {path.name} (not UTF-8 text).") from None
    except json.JSONDecodeError as e:
        raise UserError(f"The checkpoint {folder.name} has a broken {path.name} (not valid JSON: {e.msg} at line "
                        f"{e.lineno}).") from None
    except OSError as e:
        raise UserError(f"The checkpoint {folder.name}'s {path.name} cannot be read ({e.strerror or e}).") from None
    if not isinstance(meta, dict) or not meta.get("family") or not isinstance(meta.get("config"), dict):
        raise UserError(f"The checkpoint {folder.name} has a broken {path.name}: it does not name a model family "
                        f"and its config.")
    return meta


def checkpoint_family(folder: str | Path) -> str | None:
    """The model family a checkpoint's model_config.json names ("bert", "t5", "gpt", ...), or None
    when it cannot be read (read_model_meta says why)."""
    try:
        return str(read_model_meta(folder)["family"])
    except UserError:
        return None


# ---------------------------------------------------------------------------- RNG states
def capture_rng_state() -> dict[str, Any]:
    """torch (CPU and CUDA), numpy and Python global RNG states as tensors/plain values.

    The trainer draws data and masks from explicit generators; these global states matter for
    dropout (torch) and are saved for any library code that uses the global generators."""
    np_state = np.random.get_state()
    py_version, py_state, py_gauss = random.getstate()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": {"name": np_state[0], "keys": torch.from_numpy(np_state[1].astype(np.int64)),
                  "pos": int(np_state[2]), "has_gauss": int(np_state[3]), "cached_gaussian": float(np_state[4])},
        "python": {"version": py_version, "state": list(py_state), "gauss": py_gauss},
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state((n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                         n["cached_gaussian"]))
    p = state["python"]
    random.setstate((p["version"], tuple(p["state"]), p["gauss"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, default=_jsonable) + "\n", encoding="utf-8")


def _jsonable(x: Any) -> Any:
    if isinstance(x, Path):
        return str(x)
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    if isinstance(x, tuple):
        return list(x)
    raise TypeError(f"{type(x).__name__} is not JSON serialisable")


def _fsync(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
