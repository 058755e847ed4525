"""The experiment trackers a run can mirror itself to: `report_to` (a setting of RunConfig and
FinetuneConfig) names some of TensorBoard, MLflow and Weights & Biases. This module knows their
names, packages and folders, and checks a report_to value without importing any of them (the
web process validates configs too); trainer.training.tracker_sinks writes to them.

Everything a tracker writes stays inside the run's folder, with no server and no network:

    <run>/tensorboard/   TensorBoard event files   (tensorboard --logdir <run>/tensorboard)
    <run>/mlruns/        a local MLflow store      (mlflow ui --backend-store-uri sqlite:///<run>/mlruns/mlflow.db)
    <run>/wandb/         a W&B run in offline mode (wandb sync <run>/wandb/offline-run-*)
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from trainer.errors import ConfigError, bounded

# tracker -> (the module that must import, what to pip install for it)
TRACKERS: dict[str, tuple[str, str]] = {
    "tensorboard": ("tensorboard", "tensorboard"),
    "mlflow": ("mlflow", "mlflow"),
    "wandb": ("wandb", "wandb"),
}
# tracker -> what the forms call it
LABELS = {"tensorboard": "TensorBoard", "mlflow": "MLflow (a local store)", "wandb": "Weights & Biases (offline)"}
# tracker -> the folder of the run it writes into
FOLDERS = {"tensorboard": "tensorboard", "mlflow": "mlruns", "wandb": "wandb"}


def installed(module: str) -> bool:
    """Whether `module` can be imported here (found without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def unavailable() -> dict[str, str]:
    """tracker -> the command that installs it, for each tracker whose package is missing here
    (the forms show it beside the tracker's box, which they disable)."""
    return {name: f"pip install {package}" for name, (module, package) in TRACKERS.items() if not installed(module)}


def check(report_to: Any) -> list[str]:
    """report_to as a list of tracker names, or ConfigError with a sentence: a name that is not a
    tracker, one named twice, or one whose package is not installed here."""
    if isinstance(report_to, str):  # "tensorboard" or "tensorboard,mlflow" (a form, a command line)
        report_to = [p.strip() for p in report_to.split(",") if p.strip()]
    if report_to is None:
        return []
    if not isinstance(report_to, (list, tuple)):
        raise ConfigError(bounded(f"report_to must be a list of trackers (some of {', '.join(TRACKERS)}), "
                                  f"not {report_to!r}."))
    if len(report_to) > len(TRACKERS):  # checked first: the message never repeats a long list
        raise ConfigError(f"report_to lists {len(report_to):,} entries, but there are only {len(TRACKERS)} "
                          f"trackers ({', '.join(TRACKERS)}); name each at most once.")
    if not all(isinstance(n, str) for n in report_to):
        raise ConfigError(bounded(f"report_to must be a list of tracker names (some of {', '.join(TRACKERS)}), "
                                  f"not {report_to!r}."))
    names = [n.strip().lower() for n in report_to]
    for name in names:
        if name not in TRACKERS:
            raise ConfigError(bounded(f"report_to names {name!r}, which is not a tracker offered here; "
                                      f"choose among {', '.join(TRACKERS)}.", keep_end=40))
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(f"report_to names {', '.join(twice)} twice (or more); name each tracker once.")
    for name in names:
        module, package = TRACKERS[name]
        if not installed(module):
            raise ConfigError(f"report_to names {name} but the {package} package is not installed: "
                              f"pip install {package}")
    return names


def written(out_dir: Path) -> dict[str, Path]:
    """{tracker: its folder} for the trackers that wrote into a run's folder."""
    return {name: Path(out_dir) / folder for name, folder in FOLDERS.items()
            if (Path(out_dir) / folder).is_dir() and any((Path(out_dir) / folder).iterdir())}

