"""Turns the statistics dicts stored by the jobs into rows the templates can show."""
from __future__ import annotations

from typing import Any

from webapp.corpora.forms import cleaning_rules

STAT_LABELS = [
    ("documents", "Documents"),
    ("sentences", "Sentences"),
    ("words", "Words"),
    ("characters", "Characters"),
    ("bytes", "Bytes"),
]
SPLIT_LABELS = {"train": "Training", "valid": "Validation"}
ALWAYS_REMOVED = {
    "duplicate_pages": "Identical documents (always removed)",
    "pages_left_empty": "Documents left empty after cleaning",
}


def _unit(key: str) -> str:
    if key.startswith("lines"):
        return "lines"
    if key.startswith("sentences"):
        return "sentences"
    return "documents"


def corpus_stats(stats: dict[str, Any]) -> dict[str, Any] | None:
    if not stats:
        return None
    splits = [
        {"name": name, "label": label, "values": [stats[name].get(key, 0) for key, _ in STAT_LABELS]}
        for name, label in SPLIT_LABELS.items() if isinstance(stats.get(name), dict)
    ]
    return {
        "totals": [(label, stats.get(key, 0)) for key, label in STAT_LABELS],
        "columns": [label for _, label in STAT_LABELS],
        "splits": splits,
        "input": stats.get("input") or {},
    }


def removed_rows(removed: dict[str, int], options: dict[str, bool]) -> list[dict[str, Any]]:
    """One row per rule that was switched on (in the form's order), then the always-on checks."""
    from trainer.prep.corpus import REMOVED_KEYS

    rows = []
    shown = set()
    for rule in cleaning_rules():
        key = REMOVED_KEYS.get(rule.field)
        if options.get(rule.field) or (key and key in removed):
            rows.append({"label": rule.label, "count": removed.get(key, 0), "unit": _unit(key or "")})
            shown.add(key)
    for key, label in ALWAYS_REMOVED.items():
        if key in removed:
            rows.append({"label": label, "count": removed[key], "unit": _unit(key)})
            shown.add(key)
    for key, count in removed.items():  # anything newer than this page
        if key not in shown:
            rows.append({"label": key.replace("_", " ").capitalize(), "count": count, "unit": ""})
    return rows


def chosen_rules(options: dict[str, bool]) -> list[str]:
    return [rule.label for rule in cleaning_rules() if options.get(rule.field)]


def tokenizer_stats(stats: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(label, value, explanation) for the tokenizer's headline numbers."""
    if not stats:
        return []
    rows = []
    if "vocab_size" in stats:
        requested = stats.get("requested_vocab_size")
        note = "tokens, including the special ones"
        if requested and requested > stats["vocab_size"]:
            note += f" ({requested:,} requested: the corpus has fewer distinct pieces)"
        rows.append(("Vocabulary", f"{stats['vocab_size']:,}", note))
    if "tokens_per_word" in stats:
        rows.append(("Tokens per word", f"{stats['tokens_per_word']:.2f}",
                     "on the validation split; 1.0 means every word is one token"))
    if "unk_rate" in stats:
        rows.append(("Unknown tokens", f"{100 * stats['unk_rate']:.2f} %",
                     "of the validation split's tokens are [UNK]"))
    return rows


def shard_rows(shards: Any) -> list[dict[str, Any]]:
    """Per split: documents, sentences and tokens of the encoded shards."""
    if not isinstance(shards, dict):
        return []
    rows = []
    for name, label in SPLIT_LABELS.items():
        value = shards.get(name)
        if isinstance(value, dict):
            rows.append({"label": label, "documents": value.get("n_documents"),
                         "sentences": value.get("n_sentences"), "tokens": value.get("n_tokens")})
    return rows
