"""XLNet's fill-in by permutation: predict chosen positions of a text in an order the user picks.

The chosen positions are the targets of one factorisation order: every other token comes first
(the context, which sees no target), then the targets in the given order. Step s runs the query
stream of target s, which sees the context and the targets before it, those filled with the
model's own choice at their step (the most likely token), never the text's token at any target.
Each step reports its top tokens; the answer ends with the text as filled in.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from trainer.errors import InferenceError
from trainer.inference.loading import load, nonempty
from trainer.objectives.memory import order_mask

MAX_TARGETS = 32
MAX_TOP_K = 20


def text_tokens(checkpoint_dir: str | Path, text: str) -> dict[str, Any]:
    """The text's tokens as the model reads them (what the user picks positions among)."""
    loaded = load(checkpoint_dir)
    _require_xlnet(loaded)
    text = nonempty(text, "Type a text, then pick the positions to predict.")
    ids = loaded.family.prompt_ids(loaded.tokenizer, text)
    loaded.check_input(len(ids))
    return {"tokens": [loaded.tokenizer.tok.id_to_token(i) or "" for i in ids[:-2]]}


def fill_by_permutation(checkpoint_dir: str | Path, text: str, order: list[int], top_k: int = 5) -> dict[str, Any]:
    """{"tokens": the text's tokens, "order": the positions in prediction order, "steps": [{"step",
    "position", "original" (the text's token there, never shown to the model), "predictions":
    [{"token", "id", "prob"}, ...], "chosen"}], "filled": the tokens after the last step, "text"}."""
    loaded = load(checkpoint_dir)
    _require_xlnet(loaded)
    tok = loaded.tokenizer
    text = nonempty(text, "Type a text, then pick the positions to predict.")
    ids = loaded.family.prompt_ids(tok, text)  # text, <sep>, <cls>
    loaded.check_input(len(ids))
    n_text = len(ids) - 2
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
        raise InferenceError(f"top_k must be a whole number between 1 and {MAX_TOP_K}.")
    if not isinstance(order, (list, tuple)) or not order:
        raise InferenceError("Pick at least one position to predict.")
    if len(order) > MAX_TARGETS:
        raise InferenceError(f"Pick at most {MAX_TARGETS} positions; {len(order)} were given.")
    positions = []
    for p in order:
        if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p < n_text:
            raise InferenceError(f"Positions are token numbers from 0 to {n_text - 1}; {p!r} is not one.")
        if p in positions:
            raise InferenceError(f"Position {p} is picked twice; each position is predicted once.")
        positions.append(p)
    if len(positions) == n_text:
        raise InferenceError("Leave at least one token of the text unpicked: the prediction needs some context.")

    T = len(ids)
    perm = torch.from_numpy(order_mask(positions, T))[None]  # (1, T, T)
    types = torch.zeros(1, T, dtype=torch.long)
    types[0, -1] = 2  # <cls>
    filled = list(ids)
    steps = []
    with loaded.lock, torch.inference_mode():
        for s, pos in enumerate(positions):
            mapping = torch.zeros(1, 1, T)
            mapping[0, 0, pos] = 1.0
            out = loaded.model(torch.tensor([filled]), token_type_ids=types, perm_mask=perm, target_mapping=mapping)
            probs = torch.softmax(out.logits[0, 0].float(), dim=-1)
            top = probs.topk(min(top_k, probs.numel()))
            chosen = int(top.indices[0])
            steps.append({
                "step": s + 1, "position": pos, "original": tok.tok.id_to_token(ids[pos]) or "",
                "predictions": [{"token": tok.tok.id_to_token(int(i)) or "", "id": int(i), "prob": float(p)}
                                for p, i in zip(top.values, top.indices)],
                "chosen": tok.tok.id_to_token(chosen) or "",
            })
            filled[pos] = chosen
    return {"family": loaded.family_name, "tokens": [tok.tok.id_to_token(i) or "" for i in ids[:n_text]],
            "order": positions, "steps": steps,
            "filled": [tok.tok.id_to_token(i) or "" for i in filled[:n_text]],
            "text": tok.tok.decode(filled[:n_text], skip_special_tokens=True)}


def _require_xlnet(loaded: Any) -> None:
    if not loaded.family.permutation_fill:
        raise InferenceError(f"Fill-in by permutation is XLNet's; this is a {loaded.family.label} checkpoint.")
