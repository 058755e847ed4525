"""Comparing runs (issue 9, section 5): a labelled dataset's leaderboard of fine-tuning runs (with
the zero-, one- and few-shot evaluations saved on it beside them, issue 12 point 4), and
the compare view of a few runs of any kind (their settings side by side, the ones that differ
first, and the metrics they share, to draw overlaid).

Reads only: every run comes through its owner (the callers pass runs the user owns).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from webapp.runs import selectors
from webapp.runs.launch import family_json, registry_json
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


def below_baseline_advice(run: Run, base_record: dict[str, Any] | None) -> list[Any]:
    """The likely causes of a run below its baseline, each with what in its record points to it
    (trainer.finetune.advice): its curves, its settings, its classes (a classifier's chance level) and its
    base checkpoint's record."""
    from trainer.finetune.advice import Record, below_baseline_causes, chance_classes

    points = list(MetricPoint.objects.filter(run=run, split__in=("train", "valid")).order_by("step"))
    curve = {split: [(p.step, p.values.get("loss")) for p in points if p.split == split and isinstance(p.values, dict)]
             for split in ("train", "valid")}
    config = run.config or {}
    epochs = next((p.values.get("epoch") for p in reversed(points) if p.split == "train"
                   and isinstance(p.values, dict) and _number(p.values.get("epoch"))), None)
    train_size = int(((run.dataset.sizes or {}).get("train") or 0) if run.dataset_id else 0)
    if epochs is None and train_size and run.current_step:
        per_step = int(config.get("batch_size") or 0) * int(config.get("grad_accum") or 1)
        epochs = run.current_step * per_step / train_size if per_step else None
    record = Record(lr=float(config.get("lr") or 0.0), steps=int(run.current_step or 0),
                    valid_losses=curve["valid"], train_losses=curve["train"], epochs=epochs,
                    base_imported=bool((base_record or {}).get("imported")),
                    base_notes=tuple((base_record or {}).get("notes") or ()),
                    classes=chance_classes(run.dataset.task, run.family, run.dataset.labels) if run.dataset_id
                    else None)
    return below_baseline_causes(record)


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


# What differs most between two runs, first in the settings diff and always shown: what the model
# is, what it read, what it started from and what it was tuned on (the rest is the config's).
LEAD_ROWS = (("family", "Family"), ("preset", "Preset"), ("tokenizer", "Tokenizer"), ("corpus", "Corpus"),
             ("base_checkpoint", "Base checkpoint"), ("dataset", "Dataset"))
TOKENIZER_NOTE = ("These runs read text through different tokenizers ({names}), so a per-token metric "
                  "(a loss or perplexity per token, a token accuracy, tokens per second) counts different "
                  "units in each: its curves do not compare like for like. Compare a task's scores, or "
                  "runs with the same tokenizer.")


def compare(runs: Sequence[Run]) -> dict[str, Any]:
    """Two to six runs side by side: their settings (what the model is and what it read first,
    then the config, the differing fields before the shared ones), and per metric they share (by
    split) each run's curve as (steps, values). Only the series the runs' dashboards chart or
    report count as metrics (not the trainer's own eta_s or progress); a per-token one is marked
    when the runs' tokenizers differ, with the sentence saying why (`tokenizer_note`)."""
    if not COMPARE_MIN <= len(runs) <= COMPARE_MAX:
        raise CompareError(f"Choose from {COMPARE_MIN} to {COMPARE_MAX} runs to compare, not {len(runs)}.")
    specs = [_metric_names(run) for run in runs]
    metric_names = set.intersection(*(names for names, _ in specs))
    per_token = set.union(*(tokens for _, tokens in specs))
    tokenizers = [_tokenizer_of(run) for run in runs]
    note = ""
    if len({key for key, _ in tokenizers}) > 1:
        note = TOKENIZER_NOTE.format(names=", ".join(dict.fromkeys(name for _, name in tokenizers)))
    series: dict[tuple[str, str], dict[str, tuple[list[int], list[float]]]] = {}
    for run in runs:
        for p in MetricPoint.objects.filter(run=run, split__in=("train", "valid")).order_by("step"):
            if not isinstance(p.values, dict):
                continue
            for key, value in p.values.items():
                if key in metric_names and _number(value):
                    steps, values = series.setdefault((p.split, key), {}).setdefault(str(run.id), ([], []))
                    steps.append(p.step)
                    values.append(float(value))
    labels = {key: label for run in runs for key, label in metric_labels(run).items()}
    shared = [{"split": split, "metric": key, "label": labels.get(key, key), "per_token": bool(note) and key in per_token,
               "curves": [
        {"run": str(r.id), "name": r.name, "steps": curves[str(r.id)][0], "values": curves[str(r.id)][1]}
        for r in runs]}
        for (split, key), curves in sorted(series.items(), key=lambda kv: (kv[0][0] != "valid", kv[0][1]))
        if len(curves) == len(runs)]
    return {
        "runs": [{"id": str(r.id), "name": r.name, "kind": r.kind, "status": r.status,
                  "objectives": list(r.objectives or []), "lineage": r.lineage} for r in runs],
        "settings": _lead_rows(runs, [name for _, name in tokenizers]) + _labelled(settings_diff([r.config for r in runs])),
        "metrics": shared,
        "tokenizer_note": note,
    }


def shown_settings(rows: list[dict], *, everything: bool) -> list[dict]:
    """The settings rows the compare page shows: the leading rows and the differing ones, or all."""
    return [row for row in rows if everything or row.get("lead") or row["differs"]]


def _labelled(rows: list[dict]) -> list[dict]:
    return [{**row, "label": row["name"], "lead": False} for row in rows]


def _lead_rows(runs: Sequence[Run], tokenizer_names: list[str]) -> list[dict]:
    """LEAD_ROWS for each run: the family's label, the preset, the tokenizer and corpus (a fine-tuning
    run's through its base checkpoint), the base checkpoint and the dataset; None where it has none."""
    def family(run: Run) -> str:
        spec = family_json(run.family) if run.family else None
        return spec["label"] if spec else run.family or None

    def corpus(run: Run) -> str | None:
        origin = _pretraining_run(run)
        if origin is None or origin.corpus_id is None:
            return None
        return origin.corpus.name

    values = {
        "family": [family(r) for r in runs],
        "preset": [None if r.is_finetune else r.preset for r in runs],  # a fine-tuning run's is its checkpoint's
        "tokenizer": tokenizer_names,
        "corpus": [corpus(r) for r in runs],
        "base_checkpoint": [(r.base_checkpoint.label if r.base_checkpoint_id else "a deleted checkpoint")
                            if r.is_finetune else None for r in runs],
        "dataset": [(r.dataset.name if r.dataset_id else "a deleted dataset") if r.is_finetune else None
                    for r in runs],
    }
    return [{"name": name, "label": label, "values": values[name], "lead": True,
             "differs": any(v != values[name][0] for v in values[name][1:])} for name, label in LEAD_ROWS]


def _pretraining_run(run: Run, depth: int = 8) -> Run | None:
    """The pre-training run a run's model comes from: itself, or for a fine-tuning run the run of
    its base checkpoint, followed back (None for an imported model or a deleted checkpoint)."""
    while run is not None and run.is_finetune and depth > 0:
        base = run.base_checkpoint if run.base_checkpoint_id else None
        run = base.run if base is not None and base.run_id else None
        depth -= 1
    return run if run is not None and not run.is_finetune else None


def _tokenizer_of(run: Run) -> tuple[str, str]:
    """(what identifies the run's tokenizer, its name): the pre-training run's tokenizer; an imported
    model's own (it came with the model); "unknown" when the checkpoint was deleted."""
    origin = _pretraining_run(run)
    if origin is not None and origin.tokenizer_id is not None:
        return f"tokenizer:{origin.tokenizer_id}", origin.tokenizer.name
    base = run
    while base is not None and base.is_finetune and base.base_checkpoint_id:
        checkpoint = base.base_checkpoint
        if checkpoint.run_id is None:  # an imported model and the tokenizer it came with
            return f"checkpoint:{checkpoint.id}", f"{checkpoint.label}'s own"
        base = checkpoint.run
    return f"run:{run.id}", "unknown (its checkpoint was deleted)"


def metric_labels(run: Run) -> dict[str, str]:
    """What the run's dashboard calls each metric key it charts ("MLM accuracy", not "mlm_acc"): a
    series' legend name without its split, or its chart's title where the legend names only the split."""
    from trainer.charts import SPLIT_LABELS

    charts, _ = selectors.dashboard_specs(run)
    out: dict[str, str] = {}
    for chart in charts:
        for s in chart["series"]:
            label = str(s["label"]).removesuffix(f" ({SPLIT_LABELS.get(s['split'], '')})")
            label = chart["title"] if label in SPLIT_LABELS.values() else label
            out.setdefault(s["metric"], label[:1].upper() + label[1:])
    return out


def _metric_names(run: Run) -> tuple[set[str], set[str]]:
    """(the metric keys the run's dashboard charts or reports, those of them counted per token of the
    tokenizer): trainer.charts' tables through selectors.dashboard_specs. A fine-tuning run's loss is
    its task's (per example, or per tag), so only the task's own per-token series count there."""
    from trainer.charts import COMMON_METRICS
    from trainer.objectives import per_token_metrics

    charts, stats = selectors.dashboard_specs(run)
    names = {s["metric"] for c in charts for s in c["series"]} | {s["metric"] for s in stats}
    per_token = {s["metric"] for c in charts if c.get("per_token") for s in c["series"]}
    if run.is_finetune:
        return names, per_token - {m.name for m in COMMON_METRICS if m.name != "tokens_per_s"}
    known = registry_json()["objectives"]  # and what each objective says it reports (MLM's mlm_loss, ...)
    names |= {key for o in run.objectives or [] if o in known for key in known[o]["metrics"]}
    return names, per_token | per_token_metrics(run.objectives)
