"""The attention viewer: the softmax weights of every layer and head for a text.

Which stacks a checkpoint has, how its input is laid out and how one forward pass reaches every
attention module all come from its Family (`attention_stacks`, `prompt_ids`,
`attention_stack`, `attention_forward`): encoders show their self-attention, GPT its causal
self-attention, T5 three stacks (the encoder's, the decoder's causal self-attention and the
decoder's cross-attention over the encoder's tokens), whose decoder side reads a target
(`attention_reads_target`). A family without attention (ELMo) says why.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainer.errors import InferenceError
from trainer.inference.generate import Decoding, prepare, run, whole
from trainer.inference.loading import Loaded, load, nonempty

ATTENTION_MAX_TOKENS = 128   # per side of an attention map: 128 x 128 weights per head
ATTENTION_MAX_WEIGHTS = 2_000_000  # all layers at once beyond this: ask for one layer
ATTENTION_DECIMALS = 4
ATTENTION_TARGET_TOKENS = 32  # T5 without a target: the greedy output, at most this long
STACK_LABELS = {"encoder": "Encoder self-attention", "decoder": "Decoder self-attention (causal)",
                "cross": "Decoder cross-attention (decoder tokens attend to the encoder's)",
                "content": "Content stream (each token sees every token, itself included)",
                "query": "Query stream (each position sees every token but its own)"}


def attention_maps(checkpoint_dir: str | Path, text: str, *, target: str | None = None, stack: str | None = None,
                   layer: int | None = None) -> dict[str, Any]:
    """The softmax attention weights of every layer and head for `text`: {"family", "stack",
    "stacks" (what this family offers), "tokens" (queries, rows), "key_tokens" (columns),
    "layers", "heads", "layer" (the one asked for, or None for all), "maps": [layer][head] =
    rows x columns of weights (rounded to 4 decimals; each row sums to 1), "target"}.

    A decoder side that reads a target (T5's) reads `target` or, without one, the model's own
    greedy output. At most ATTENTION_MAX_TOKENS tokens a side."""
    loaded = load(checkpoint_dir)
    tok, family = loaded.tokenizer, loaded.family
    stacks = list(family.attention_stacks)
    if not stacks:
        raise InferenceError(family.no_attention or f"A {family.label} model has no attention to show.")
    stack = stack or stacks[0]
    if stack not in stacks:
        raise InferenceError(f"A {family.label} model has no {stack!r} attention; choose {' or '.join(stacks)}.")
    text = nonempty(text, "Type a text to see its attention.")
    ids = family.prompt_ids(tok, text)
    _check_attention_length(len(ids), "text")
    loaded.check_length(len(ids))
    reads_target = family.attention_reads_target and stack != "encoder"
    decoder_ids: list[int] = []
    if reads_target:
        if target is not None and str(target).strip():
            target_ids = tok.tok.encode(str(target).strip(), add_special_tokens=False).ids
        else:
            greedy = Decoding(max_new_tokens=ATTENTION_TARGET_TOKENS)
            target_ids, _ = run(loaded, prepare(loaded, text, ATTENTION_TARGET_TOKENS), greedy)
            target = tok.tok.decode(target_ids, skip_special_tokens=True)
        decoder_ids = [int(loaded.model.config.decoder_start_token_id)] + target_ids
        _check_attention_length(len(decoder_ids), "target")
    calls = _record_attention(loaded, ids, decoder_ids)
    maps = [w for s, w in calls if s == stack]  # one (N, T, S) per layer, in layer order
    if not maps:
        raise InferenceError("This model recorded no attention weights for that stack.")
    n_layers, n_heads = len(maps), int(maps[0].shape[0])
    if layer is not None:
        layer = whole(layer, "layer", 0, n_layers - 1)
        chosen = [maps[layer]]
    else:
        total = sum(int(m.numel()) for m in maps)
        if total > ATTENTION_MAX_WEIGHTS:
            raise InferenceError(f"That is {total:,} attention weights; ask for one layer at a time "
                                 f"(layer 0 to {n_layers - 1}).")
        chosen = maps
    query_ids = decoder_ids if reads_target else ids  # the decoder's tokens ask, in both decoder stacks
    key_ids = decoder_ids if reads_target and stack == "decoder" else ids  # cross-attention reads the encoder's
    return {
        "family": loaded.family_name, "stack": stack, "stacks": stacks, "layers": n_layers, "heads": n_heads,
        "layer": layer,
        "tokens": [_shown_token(tok, i) for i in query_ids],
        "key_tokens": [_shown_token(tok, i) for i in key_ids],
        "maps": [_rounded(m) for m in chosen],
        "target": target if reads_target else None,
    }


def _check_attention_length(n: int, what: str) -> None:
    if n > ATTENTION_MAX_TOKENS:
        raise InferenceError(f"The {what} is {n} tokens long; the attention viewer shows at most "
                             f"{ATTENTION_MAX_TOKENS} tokens. Shorten it.")


def _record_attention(loaded: Loaded, ids: list[int], decoder_ids: list[int]) -> list[tuple[str, torch.Tensor]]:
    """[(stack, weights (N, T, S))] of every attention call of one forward pass, in call order.

    Forward hooks collect each call (not each module), so a module that serves several layers
    (ALBERT's shared layers) gives one map per layer."""
    from models_lib.core.layers import recording_attention

    model, family = loaded.model, loaded.family
    calls: list[tuple[str, torch.Tensor]] = []

    def hook(module: nn.Module, args: Any, out: Any, name: str) -> None:
        calls.append((family.attention_stack(name, module), module.weights[0].float()))
        second = getattr(module, "query_weights", None)  # XLNet's query stream, from the same call
        if second is not None:
            calls.append(("query", second[0].float()))

    with loaded.lock, torch.inference_mode(), recording_attention(model) as modules:
        hooks = [m.register_forward_hook(lambda mod, args, out, name=name: hook(mod, args, out, name))
                 for name, m in modules]
        try:
            family.attention_forward(model, torch.tensor([ids]), decoder_ids)
        finally:
            for h in hooks:
                h.remove()
    return calls


def _rounded(weights: torch.Tensor) -> list:
    """(N, T, S) -> nested lists of floats with ATTENTION_DECIMALS decimals (short JSON)."""
    scale = 10.0 ** ATTENTION_DECIMALS
    return (torch.round(weights.double() * scale) / scale).tolist()


# Byte-level BPE spells a space as "Ġ" and a newline as "Ċ" inside its tokens; on a chart's axis
# the SentencePiece-style "▁" and "↵" read better.
_BYTE_LEVEL_MARKS = str.maketrans({"Ġ": "▁", "Ċ": "↵"})


def _shown_token(bundle: Any, token_id: int) -> str:
    """A token's vocabulary string as the attention viewer labels it."""
    text = bundle.tok.id_to_token(int(token_id)) or ""
    return text.translate(_BYTE_LEVEL_MARKS) if bundle.meta.get("algorithm") == "bpe" else text
