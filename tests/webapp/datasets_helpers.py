"""Small labelled uploads for the dataset tests (imported by them; holds no tests)."""
from __future__ import annotations

import json

from django.core.files.uploadedfile import SimpleUploadedFile

WORDS = ("river", "garden", "lantern", "harbor", "meadow", "castle", "thunder", "feather", "orchard", "mirror")
LABELS = ("calm", "storm", "mild")


def review_csv(n: int = 30, *, bad_row: int | None = None, bad: str = "", split: bool = False) -> bytes:
    """CSV review,label (plus split): n rows with three labels; row `bad_row` (1-based) gets `bad` as its
    label instead."""
    header = "review,label,split" if split else "review,label"
    lines = [header]
    for i in range(1, n + 1):
        text = " ".join(WORDS[(i * k) % len(WORDS)] for k in range(1, 6 + i % 4))
        label = bad if i == bad_row else LABELS[i % 3]
        row = f"The {text} number {i},{label}"
        if split:
            row += "," + ("validation" if i % 5 == 0 else "test" if i % 7 == 0 else "train")
        lines.append(row)
    return ("\n".join(lines) + "\n").encode()


def conll(n: int = 12, *, broken_line_in: int | None = None) -> bytes:
    """CoNLL token/tag: n sentences of three or four tokens, a PER and a LOC each; sentence
    `broken_line_in` (1-based) gets a line without a tag."""
    sentences = []
    for i in range(1, n + 1):
        lines = [f"Ada{i}\tB-PER", "visited\tO", f"Paris{i}\tB-LOC"]
        if i % 2:
            lines.append(".\tO")
        if i == broken_line_in:
            lines.insert(1, "lonely")
        sentences.append("\n".join(lines))
    return ("\n\n".join(sentences) + "\n").encode()


def scores_jsonl(n: int = 20, *, bad_row: int | None = None) -> bytes:
    rows = [{"text": f"Sentence {i} about the {WORDS[i % 10]}.",
             "score": "lots" if i == bad_row else round(i / n, 3)} for i in range(1, n + 1)]
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def upload(name: str, content: bytes) -> SimpleUploadedFile:
    return SimpleUploadedFile(name, content)
