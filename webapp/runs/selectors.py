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
           "checkpoints_for", "latest_checkpoint", "test_metrics", "test_report", "predictions_file"]


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


def metrics_since(run: Run, since_step: int | None = None) -> QuerySet[MetricPoint]:
    """Metric points with step > since_step (all when None), ordered by step, both splits."""
    qs = MetricPoint.objects.filter(run=run)
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
