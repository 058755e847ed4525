"""Comparing runs (issue 9, section 5): a labelled dataset's leaderboard of fine-tuning runs (with
the zero-, one- and few-shot evaluations saved on it beside them, issue 12 point 4), and
the compare view of a few runs of any kind (their settings side by side, the ones that differ
first, and the metrics they share, to draw overlaid).

Reads only: every run comes through its owner (the callers pass runs the user owns).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from webapp.runs.models import MetricPoint, Run, RunKind

# Config fields that say where a run's files are, not how it trains: never a "setting".
NOT_SETTINGS = frozenset({"checkpoint", "dataset", "output_dir", "data_dir", "family", "preset"})
COMPARE_MIN, COMPARE_MAX = 2, 6


def _primary(run: Run) -> tuple[str, bool]:
    """The run's headline metric (its task's, fine-tuning; the validation loss, pre-training) and
    whether higher is better."""
    if run.is_finetune:
        from trainer import finetune

        task = (run.objectives or [""])[0]
        if task in finetune.names():
            metrics = finetune.metrics_for(task)
            return metrics.primary, metrics.higher_is_better
    return "loss", False


def settings_diff(configs: Sequence[dict]) -> list[dict]:
    """[{"name", "values": [one per config, None where absent], "differs"}], the differing
    settings first, each group in name order."""
    names = sorted({k for c in configs for k in c if k not in NOT_SETTINGS})
    rows = []
    for name in names:
        values = [c.get(name) for c in configs]
        rows.append({"name": name, "values": values, "differs": any(v != values[0] for v in values[1:])})
    return sorted(rows, key=lambda r: (not r["differs"], r["name"]))


def _best(points: list[MetricPoint], key: str, higher: bool) -> tuple[float | None, int | None]:
    best, at = None, None
    for p in points:
        v = p.values.get(key) if isinstance(p.values, dict) else None
        if isinstance(v, (int, float)) and not isinstance(v, bool) and (
                best is None or (v > best if higher else v < best)):
            best, at = float(v), p.step
    return best, at


def leaderboard(user, dataset) -> dict[str, Any]:
    """Every fine-tuning run of `user` on `dataset`: its base checkpoint, status, the settings
    in which the runs differ, its best validation value of the task's primary metric (and the
    step) and its test metrics; best first by the test metric, then by the best validation one."""
    runs = list(Run.objects.filter(owner=user, kind=RunKind.FINETUNE, dataset=dataset)
                .select_related("base_checkpoint__run"))
    points: dict[Any, list[MetricPoint]] = {r.id: [] for r in runs}
    for p in MetricPoint.objects.filter(run__in=runs, split__in=("valid", "test")).order_by("step"):
        points[p.run_id].append(p)
    primary, higher = _primary(runs[0]) if runs else ("", True)
    differing = [row["name"] for row in settings_diff([r.config for r in runs]) if row["differs"]]
    rows = []
    for run in runs:
        valid = [p for p in points[run.id] if p.split == "valid"]
        tests = [p for p in points[run.id] if p.split == "test"]
        best, best_step = _best(valid, primary, higher)
        test = dict(tests[-1].values) if tests else {}
        rows.append({
            "run": run, "id": str(run.id), "name": run.name, "status": run.status,
            "checkpoint": run.base_checkpoint.label if run.base_checkpoint_id else "a deleted checkpoint",
            "checkpoint_id": str(run.base_checkpoint_id) if run.base_checkpoint_id else None,
            "settings": {name: run.config.get(name) for name in differing},
            "best_valid": best, "best_valid_step": best_step, "test": test,
            "test_primary": test.get(primary) if isinstance(test.get(primary), (int, float)) else None,
            "created_at": run.created_at,
        })

    def rank(row):
        sign = -1 if higher else 1
        return (row["test_primary"] is None, sign * (row["test_primary"] or 0.0),
                row["best_valid"] is None, sign * (row["best_valid"] or 0.0))
    rows.sort(key=rank)
    test_keys = sorted({k for row in rows for k in row["test"]})
    accuracies = [row["test"]["accuracy"] for row in rows if _number(row["test"].get("accuracy"))]
    return {"primary": primary, "higher_is_better": higher, "settings": differing, "test_metrics": test_keys,
            "rows": rows, "best_test_accuracy": max(accuracies) if accuracies else None,
            "baselines": baseline_rows(dataset, primary),
            "incontext": incontext_rows(user, dataset)}


def baseline_rows(dataset, primary: str = "") -> list[dict[str, Any]]:
    """The dataset's baselines (trainer.finetune.baselines, stored on it when it became ready) as
    leaderboard rows: name, label, kind, the validation value of `primary` (the baselines' own
    metric when empty) and the test metrics; [] for a dataset without any."""
    stored = (dataset.baselines or {}) if dataset is not None else {}
    primary = primary or stored.get("metric") or ""
    rows = []
    for row in stored.get("baselines") or []:
        valid = row.get("validation") or {}
        rows.append({"name": row.get("name", ""), "label": row.get("label", ""), "kind": row.get("kind", ""),
                     "valid": valid.get(primary) if _number(valid.get(primary)) else None,
                     "test": dict(row.get("test") or {})})
    return rows


def baseline_reference(run: Run) -> dict[str, Any] | None:
    """The lexical baseline a fine-tuning run will be judged against, with the metric and split
    values ({"label", "metric", "validation", "test", "higher_is_better"}), or None."""
    if not run.is_finetune or run.dataset_id is None:
        return None
    from trainer.finetune import baselines

    stored = run.dataset.baselines or {}
    row = baselines.lexical(stored)
    if row is None:
        return None
    metric = stored.get("metric") or ""
    return {"label": row.get("label", ""), "metric": metric, "higher_is_better": stored.get("higher_is_better", True),
            "validation": (row.get("validation") or {}).get(metric), "test": (row.get("test") or {}).get(metric)}


def baseline_verdict(run: Run) -> dict[str, Any] | None:
    """How a fine-tuning run's primary metric stands against its dataset's lexical baseline
    (trainer.finetune.baselines.compare): on test once the run has scored it, else its best
    validation value once the run has finished. None when there is nothing to compare."""
    if not run.is_finetune or run.dataset_id is None:
        return None
    from trainer.finetune import baselines

    stored = run.dataset.baselines or {}
    if baselines.lexical(stored) is None:
        return None
    test = MetricPoint.objects.filter(run=run, split="test").order_by("-step").first()
    best = None
    if test is None:
        if not run.is_finished:
            return None
        valid = list(MetricPoint.objects.filter(run=run, split="valid").order_by("step"))
        best, _ = _best(valid, stored.get("metric") or "", bool(stored.get("higher_is_better", True)))
    values = test.values if test is not None and isinstance(test.values, dict) else None
    return baselines.compare(stored, test=values, best_valid=best)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def incontext_rows(user, dataset) -> list[dict[str, Any]]:
    """The zero-, one- and few-shot evaluations `user` saved on `dataset` (the explorer's accuracy
    against k), newest first: the checkpoint, the settings, accuracy per k and the best k."""
    from webapp.explorer.models import InContextResult

    rows = []
    for result in (InContextResult.objects.filter(owner=user, dataset=dataset)
                   .select_related("checkpoint__run")):
        best_k, best = result.best
        rows.append({
            "id": str(result.id), "checkpoint": result.checkpoint.label, "checkpoint_id": str(result.checkpoint_id),
            "template": result.template, "separator": result.separator, "k_max": result.k_max, "seed": result.seed,
            "normalise": result.normalise, "n_queries": result.n_queries,
            "k": list(range(len(result.accuracies))), "accuracy": list(result.accuracies),
            "best_k": best_k, "best_accuracy": best, "created_at": result.created_at,
        })
    return rows


class CompareError(ValueError):
    """A compare request that cannot be answered; the message is a sentence."""


def compare(runs: Sequence[Run]) -> dict[str, Any]:
    """Two to six runs side by side: their settings (the differing ones first), and per metric
    they share (by split), each run's curve as (steps, values)."""
    if not COMPARE_MIN <= len(runs) <= COMPARE_MAX:
        raise CompareError(f"Choose from {COMPARE_MIN} to {COMPARE_MAX} runs to compare, not {len(runs)}.")
    series: dict[tuple[str, str], dict[str, tuple[list[int], list[float]]]] = {}
    for run in runs:
        for p in MetricPoint.objects.filter(run=run, split__in=("train", "valid")).order_by("step"):
            if not isinstance(p.values, dict):
                continue
            for key, value in p.values.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    steps, values = series.setdefault((p.split, key), {}).setdefault(str(run.id), ([], []))
                    steps.append(p.step)
                    values.append(float(value))
    shared = [{"split": split, "metric": key, "curves": [
        {"run": str(r.id), "name": r.name, "steps": curves[str(r.id)][0], "values": curves[str(r.id)][1]}
        for r in runs]}
        for (split, key), curves in sorted(series.items(), key=lambda kv: (kv[0][0] != "valid", kv[0][1]))
        if len(curves) == len(runs)]
    return {
        "runs": [{"id": str(r.id), "name": r.name, "kind": r.kind, "status": r.status,
                  "objectives": list(r.objectives or []), "lineage": r.lineage} for r in runs],
        "settings": settings_diff([r.config for r in runs]),
        "metrics": shared,
    }
