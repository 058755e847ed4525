"""Decoding for every generative model (T5, GPT, UniLM): greedy, beam search and sampling.

A model that generates implements three methods; `generate` below drives them:

    state, tokens = model.start_generation(input_ids, attention_mask)
        Prepare for decoding (T5: run the encoder once; GPT: nothing yet) and return the tokens
        to feed first, (B, t0): the prompt for a decoder-only model, the decoder start token
        for an encoder-decoder. They begin the returned sequences, as in `transformers`.
    logits, state = model.generation_step(state, tokens)
        Feed tokens (B, t) after everything fed so far; return the next-token logits (B, V) of
        the last position. Decoders keep a key/value cache in `state`, so each step costs one
        position, not the whole prefix.
    state = model.reorder_generation_state(state, index)
        Keep rows `index` (B',) of the state, in that order (beam search's choice of beams,
        and the expansion of each example into num_beams rows).

Greedy decoding picks the argmax at every step: on the same weights it gives the same tokens
as `transformers`' generate (tests/models_lib). Finished rows (those that produced
eos_token_id) are filled with pad_token_id until every row has finished.

Only ids below model.config.vocab_size are ever chosen: the models cut their logits to the
vocabulary (their tables are padded to a multiple of 64 rows, models_lib.core.vocab), and
`next_logits` cuts any wider logits again, so no search or sampler sees a padding column.
"""
from __future__ import annotations

from typing import Any

import torch

__all__ = ["generate", "filter_logits", "next_logits"]


@torch.no_grad()
def generate(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, *,
             max_new_tokens: int = 20, do_sample: bool = False, num_beams: int = 1, temperature: float = 1.0,
             top_k: int = 0, top_p: float = 1.0, eos_token_id: int | None = None, pad_token_id: int | None = None,
             length_penalty: float = 1.0, generator: torch.Generator | None = None) -> torch.Tensor:
    """Token ids (B, t0 + n), n <= max_new_tokens: the start tokens (see the module docstring)
    followed by the generated ones. input_ids (B, S) long; attention_mask (B, S) 1/0 (left
    padding for decoder-only prompts of different lengths)."""
    if input_ids.dim() != 2 or input_ids.shape[0] == 0:
        raise ValueError(f"input_ids must be a (batch, length) tensor of token ids, got shape {tuple(input_ids.shape)}.")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be at least 1, got {max_new_tokens}.")
    if num_beams < 1:
        raise ValueError(f"num_beams must be at least 1, got {num_beams}.")
    if do_sample and num_beams > 1:
        raise ValueError("Choose sampling (do_sample) or beam search (num_beams > 1), not both.")
    if do_sample and temperature <= 0:
        raise ValueError(f"temperature must be positive when sampling, got {temperature}.")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}.")
    if top_k < 0:
        raise ValueError(f"top_k must be 0 (off) or more, got {top_k}.")
    pad = pad_token_id if pad_token_id is not None else (eos_token_id if eos_token_id is not None else 0)
    was_training = model.training
    model.eval()
    try:
        state, tokens = model.start_generation(input_ids, attention_mask)
        if num_beams > 1:
            return _beam_search(model, state, tokens, max_new_tokens, num_beams, eos_token_id, pad, length_penalty)
        return _sample_or_greedy(model, state, tokens, max_new_tokens, do_sample, temperature, top_k, top_p,
                                 eos_token_id, pad, generator)
    finally:
        model.train(was_training)


def filter_logits(logits: torch.Tensor, *, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Sampling's warpers in transformers' order: divide by the temperature, keep the top_k
    largest, then the smallest set whose probability reaches top_p (at least one token).
    Removed entries become -inf. logits (B, V) -> (B, V)."""
    logits = logits / temperature
    if top_k and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[..., -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        # Drop a token when the tokens before it already reach top_p; the first always stays.
        drop_sorted = (cumulative - sorted_logits.softmax(-1)) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def next_logits(model: Any, state: Any, feed: torch.Tensor) -> tuple[torch.Tensor, Any]:
    """model.generation_step, its logits (B, V) limited to the real vocabulary (config.vocab_size)."""
    logits, state = model.generation_step(state, feed)
    vocab_size = getattr(getattr(model, "config", None), "vocab_size", None)
    if isinstance(vocab_size, int) and logits.shape[-1] > vocab_size:
        logits = logits[..., :vocab_size]
    return logits, state


def _sample_or_greedy(model: Any, state: Any, tokens: torch.Tensor, max_new_tokens: int, do_sample: bool,
                      temperature: float, top_k: int, top_p: float, eos: int | None, pad: int,
                      generator: torch.Generator | None) -> torch.Tensor:
    out = tokens
    done = torch.zeros(tokens.shape[0], dtype=torch.bool, device=tokens.device)
    feed = tokens
    for _ in range(max_new_tokens):
        logits, state = next_logits(model, state, feed)  # (B, V)
        if do_sample:
            probs = filter_logits(logits.float(), temperature=temperature, top_k=top_k, top_p=top_p).softmax(-1)
            nxt = torch.multinomial(probs, 1, generator=generator).squeeze(1)
        else:
            nxt = logits.argmax(-1)  # (B,)
        nxt = nxt.masked_fill(done, pad)
        out = torch.cat([out, nxt[:, None]], dim=1)
        if eos is not None:
            done |= nxt.eq(eos)
            if bool(done.all()):
                break
        feed = nxt[:, None]
    return out


def _beam_search(model: Any, state: Any, tokens: torch.Tensor, max_new_tokens: int, num_beams: int,
                 eos: int | None, pad: int, length_penalty: float) -> torch.Tensor:
    """Beam search with num_beams hypotheses per example; a hypothesis that produces eos is
    set aside with score log P / length^length_penalty (when it is among the num_beams best
    candidates of its step); an example is done when it has num_beams finished hypotheses and
    no running beam can beat the worst of them."""
    B, t0 = tokens.shape
    K, device = num_beams, tokens.device
    expand = torch.arange(B, device=device).repeat_interleave(K)
    state = model.reorder_generation_state(state, expand)
    seqs = tokens.index_select(0, expand)  # (B*K, t0)
    # Only the first beam is live at the start, so the K beams do not all pick the same token.
    scores = torch.full((B, K), float("-inf"), device=device)
    scores[:, 0] = 0.0
    finished: list[list[tuple[float, torch.Tensor]]] = [[] for _ in range(B)]
    done = [False] * B
    feed = seqs
    for step in range(1, max_new_tokens + 1):
        logits, state = next_logits(model, state, feed)  # (B*K, V)
        logp = logits.float().log_softmax(-1)
        V = logp.shape[-1]
        total = (scores.view(B * K, 1) + logp).view(B, K * V)
        top_scores, top_idx = total.topk(2 * K, dim=-1)  # (B, 2K)
        beam_of, token_of = top_idx // V, top_idx % V
        new_scores = torch.full((B, K), float("-inf"), device=device)
        new_rows = torch.zeros(B, K, dtype=torch.long, device=device)
        new_tokens = torch.full((B, K), pad, dtype=torch.long, device=device)
        for b in range(B):
            if done[b]:
                new_rows[b] = b * K  # any row: it is ignored
                continue
            k = 0
            for rank, (score, beam, tok) in enumerate(zip(top_scores[b].tolist(), beam_of[b].tolist(),
                                                          token_of[b].tolist())):
                if score == float("-inf"):
                    break
                row = b * K + beam
                if eos is not None and tok == eos:
                    if rank >= K:  # only the K best candidates may finish (transformers' rule)
                        continue
                    hyp = torch.cat([seqs[row], seqs.new_tensor([tok])])
                    _add_hypothesis(finished[b], score / (step ** length_penalty), hyp, K)
                    continue
                new_scores[b, k], new_rows[b, k], new_tokens[b, k] = score, row, tok
                k += 1
                if k == K:
                    break
            best_running = new_scores[b].max().item()
            if len(finished[b]) == K and best_running / (step ** length_penalty) <= finished[b][-1][0]:
                done[b] = True
        if all(done):
            break
        index = new_rows.view(-1)
        seqs = torch.cat([seqs.index_select(0, index), new_tokens.view(-1, 1)], dim=1)
        scores = new_scores
        state = model.reorder_generation_state(state, index)
        feed = new_tokens.view(-1, 1)
    # Running beams count as hypotheses too when nothing better finished, but only in examples
    # still searching when max_new_tokens ran out: a done example's running beams are the ones
    # that could not beat its finished hypotheses (and, when every example is done, `seqs` and
    # `scores` are a step behind).
    steps = seqs.shape[1] - t0
    for b in range(B):
        if done[b]:
            continue
        for k in range(K):
            if scores[b, k] > float("-inf") and steps > 0:
                _add_hypothesis(finished[b], scores[b, k].item() / (steps ** length_penalty), seqs[b * K + k], K)
    best = [hyps[0][1] for hyps in finished]
    width = max(len(h) for h in best)
    out = torch.full((B, width), pad, dtype=torch.long, device=device)
    for b, h in enumerate(best):
        out[b, : len(h)] = h
    return out


def _add_hypothesis(hyps: list[tuple[float, torch.Tensor]], score: float, seq: torch.Tensor, keep: int) -> None:
    """Insert keeping the list sorted best first and at most `keep` long."""
    hyps.append((score, seq))
    hyps.sort(key=lambda h: h[0], reverse=True)
    del hyps[keep:]
