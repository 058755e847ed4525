"""Nearest neighbours within a labelled dataset: the sentence vectors of up to `limit` of its texts
under one encoder checkpoint and one pooling, stored once on disk, then the k texts most like a
query sentence by cosine similarity.

    dataset_texts(data_dir, limit)                 the texts a stored dataset (trainer.prep.labelled)
                                                   is searched by, with their label and split
    build_index(folder, items, out_dir, pooling)   embed the texts in batches (progress 0-100) and
                                                   write the index: vectors.pt, texts.jsonl, index.json
    search(folder, index_dir, query, k)            the k nearest texts with their cosine and label

The vectors are trainer.inference.downstream.sentence_vectors' (unit length, so a dot product is the
cosine). Which text of an example is embedded depends on the roles it has (whatever its task): a
pair's two sentences joined by a space, tokens joined, a question that has answers (extractive QA),
an input (text to text), a prompt (or a chat's first user message). Every problem the user can fix
raises InferenceError with a sentence.
"""
from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from trainer.errors import DatasetError, InferenceError
from trainer.inference.downstream import POOLINGS, sentence_vectors
from trainer.inference.loading import load, nonempty

DEFAULT_LIMIT = 2000
MAX_K = 50
BATCH_SIZE = 32
INDEX_VERSION = 1
VECTORS_FILE, TEXTS_FILE, META_FILE = "vectors.pt", "texts.jsonl", "index.json"
SPLIT_ORDER = ("train", "validation", "test")


def example_text(example: dict[str, Any]) -> str:
    """The text of a stored example that stands for it in a search, by its roles
    (trainer.prep.labelled.examples)."""
    if "tokens" in example:
        return " ".join(example["tokens"] or [])
    if "answers" in example:
        return str(example.get("question", ""))
    if "input" in example:
        return str(example["input"])
    if "messages" in example:
        return str(next((m["content"] for m in example["messages"] if m.get("role") == "user"),
                        example["messages"][0]["content"] if example["messages"] else ""))
    if "prompt" in example:
        return str(example["prompt"])
    if "sentence1" in example:
        return f"{example['sentence1']} {example['sentence2']}"
    return str(example.get("text", ""))


def example_label(labels: str, example: dict[str, Any]) -> str | None:
    """The example's label as shown beside it, by its dataset's kind of label (TaskSpec.labels):
    None for the kinds without one label per text (tags, a choice's index, none)."""
    if labels not in ("classes", "number", "multi") or "label" not in example:
        return None
    label = example["label"]
    if isinstance(label, (list, tuple)):
        return ", ".join(str(x) for x in label)
    if isinstance(label, float):
        return f"{label:g}"
    return str(label)


def dataset_texts(data_dir: str | Path, limit: int = DEFAULT_LIMIT) -> tuple[list[dict[str, Any]], int]:
    """([{"text", "label", "split"}] for the first `limit` non-empty texts, train split first;
    the number of examples in the dataset)."""
    from trainer.prep.labelled.store import iter_examples, read_meta
    from trainer.prep.labelled.tasks import task_spec

    if int(limit) < 1:
        raise InferenceError("The number of texts to embed must be at least 1.")
    try:
        meta = read_meta(Path(data_dir))
    except DatasetError as e:
        raise InferenceError(str(e)) from None
    try:
        labels = task_spec(meta.get("task")).labels
    except DatasetError as e:
        raise InferenceError(str(e)) from None
    items: list[dict[str, Any]] = []
    total = 0
    for split in SPLIT_ORDER:
        try:
            for example in iter_examples(Path(data_dir), split):
                total += 1
                text = example_text(example).strip()
                if text and len(items) < limit:
                    items.append({"text": text, "label": example_label(labels, example), "split": split})
        except FileNotFoundError:
            continue
    if not items:
        raise InferenceError("The dataset has no text to search.")
    return items, total


def build_index(checkpoint_dir: str | Path, items: Sequence[dict[str, Any]], out_dir: str | Path, *,
                pooling: str = "mean", progress: Callable[[float], None] | None = None,
                batch_size: int = BATCH_SIZE) -> dict[str, Any]:
    """Embed every item's text and write the index into out_dir (replacing what was there, all at
    once at the end: a failed build leaves nothing behind). -> the index's meta: {"version",
    "pooling", "count", "dimensions", "truncated" (texts cut to the model's length), "weights_mtime"}."""
    if pooling not in POOLINGS:
        raise InferenceError(f"pooling must be one of {', '.join(POOLINGS)}, not {pooling!r}.")
    if not items:
        raise InferenceError("There is no text to embed.")
    loaded = load(checkpoint_dir)
    out = Path(out_dir)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        chunks, truncated = [], 0
        for start in range(0, len(items), batch_size):
            batch = [it["text"] for it in items[start:start + batch_size]]
            unit, cut = sentence_vectors(loaded, batch, pooling=pooling)
            chunks.append(unit.to(torch.float32))
            truncated += sum(cut)
            if progress is not None:
                progress(100.0 * min(start + batch_size, len(items)) / len(items))
        vectors = torch.cat(chunks)
        torch.save(vectors.contiguous(), tmp / VECTORS_FILE)
        with open(tmp / TEXTS_FILE, "w", encoding="utf-8") as fh:
            for it in items:
                fh.write(json.dumps({"text": it["text"], "label": it.get("label"), "split": it.get("split")},
                                    ensure_ascii=False) + "\n")
        meta = {"version": INDEX_VERSION, "pooling": pooling, "count": len(items), "dimensions": int(vectors.shape[1]),
                "truncated": truncated, "weights_mtime": _weights_mtime(checkpoint_dir)}
        (tmp / META_FILE).write_text(json.dumps(meta), encoding="utf-8")
        shutil.rmtree(out, ignore_errors=True)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return meta


def read_index(index_dir: str | Path) -> dict[str, Any]:
    """The index's meta (index.json); InferenceError when the index is not (completely) on disk."""
    folder = Path(index_dir)
    try:
        meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise InferenceError("The dataset's embeddings are not on disk (any more); embed the dataset again.") from None
    if meta.get("version") != INDEX_VERSION or not all((folder / n).is_file() for n in (VECTORS_FILE, TEXTS_FILE)):
        raise InferenceError("The dataset's embeddings are incomplete or from an older version; embed the dataset "
                             "again.")
    return meta


def is_current(checkpoint_dir: str | Path, index_dir: str | Path) -> bool:
    """Whether the index on disk is complete and was made from the checkpoint's present weights."""
    try:
        meta = read_index(index_dir)
    except InferenceError:
        return False
    return meta.get("weights_mtime") == _weights_mtime(checkpoint_dir)


def search(checkpoint_dir: str | Path, index_dir: str | Path, query: str, *, k: int = 5) -> dict[str, Any]:
    """-> {"query", "pooling", "count" (texts searched), "dimensions", "truncated" (the query was cut),
    "neighbours": [{"rank", "text", "label", "split", "similarity"}] most similar first}."""
    query = nonempty(query, "Type a sentence to find its nearest neighbours.")
    if not 1 <= int(k) <= MAX_K:
        raise InferenceError(f"k must be between 1 and {MAX_K}.")
    meta = read_index(index_dir)
    if meta.get("weights_mtime") != _weights_mtime(checkpoint_dir):
        raise InferenceError("The checkpoint's weights changed since the dataset was embedded; embed it again.")
    vectors = torch.load(Path(index_dir) / VECTORS_FILE, map_location="cpu", weights_only=True)
    unit, cut = sentence_vectors(load(checkpoint_dir), [query], pooling=meta["pooling"])
    if unit.shape[1] != vectors.shape[1]:
        raise InferenceError("The dataset's embeddings do not fit this checkpoint; embed the dataset again.")
    scores = (vectors @ unit[0].to(vectors.dtype)).clamp(-1.0, 1.0)
    top = torch.topk(scores, min(int(k), scores.shape[0]))
    wanted = {int(i): float(s) for i, s in zip(top.indices, top.values)}
    found: dict[int, dict[str, Any]] = {}
    with open(Path(index_dir) / TEXTS_FILE, encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if i in wanted:
                found[i] = json.loads(line)
    ranked = sorted(wanted.items(), key=lambda kv: (-kv[1], kv[0]))
    return {"query": query, "pooling": meta["pooling"], "count": int(meta["count"]),
            "dimensions": int(meta["dimensions"]), "truncated": bool(cut[0]),
            "neighbours": [{"rank": r + 1, "text": found[i]["text"], "label": found[i].get("label"),
                            "split": found[i].get("split"), "similarity": s}
                           for r, (i, s) in enumerate(ranked)]}


def _weights_mtime(checkpoint_dir: str | Path) -> int | None:
    try:
        return (Path(checkpoint_dir) / "model.safetensors").stat().st_mtime_ns
    except OSError:
        return None
