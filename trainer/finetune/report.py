"""What a fine-tuning run leaves behind about its test split, beside test_metrics.json:

    predictions.jsonl / predictions.csv   one row per test example: input, gold, predicted, score,
                                          correct; the errors first (then the dataset's order)
    test_report.json                      {"task", "labels", "confusion": {"labels", "matrix"} | None,
                                           "per_class": [{label, precision, recall, f1, support}] | None,
                                           "level": "class" | "entity"}

The engine calls `write_test_outputs` right after scoring the test split, with the Step that scored
it (trainer.finetune.tasks.TaskStep: its `predictions`, `references` and `scores`, one per example
in the split's order). A task changes what is written by overriding the step's `prediction_records`
or `test_report` (both have generic defaults here); the web app only reads and serves the files.
No torch here.
"""
from __future__ import annotations

import csv
import io
import json
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainer.finetune import metrics as metric_fns

PREDICTIONS_JSONL = "predictions.jsonl"
PREDICTIONS_CSV = "predictions.csv"
REPORT_FILE = "test_report.json"
CSV_FIELDS = ("input", "gold", "predicted", "score", "correct")


def input_text(example: dict) -> str:
    """The example's input as one line a person reads: the text, a pair joined by " ||| ", the
    words of a tagged sentence, "question ||| context", or the first text-like field there is."""
    if "text" in example:
        return str(example["text"])
    if "sentence1" in example:
        return f"{example['sentence1']} ||| {example.get('sentence2', '')}"
    if "tokens" in example:
        return " ".join(str(t) for t in example["tokens"])
    if "question" in example:
        return f"{example['question']} ||| {example.get('context', '')}"
    for key in ("input", "prompt", "source"):
        if key in example:
            return str(example[key])
    return json.dumps(example, ensure_ascii=False, default=str)[:2000]


def _plain(value: Any) -> Any:
    """Sets become sorted lists (multi-label); everything else as it is."""
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=str)
    return value


def is_correct(predicted: Any, gold: Any) -> bool:
    """Whether a prediction is right: equal, or for extractive QA (gold: the list of answer
    texts) an exact match with one of them by SQuAD's normalisation ("" for no answer)."""
    if isinstance(gold, list) and isinstance(predicted, str):
        if not gold:
            return predicted == ""
        return any(metric_fns.answer_exact_match(predicted, g) == 1.0 for g in gold)
    if isinstance(predicted, float) or isinstance(gold, float):
        return False  # a regression score is never "right"; the rows sort by error instead
    return _plain(predicted) == _plain(gold)


def prediction_records(examples: Sequence[dict], predictions: Sequence[Any], references: Sequence[Any],
                       scores: Sequence[float | None]) -> list[dict]:
    """One row per example (the lists pair up in order), the errors first: wrong before right,
    and for regression the largest absolute error first."""
    if not (len(examples) == len(predictions) == len(references)):
        raise ValueError(f"{len(examples)} test examples, {len(predictions)} predictions and {len(references)} "
                         "references: they must pair up one to one.")
    rows = []
    for i, (example, predicted, gold) in enumerate(zip(examples, predictions, references)):
        score = scores[i] if i < len(scores) else None
        row = {"input": input_text(example), "gold": _plain(gold), "predicted": _plain(predicted),
               "score": None if score is None else round(float(score), 6), "correct": is_correct(predicted, gold)}
        rows.append(row)
    if rows and isinstance(rows[0]["predicted"], float):
        order = sorted(range(len(rows)), key=lambda i: -abs(float(rows[i]["predicted"]) - float(rows[i]["gold"])))
    else:
        order = sorted(range(len(rows)), key=lambda i: rows[i]["correct"])  # stable: the split's order within
    return [rows[i] for i in order]


# ---------------------------------------------------------------------------------- per-class tables
def entity_table(predictions: Sequence[Sequence[str]], references: Sequence[Sequence[str]]) -> list[dict]:
    """Entity-level precision, recall, F1 and support per entity type (seqeval's classification
    report, conlleval's mode as the run's entity_f1), the types sorted."""
    from seqeval.metrics import classification_report

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = classification_report([list(r) for r in references], [list(p) for p in predictions],
                                       output_dict=True, zero_division=0)
    return [{"label": name, "precision": float(v["precision"]), "recall": float(v["recall"]),
             "f1": float(v["f1-score"]), "support": int(v["support"])}
            for name, v in sorted(report.items()) if not name.endswith(" avg")]


def class_report(predictions: Sequence[Any], references: Sequence[Any], labels: list[str]) -> dict:
    """A classifier's: the confusion matrix over its labels (and any other predicted or given), per class."""
    known = [*labels, *sorted({str(x) for x in (*predictions, *references)} - set(labels))]
    return {"confusion": {"labels": known, "matrix": metric_fns.confusion_matrix(predictions, references, known)},
            "per_class": metric_fns.per_class_table(predictions, references, known)}


def entity_report(predictions: Sequence[Any], references: Sequence[Any], labels: list[str]) -> dict:
    """A tagger's: the confusion matrix per tag (one cell per word), the table per entity type (entity-level)."""
    flat_pred = [tag for row in predictions for tag in row]
    flat_ref = [tag for row in references for tag in row]
    known = [*labels, *sorted(set(flat_pred + flat_ref) - set(labels))]
    return {"confusion": {"labels": known, "matrix": metric_fns.confusion_matrix(flat_pred, flat_ref, known)}
            if flat_ref else None,
            "per_class": entity_table(predictions, references)}


# TaskMetrics.report -> how that report is made; its name is the report's "level"
REPORTS = {"class": class_report, "entity": entity_report}


def test_report(scoring: Any, predictions: Sequence[Any], references: Sequence[Any],
                labels: Sequence[str]) -> dict | None:
    """The confusion matrix and per-class table of a test split, as the task's scoring
    (trainer.finetune.metrics.TaskMetrics) names its `report`; None for a scoring without one."""
    if not references or not scoring.report:
        return None
    made = REPORTS[scoring.report](predictions, references, [str(x) for x in labels])
    return {"task": scoring.task, "level": scoring.report, **made}


# ---------------------------------------------------------------------------------- writing
def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def write_test_outputs(out_dir: Path, step: Any, examples: Sequence[dict]) -> list[dict]:
    """Write predictions.jsonl, predictions.csv and test_report.json for the test split the step
    has just scored; returns the prediction rows."""
    out_dir = Path(out_dir)
    rows = step.prediction_records(examples)
    _atomic_write(out_dir / PREDICTIONS_JSONL,
                  "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(CSV_FIELDS)
    for row in rows:
        writer.writerow([_cell(row[k]) for k in CSV_FIELDS])
    _atomic_write(out_dir / PREDICTIONS_CSV, buffer.getvalue())
    report = step.test_report()
    if report is not None:
        _atomic_write(out_dir / REPORT_FILE, json.dumps(report, indent=1) + "\n")
    return rows


# ---------------------------------------------------------------------------------- generated samples
SAMPLES_FILE = "samples.json"
SAMPLES_KEPT = 50       # the validations whose samples are kept (the newest)
SAMPLE_MAX_CHARS = 1000  # each text is cut to this many characters


def _sample_text(value: Any) -> str:
    text = str(value if value is not None else "")
    return text if len(text) <= SAMPLE_MAX_CHARS else text[: SAMPLE_MAX_CHARS - 1] + "…"


def sample_rows(samples: Sequence[Sequence[Any]]) -> list[dict[str, str]]:
    """A generative step's samples, (input, generated, reference) each, as the rows a run reports."""
    return [{"input": _sample_text(source), "generated": _sample_text(generated),
             "reference": _sample_text(reference)} for source, generated, reference in samples]


def read_samples(out_dir: Path) -> list[dict]:
    """[{"step", "samples": [{"input", "generated", "reference"}]}], oldest first ([] without any)."""
    try:
        data = json.loads((Path(out_dir) / SAMPLES_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [v for v in data.get("validations", []) if isinstance(v, dict)] if isinstance(data, dict) else []


def write_samples(out_dir: Path, step: int, rows: Sequence[dict]) -> None:
    """Record one validation's samples in out_dir/samples.json (beside the metrics): a step
    already there (a resumed run evaluating it again) is replaced, the newest SAMPLES_KEPT kept."""
    Path(out_dir).mkdir(parents=True, exist_ok=True)  # the first validation may come before any checkpoint
    kept = [v for v in read_samples(out_dir) if v.get("step") != int(step)]
    kept.append({"step": int(step), "samples": list(rows)})
    kept.sort(key=lambda v: v.get("step", 0))
    _atomic_write(Path(out_dir) / SAMPLES_FILE,
                  json.dumps({"validations": kept[-SAMPLES_KEPT:]}, ensure_ascii=False, indent=1) + "\n")
