"""Turns what the dataset rows store into what the templates show."""
from __future__ import annotations

import json
from typing import Any

from webapp.datasets.forms import ROLE_HELP, task_needs

SPLIT_LABELS = {"train": "Train", "validation": "Validation", "test": "Test"}
CELL_CHARS = 160


def cell(value: Any) -> str:
    """One value of a row as text: token lists joined by spaces, other JSON as JSON, long text shortened."""
    if value is None:
        return "null"
    if isinstance(value, list) and all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value):
        text = " ".join(str(v) for v in value)
    elif isinstance(value, (list, dict, bool)):
        text = json.dumps(value, ensure_ascii=False)
    else:
        text = str(value)
    return text if len(text) <= CELL_CHARS else text[: CELL_CHARS - 1].rstrip() + "…"


def preview_rows(preview: dict) -> list[list[str]]:
    """The first rows of the upload, one cell per column, in the columns' order."""
    columns = preview.get("columns") or []
    return [[cell(row.get(column, "")) for column in columns] for row in preview.get("rows") or []]


def preview_details(preview: dict) -> list[str]:
    """What the reader found besides the rows: "gzip-compressed", "delimiter ;", "SQuAD v2.0"."""
    details = preview.get("details") or {}
    out = []
    if details.get("compressed"):
        out.append("gzip-compressed")
    delimiter = details.get("delimiter")
    if delimiter and delimiter != ",":
        out.append("delimiter " + {"\t": "tab", ";": "semicolon", "|": "pipe"}.get(delimiter, repr(delimiter)))
    if details.get("squad_version"):
        out.append(f"SQuAD v{details['squad_version']}")
    return out


def tasks_json() -> dict[str, dict[str, str]]:
    """Per task: its title, description and the roles it needs (the mapping form's help)."""
    from trainer.prep.labelled import TASKS

    return {name: {"title": spec.title, "description": spec.description, "needs": task_needs(name)}
            for name, spec in TASKS.items()}


def label_chart(task: str | None, label_counts: dict | None, labels: list | None) -> dict[str, str]:
    """What a dataset's label chart says, from its task's TaskSpec: the heading, the sentence before
    ", per split" and the unit one count is ("examples", "tokens"); scores in bins say so."""
    from trainer.prep.labelled import TASKS

    spec = TASKS.get(task or "")
    unit = spec.label_unit if spec is not None else "example"
    if (label_counts or {}).get("kind") == "bins":
        count = len(label_counts.get("labels") or [])
        return {"heading": "Scores", "sentence": f"The scores in {count} equal-width bins", "unit": f"{unit}s"}
    count = len(labels or [])
    if spec is None:
        return {"heading": "Labels", "sentence": f"{count} labels, counted per example", "unit": "examples"}
    return {"heading": spec.label_heading, "sentence": spec.label_sentence(count), "unit": f"{unit}s"}


def in_context(task: str | None) -> bool:
    """Whether the explorer's prompt builder evaluates a `task` dataset in context (its TaskSpec says)."""
    from trainer.prep.labelled import TASKS

    spec = TASKS.get(task or "")
    return spec is not None and spec.in_context


def demos_json() -> dict[str, str]:
    """Per demo: how it is made (the demo select's help)."""
    from trainer.prep.labelled import DEMOS

    return {name: demo.how for name, demo in DEMOS.items()}


def split_rows(sizes: dict[str, int], origins: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Per split (train, validation, test): its label, examples, share of the whole and where its
    examples come from (services.split_origins: "test.conll", "0.1 of train.conll, at random")."""
    total = sum(sizes.values()) if sizes else 0
    return [{"name": name, "label": label, "examples": sizes.get(name, 0), "origin": (origins or {}).get(name, ""),
             "share": sizes.get(name, 0) / total if total else 0.0} for name, label in SPLIT_LABELS.items()]


def split_file_rows(files: dict[str, str]) -> list[dict[str, str]]:
    """The files of a dataset uploaded as a file per split: split label and file name ([] for one file)."""
    if len(files) < 2:
        return []
    return [{"name": name, "label": label, "filename": files[name]} for name, label in SPLIT_LABELS.items()
            if name in files]


def mapping_rows(mapping: dict[str, str], columns: list[str]) -> list[dict[str, str]]:
    """The confirmed mapping in the file's column order: column, role, what the role means."""
    ordered = [c for c in columns if c in mapping] + [c for c in mapping if c not in columns]
    return [{"column": c, "role": mapping[c], "help": ROLE_HELP.get(mapping[c], "")} for c in ordered]


def example_rows(examples: list[dict]) -> list[list[tuple[str, str]]]:
    """The first stored examples as (field, text) pairs."""
    return [[(key, cell(value)) for key, value in example.items()] for example in examples]


def split_summary(spec: dict) -> str:
    """How the examples were split, in words."""
    if not spec:
        return ""
    if spec.get("strategy") == "column":
        return "by the split column"
    if spec.get("strategy") == "files":
        return "by the files uploaded, one per split"
    return (f"at random: {spec.get('train', 0):g} train, {spec.get('validation', 0):g} validation, "
            f"{spec.get('test', 0):g} test")


def label_stats_rows(label_stats: dict[str, dict]) -> list[dict[str, Any]]:
    """Regression: per split that has scores, its label and count, min, max, mean, std."""
    return [{"label": label, **label_stats[name]} for name, label in SPLIT_LABELS.items() if label_stats.get(name)]
