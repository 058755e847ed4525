"""Ask a checkpoint questions: fill-mask and next-sentence scores (trainer.inference does the work).

Models are loaded and cached per process by trainer.inference; here we only check what a
user can get wrong before it reaches the model.
"""
from __future__ import annotations

from typing import Any

from trainer.errors import InferenceError
from webapp.runs.models import Checkpoint

MAX_TEXT_CHARS = 2000
MAX_TOP_K = 50


def _folder(checkpoint: Checkpoint):
    folder = checkpoint.folder
    if not (folder / "model_config.json").is_file():
        raise InferenceError("This checkpoint's files are no longer on disk.")
    return folder


def _text(value: str, what: str = "The text") -> str:
    text = (value or "").strip()
    if not text:
        raise InferenceError(f"{what} is empty.")
    if len(text) > MAX_TEXT_CHARS:
        raise InferenceError(f"{what} is {len(text):,} characters long; the explorer takes at most {MAX_TEXT_CHARS:,}.")
    return text


def fill_mask(*, checkpoint: Checkpoint, text: str, top_k: int = 5) -> list[dict[str, Any]]:
    """For each [MASK] in `text`: its position and the top-k tokens with probabilities."""
    from trainer import inference  # imports torch

    text = _text(text)
    if not 1 <= int(top_k) <= MAX_TOP_K:
        raise InferenceError(f"top_k must be between 1 and {MAX_TOP_K}.")
    return inference.fill_mask(_folder(checkpoint), text, top_k=int(top_k))


def next_sentence(*, checkpoint: Checkpoint, text_a: str, text_b: str) -> dict[str, float]:
    """P(sentence B follows sentence A) as {"is_next": p, "not_next": 1 - p}."""
    from trainer import inference  # imports torch

    text_a, text_b = _text(text_a, "Sentence A"), _text(text_b, "Sentence B")
    return inference.next_sentence(_folder(checkpoint), text_a, text_b)
