"""Turns the statistics dicts stored by the jobs into rows the templates can show."""
from __future__ import annotations

from typing import Any

from webapp.corpora.forms import cleaning_rules
from webapp.jobs.uploads import human_bytes

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
FILES_SHOWN = 20  # rows of the files table shown before the rest is folded away
FILES_LISTED = 1000  # rows a corpus page lists at most (folded after FILES_SHOWN); its totals count them all
EXAMPLES_SHOWN = 3
FORMAT_LABELS = {"txt": "text", "jsonl": "JSON lines", "parquet": "Parquet", "arrow": "Arrow",
                 "archive": "archive (unpacked when processed)"}
COMPRESSION_LABELS = {"none": "", "gzip": "gzip", "zstd": "zstd", "bz2": "bzip2"}


def _unit(key: str, count: int = 2) -> str:
    """What a removed count counts, in the singular for 1: "1 document", "3 lines"."""
    unit = "lines" if key.startswith("lines") else "sentences" if key.startswith("sentences") else "documents"
    return unit[:-1] if count == 1 else unit


def _count(count: int, unit: str) -> str:
    """"1 document", "10,412 documents": `unit` is the plural."""
    return f"{count:,} {unit[:-1] if count == 1 else unit}"


def corpus_stats(stats: dict[str, Any]) -> dict[str, Any] | None:
    if not stats:
        return None
    splits = [
        {"name": name, "label": label, "values": [stats[name].get(key, 0) for key, _ in STAT_LABELS]}
        for name, label in SPLIT_LABELS.items() if isinstance(stats.get(name), dict)
    ]
    return {
        "totals": [(label[:-1] if stats.get(key, 0) == 1 else label, stats.get(key, 0)) for key, label in STAT_LABELS],
        "columns": [label for _, label in STAT_LABELS],
        "splits": splits,
        "input": input_line(stats.get("input") or {}),
        "stages": stage_times(stats.get("stages") or {}),
    }


def input_line(found: dict[str, Any]) -> str:
    """"3 files (1.2 MB): 2 Parquet, 1 JSON lines; compressed: 1 zstd; 10,412 documents before cleaning."
    from stats["input"] (an older corpus's: its one file's format, lines and documents)."""
    if not found:
        return ""
    parts = []
    n_files = found.get("files")
    if isinstance(n_files, list):
        n_files = len(n_files)
    if isinstance(n_files, int) and n_files:
        size = found.get("file_bytes", found.get("bytes"))
        head = f"{n_files:,} file{'s' if n_files != 1 else ''}"
        if isinstance(size, (int, float)):
            head += f" ({human_bytes(size)})"
        formats = found.get("formats")
        if isinstance(formats, dict) and formats:
            head += ": " + ", ".join(f"{n:,} {FORMAT_LABELS.get(k, k)}" for k, n in formats.items())
        parts.append(head)
        packed = {k: v for k, v in (found.get("compressions") or {}).items() if k != "none"}
        if packed:
            parts.append("compressed: " + ", ".join(f"{v:,} {COMPRESSION_LABELS.get(k, k)}" for k, v in packed.items()))
    elif found.get("format"):
        parts.append(FORMAT_LABELS.get(found["format"], str(found["format"]))
                     + (" (compressed)" if found.get("compressed") else ""))
    if isinstance(found.get("lines"), int):
        parts.append(_count(found["lines"], "lines"))
    if isinstance(found.get("documents"), int):
        parts.append(_count(found["documents"], "documents") + " before cleaning")
    return "; ".join(parts) + "." if parts else ""


STAGE_NAMES = {"read_clean": "reading and cleaning", "dedup": "removing duplicates", "split": "writing the splits"}


def stage_times(stages: dict[str, Any]) -> str:
    """"Reading and cleaning 8.1 s (14.8 MB/s), removing duplicates 0.4 s, ..." from stats["stages"],
    in the order the stages run (a JSON column may keep its keys in another order)."""
    order = [k for k in STAGE_NAMES if k in stages] + sorted(k for k in stages if k not in STAGE_NAMES)
    parts = []
    for key in order:
        value = stages[key]
        if not isinstance(value, dict) or not isinstance(value.get("seconds"), (int, float)):
            continue
        part = f"{STAGE_NAMES.get(key, key.replace('_', ' '))} {value['seconds']:,.1f} s"
        size = value.get("bytes")
        if isinstance(size, (int, float)) and value["seconds"] > 0 and size:
            part += f" ({size / 1e6 / value['seconds']:,.1f} MB/s)"
        parts.append(part)
    if not parts:
        return ""
    text = ", ".join(parts)
    return text[0].upper() + text[1:] + "."


def files(sources: list[dict[str, Any]] | None, *, show_paths: bool = False) -> dict[str, Any] | None:
    """The files table of a corpus: the first FILES_SHOWN rows, the rest folded, and a formats summary."""
    if not sources:
        return None
    rows = [_file_row(entry, show_paths) for entry in sources if isinstance(entry, dict)]
    return {"rows": rows[:FILES_SHOWN], "more": rows[FILES_SHOWN:], "summary": files_summary(sources),
            "show_paths": show_paths, "unlisted": 0}


def corpus_files(corpus: Any) -> dict[str, Any] | None:
    """The files table of a corpus page: its first FILES_LISTED files (CorpusFile rows, read in
    order), the totals of all of them (corpus.sources_summary) and how many are not listed."""
    listed = [row.to_dict() for row in corpus.files.order_by("position")[:FILES_LISTED]]
    table = files(listed, show_paths=corpus.source_kind == "import")
    if table is None:
        return None
    summary = corpus.sources_summary or {}
    if summary:
        table["summary"] = _summary_text(summary)
    table["listed"] = f"{len(listed):,}"
    table["unlisted"] = max(0, int(summary.get("files") or 0) - len(listed))
    return table


def _file_row(entry: dict[str, Any], show_path: bool) -> dict[str, Any]:
    compression = str(entry.get("compression") or "none")
    return {
        "name": str(entry.get("name") or ""),
        "path": str(entry.get("path") or "") if show_path else "",
        "format": FORMAT_LABELS.get(entry.get("format"), str(entry.get("format") or "")),
        "format_key": str(entry.get("format") or ""),
        "compression": COMPRESSION_LABELS.get(compression, compression) or "—",
        "size": human_bytes(int(entry.get("bytes") or 0)),
    }


def files_summary(sources: list[dict[str, Any]]) -> str:
    """"3 files, 1.2 GB: 1 Parquet, 2 JSON lines; 1 zstd, 1 gzip"."""
    formats: dict[str, int] = {}
    compressions: dict[str, int] = {}
    total = 0
    for entry in sources:
        if not isinstance(entry, dict):
            continue
        fmt = FORMAT_LABELS.get(entry.get("format"), str(entry.get("format") or "?"))
        formats[fmt] = formats.get(fmt, 0) + 1
        compression = str(entry.get("compression") or "none")
        if compression != "none":
            label = COMPRESSION_LABELS.get(compression, compression)
            compressions[label] = compressions.get(label, 0) + 1
        total += int(entry.get("bytes") or 0)
    n = sum(formats.values())
    text = f"{n:,} file{'s' if n != 1 else ''}, {human_bytes(total)}: " + ", ".join(
        f"{count:,} {fmt}" for fmt, count in formats.items())
    if compressions:
        text += "; compressed: " + ", ".join(f"{count:,} {label}" for label, count in compressions.items())
    return text


def listing(found: dict[str, Any]) -> dict[str, Any]:
    """An import's dry run (services.import_listing) as the upload page shows it."""
    sources = found.get("files") or []
    summary = found.get("summary") or {}
    n, size = int(summary.get("files") or len(sources)), int(summary.get("bytes") or 0)
    return {**(files(sources, show_paths=False) or {"rows": [], "more": []}), "n": n, "size": human_bytes(size),
            "shown": found.get("shown", len(sources)), "path": found.get("path", ""),
            "summary": _summary_text(summary) if summary else files_summary(sources)}


def _summary_text(summary: dict[str, Any]) -> str:
    n = int(summary.get("files") or 0)
    text = f"{n:,} file{'s' if n != 1 else ''}, {human_bytes(int(summary.get('bytes') or 0))}"
    formats = summary.get("formats") or {}
    if formats:
        text += ": " + ", ".join(f"{count:,} {FORMAT_LABELS.get(k, k)}" for k, count in formats.items())
    packed = {k: v for k, v in (summary.get("compressions") or {}).items() if k != "none"}
    if packed:
        text += "; compressed: " + ", ".join(f"{v:,} {COMPRESSION_LABELS.get(k, k)}" for k, v in packed.items())
    return text


def sample_line(stats: dict[str, Any] | None, *, trained: bool = False) -> str:
    """What the tokenizer learns its vocabulary from (stats["sample"] of the ingest)."""
    sample = (stats or {}).get("sample")
    if not isinstance(sample, dict) or not isinstance(sample.get("bytes"), (int, float)):
        return ""
    share = sample.get("share")
    verb = "Trained" if trained else "A tokenizer trains"
    if not isinstance(share, (int, float)) or share >= 1:
        return f"{verb} on the whole training split ({human_bytes(sample['bytes'])})."
    percent = f"{100 * share:.0f}%" if share >= 0.01 else f"{100 * share:.2f}%"
    return f"{verb} on a {human_bytes(sample['bytes'])} sample: {percent} of the corpus."


def removed_rows(removed: dict[str, int], options: dict[str, bool],
                 examples: dict[str, list[str]] | None = None) -> list[dict[str, Any]]:
    """One row per rule that was switched on (in the form's order), then the always-on checks; each
    with up to EXAMPLES_SHOWN examples of the text it removed."""
    from trainer.prep.corpus import REMOVED_KEYS

    examples = examples if isinstance(examples, dict) else {}

    def row(label: str, key: str, count: int, unit: str) -> dict[str, Any]:
        shown = examples.get(key) if isinstance(examples.get(key), list) else []
        return {"label": label, "count": count, "unit": unit, "key": key,
                "examples": [str(e) for e in shown[:EXAMPLES_SHOWN]]}

    rows = []
    shown = set()
    for rule in cleaning_rules():
        key = REMOVED_KEYS.get(rule.field)
        if options.get(rule.field) or (key and key in removed):
            rows.append(row(rule.label, key or "", removed.get(key, 0), _unit(key or "", removed.get(key, 0))))
            shown.add(key)
    for key, label in ALWAYS_REMOVED.items():
        if key in removed:
            rows.append(row(label, key, removed[key], _unit(key, removed[key])))
            shown.add(key)
    for key, count in removed.items():  # anything newer than this page
        if key not in shown:
            rows.append(row(key.replace("_", " ").capitalize(), key, count, ""))
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
