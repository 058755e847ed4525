"""Contextual word vectors: how alike a checkpoint's vectors of one word are in two sentences,
layer by layer, for a family whose model gives every layer's vectors (`word_vectors`: ELMo's
token representation and biLSTM layers, model.embed)."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from trainer.errors import InferenceError
from trainer.inference.loading import load, nonempty


def word_similarity(checkpoint_dir: str | Path, sentence_a: str, sentence_b: str, word: str) -> dict[str, Any]:
    """How alike an ELMo checkpoint's vectors of `word` are in two sentences, layer by layer
    (the seeds' 苹果: fruit in one sentence, phone maker in the other). The word's tokens in
    each sentence (its first occurrence, matched without regard to case) are averaged per
    layer. -> {"word", "layers": [{"layer", "name", "cosine"}] (layer 0 is the token
    representation, the same in every context; then each biLSTM layer), "tokens_a",
    "tokens_b", "positions_a", "positions_b" (the word's token positions)}."""
    loaded = load(checkpoint_dir)
    if not loaded.family.word_vectors:
        raise InferenceError(f"Word similarity across contexts needs an ELMo checkpoint; this one holds a "
                             f"{loaded.label} model.")
    sentence_a = nonempty(sentence_a, "Type a first sentence (A).")
    sentence_b = nonempty(sentence_b, "Type a second sentence (B).")
    word = nonempty(word, "Type the word to compare (it must appear in both sentences).")
    tok = loaded.tokenizer
    sides = []
    for name, sentence in (("A", sentence_a), ("B", sentence_b)):
        match = re.search(re.escape(word), sentence, flags=re.IGNORECASE)
        if match is None:
            raise InferenceError(f"“{word}” is not in sentence {name}. Type a word that appears in both sentences.")
        enc = tok.tok.encode(sentence, add_special_tokens=False)
        loaded.check_input(len(enc.ids))
        start, end = match.span()
        positions = [i for i, (s, e) in enumerate(enc.offsets) if s < end and e > start and e > s]
        if not positions:
            raise InferenceError(f"The tokenizer left no token of “{word}” in sentence {name}; try another word.")
        sides.append((enc, positions))
    model = loaded.model
    with loaded.lock, torch.inference_mode():
        vectors = []
        for enc, positions in sides:
            layers = model.embed(torch.tensor([enc.ids]))  # L + 1 tensors (1, T, 2P)
            vectors.append([h[0, positions].float().mean(0) for h in layers])  # each (2P,)
        cosines = [float(torch.nn.functional.cosine_similarity(a, b, dim=0)) for a, b in zip(*vectors)]
    return {
        "word": word,
        "layers": [{"layer": j, "name": "token representation" if j == 0 else f"biLSTM layer {j}", "cosine": c}
                   for j, c in enumerate(cosines)],
        "tokens_a": list(sides[0][0].tokens), "tokens_b": list(sides[1][0].tokens),
        "positions_a": sides[0][1], "positions_b": sides[1][1],
    }
