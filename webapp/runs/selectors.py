"""Reads for runs. Every lookup by id goes through the owner, so another user's id is a 404.

Reads never write: a run whose worker died is marked crashed by the periodic reaper
(webapp.runs.tasks.reap_stale_runs) or when it is resumed, not by looking at it."""
from __future__ import annotations

import json
import uuid
from pathlib import Path

from django.db.models import F, Prefetch, QuerySet
from django.http import Http404

from webapp.runs.models import Checkpoint, LogLine, MetricPoint, Run

__all__ = ["runs_for", "run_get", "with_last_checkpoint", "metrics_since", "log_tail", "log_after", "checkpoint_get",
           "checkpoints_for", "latest_checkpoint", "test_metrics", "test_report", "predictions_file", "tracker_logs",
           "tracker_folder"]


def _as_uuid(value) -> uuid.UUID:
    try:
        return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
    except (TypeError, ValueError, AttributeError):
        raise Http404("Not found.") from None


def with_last_checkpoint(runs: QuerySet[Run]) -> QuerySet[Run]:
    """`runs` with each run's newest checkpoint loaded alongside, as `latest_checkpoints` (a list of
    at most one), in one more query for all of them: what the run serializer shows as
    last_checkpoint, without a query per run."""
    newest = Checkpoint.objects.order_by("-step")[:1]
    return runs.select_related("corpus", "tokenizer").prefetch_related(
        Prefetch("checkpoints", queryset=newest, to_attr="latest_checkpoints"))


def runs_for(user) -> QuerySet[Run]:
    """The user's runs, newest first."""
    if not user.is_authenticated:
        return Run.objects.none()
    return with_last_checkpoint(Run.objects.filter(owner=user)).order_by("-created_at")


def follow_ups(run: Run) -> QuerySet[Run]:
    """The owner's fine-tuning runs that start from one of this run's checkpoints (the lineage
    onwards), oldest first."""
    return Run.objects.filter(owner_id=run.owner_id, base_checkpoint__run=run).select_related(
        "dataset", "base_checkpoint").order_by("created_at")


def run_get(user, run_id) -> Run:
    """One of the user's runs; Http404 for a missing run or another user's."""
    if not user.is_authenticated:
        raise Http404("Not found.")
    pk = _as_uuid(run_id)
    try:
        run = Run.objects.get(pk=pk, owner=user)
    except Run.DoesNotExist:
        raise Http404("Not found.") from None
    # For one run a plain "newest first, limit 1" is cheaper to build and to run than the
    # windowed prefetch that with_last_checkpoint needs for many, and the API needs only the
    # corpus's and tokenizer's ids (the run API's hot path; bench/serve_latency.py).
    run.latest_checkpoints = list(run.checkpoints.order_by("-step")[:1])
    return run


def metrics_since(run: Run, since_step: int | None = None, *, after: int | None = None) -> QuerySet[MetricPoint]:
    """Metric points with step > since_step (all when None), ordered by step, both splits; with
    `after`, those with a cursor (MetricPoint.seq) greater than it, in cursor order, instead."""
    qs = MetricPoint.objects.filter(run=run)
    if after is not None:
        return qs.filter(seq__gt=after).order_by("seq")
    if since_step is not None:
        qs = qs.filter(step__gt=since_step)
    return qs.order_by("step", "split")


def log_tail(run: Run, limit: int = 200) -> list[LogLine]:
    """The last `limit` log lines, oldest first."""
    return list(reversed(LogLine.objects.filter(run=run).order_by("-id")[:limit]))


def log_after(run: Run, after_id: int = 0, limit: int = 500) -> list[LogLine]:
    """Log lines with an id above `after_id`, oldest first (at most `limit`: the newest ones)."""
    return list(reversed(LogLine.objects.filter(run=run, id__gt=after_id).order_by("-id")[:limit]))


def checkpoint_get(user, checkpoint_id) -> Checkpoint:
    """One of the user's checkpoints (of a run or imported); Http404 for a missing one or another user's."""
    if not user.is_authenticated:
        raise Http404("Not found.")
    pk = _as_uuid(checkpoint_id)
    try:
        return Checkpoint.objects.select_related("run").get(pk=pk, owner=user)
    except Checkpoint.DoesNotExist:
        raise Http404("Not found.") from None


def checkpoints_for(user, run: Run | None = None) -> QuerySet[Checkpoint]:
    """The user's checkpoints (of one run when given): grouped by run, newest run first, each run's
    newest step first; imported models (no run) last, newest first."""
    if not user.is_authenticated:
        return Checkpoint.objects.none()
    qs = Checkpoint.objects.filter(owner=user).select_related("run")
    if run is not None:
        qs = qs.filter(run=run)
    return qs.order_by(F("run__created_at").desc(nulls_last=True), "run_id", "-step", "-created_at")


def latest_checkpoint(user) -> Checkpoint | None:
    if not user.is_authenticated:
        return None
    return Checkpoint.objects.filter(owner=user).select_related("run").order_by("-created_at").first()


def test_metrics(run: Run) -> list[tuple[str, float | None]]:
    """A fine-tuning run's test-split scores as (metric, value) rows, metric names sorted; [] before
    the run has scored its test split (and for pre-training runs, which have none)."""
    point = MetricPoint.objects.filter(run=run, split="test").order_by("-step").first()
    if point is None or not isinstance(point.values, dict):
        return []
    return sorted(point.values.items())


# The files a fine-tuning run writes about its test split (trainer.finetune.report); the web app
# only reads them. The names are the trainer's, repeated here so that pages load no trainer code.
PREDICTION_FILES = {"jsonl": "predictions.jsonl", "csv": "predictions.csv"}
REPORT_FILE = "test_report.json"


def test_report(run: Run) -> dict | None:
    """A fine-tuning run's confusion matrix and per-class table (test_report.json), or None when
    the run has not written one (not finished, a task without classes, or a pre-training run)."""
    if not run.is_finetune:
        return None
    try:
        report = json.loads((Path(run.folder) / REPORT_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return report if isinstance(report, dict) else None


# The generated samples of a text-to-text or SFT run's validations (trainer.finetune.report.SAMPLES_FILE).
SAMPLES_FILE = "samples.json"


def shows_samples(run: Run) -> bool:
    """Whether the run writes text at validation (its page has a Samples panel): its task generates."""
    from trainer import finetune

    return run.is_finetune and any(finetune.generates(task) for task in run.objectives or [])


def validation_samples(run: Run) -> list[dict]:
    """[{"step", "samples": [{"input", "generated", "reference"}]}] of the run's validations,
    oldest first; [] before the first one (or for a run that generates no text)."""
    if not run.is_finetune:
        return []
    try:
        data = json.loads((Path(run.folder) / SAMPLES_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    found = data.get("validations") if isinstance(data, dict) else None
    out = []
    for item in found if isinstance(found, list) else []:
        if isinstance(item, dict) and isinstance(item.get("step"), int) and isinstance(item.get("samples"), list):
            rows = [{k: str(r.get(k, "")) for k in ("input", "generated", "reference")}
                    for r in item["samples"] if isinstance(r, dict)]
            out.append({"step": item["step"], "samples": rows})
    return out


def predictions_file(run: Run, fmt: str) -> Path | None:
    """The path of the run's test predictions in `fmt` ("jsonl" or "csv"), None when there is none."""
    name = PREDICTION_FILES.get(fmt)
    if name is None or not run.is_finetune:
        return None
    path = Path(run.folder) / name
    return path if path.is_file() else None


# How each tracker of report_to (trainer.trackers) is opened on the folder it wrote: the command
# a user runs on the unzipped download (the folder keeps its name inside the zip).
TRACKER_VIEWS = {
    "tensorboard": ("TensorBoard logs", "tensorboard --logdir {folder}"),
    "mlflow": ("MLflow store", "mlflow ui --backend-store-uri sqlite:///{folder}/mlflow.db"),
    "wandb": ("W&B offline run", "wandb sync {folder}/offline-run-*"),
}


def tracker_folder(run: Run, name: str) -> Path | None:
    """The folder the tracker `name` wrote in the run's folder, None when it wrote nothing."""
    from trainer.trackers import written

    return written(run.folder).get(name)


def tracker_logs(run: Run) -> list[dict]:
    """What the run's trackers (its config's report_to) wrote: [{name, label, folder (relative to
    the storage folder, never the server's absolute path), command, file}] for those with files."""
    from trainer.trackers import written

    out = []
    for name, folder in written(run.folder).items():
        label, command = TRACKER_VIEWS[name]
        out.append({"name": name, "label": label, "folder": f"runs/{run.id}/{folder.name}",
                    "command": command.format(folder=folder.name), "file": f"{folder.name}.zip"})
    return out


def dashboard_specs(run: Run) -> tuple[list[dict], list[dict]]:
    """The run's charts and the numbers above them (trainer.charts): a fine-tuning run's from its
    task (trainer.finetune), a pre-training run's from its objectives. The run page draws them;
    the compare page reads which metrics they name."""
    from trainer import finetune, objectives
    from trainer.finetune.config import mix_task_names

    if not run.is_finetune:
        return objectives.charts_for(run.objectives), objectives.stats_for(run.objectives)
    task, dataset = (run.objectives or [""])[0], (run.config or {}).get("dataset", "")
    charts = finetune.charts_for(task, dataset=dataset,  # the task scores its dataset (QA: SQuAD 2.0 or not)
                                 mix_tasks=mix_task_names(run.config or {}))  # multi-task: each task's scores
    return charts, finetune.stats_for(task, dataset=dataset)


def objective_labels(run: Run) -> list[str]:
    """What the run trains for, as people read it: a fine-tuning run's task ("Token classification"),
    a pre-training run's objectives ("Span corruption (T5)"); a name no longer registered as is,
    its underscores spaced."""
    names = [str(n) for n in run.objectives or []]
    if run.is_finetune:
        from trainer.prep.labelled.tasks import TASKS

        return [TASKS[n].title if n in TASKS else n.replace("_", " ") for n in names]
    from webapp.runs.launch import registry_json

    known = registry_json()["objectives"]
    return [known[n]["label"] if n in known else n.replace("_", " ") for n in names]


def shown_config(run: Run) -> dict:
    """The run's config as its page shows it: the folders on the server that a fine-tuning run's
    config names (its checkpoint, its datasets, a distillation teacher) give way to what the user
    knows them by, so that no server path reaches the page."""
    config = dict(run.config or {})
    if "checkpoint" in config:
        config["checkpoint"] = run.base_checkpoint.label if run.base_checkpoint_id else "a deleted checkpoint"
    if "dataset" in config:
        config["dataset"] = run.dataset.name if run.dataset_id else "a deleted dataset"
    for key in ("output_dir", "data_dir"):
        config.pop(key, None)
    if config.get("teacher_checkpoint"):
        config["teacher_checkpoint"] = _checkpoint_named(run.owner_id, str(config["teacher_checkpoint"]))
    extras = config.get("extra_datasets")
    if isinstance(extras, list):
        config["extra_datasets"] = [_extra_named(run.owner_id, e) for e in extras]
    return config


def _checkpoint_named(owner_id, folder: str) -> str:
    from django.conf import settings

    root = Path(settings.STORAGE_ROOT)
    try:
        relative = str(Path(folder).relative_to(root))
    except ValueError:
        return "a checkpoint folder"
    found = Checkpoint.objects.filter(owner_id=owner_id, path=relative).select_related("run").first()
    return found.label if found is not None else "a deleted checkpoint"


def _extra_named(owner_id, extra):
    """A multi-task run's extra dataset ({dataset: folder, prefix, name}) with the dataset's name."""
    if not isinstance(extra, dict) or "dataset" not in extra:
        return extra
    from webapp.datasets.models import Dataset

    folder = str(extra["dataset"])
    named = next((d.name for d in Dataset.objects.filter(owner_id=owner_id) if str(d.data_dir) == folder), None)
    return {**extra, "dataset": named or "a deleted dataset"}
