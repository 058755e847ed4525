"""What a masked language model answers: fill in [MASK]s, judge sentence pairs (NSP) and their
order (SOP, or NSP asked both ways).

Every family that is a masked LM (its Family's `not_masked_lm` is empty) answers fill-mask:
BERT, RoBERTa (its tokenizer's mask is `<mask>`; "[MASK]" is accepted too), ALBERT, SpanBERT,
UniLM, DistilBERT, and ELECTRA through its generator (Family.fill_mask_model; its answers carry
a note saying so). next_sentence needs the head of a random-next pair objective (NSP, BERT);
sentence_order asks the head of an order-judging one (SOP, ALBERT) or, failing that, NSP: the pair
objectives say which head is which (trainer.objectives.pair_heads, SentencePairs). The other
families are refused with a sentence naming their tools.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from trainer import objectives
from trainer.errors import InferenceError
from trainer.inference.loading import Loaded, load, nonempty


def fill_mask(checkpoint_dir: str | Path, text: str, top_k: int = 5) -> list[dict]:
    """Predictions for each [MASK] in `text` (or the tokenizer's own mask token, e.g. RoBERTa's <mask>):
    [{"position": token index, "predictions": [{"token", "id", "prob"}, ...top_k, most likely first]}].
    A family that answers with another module (ELECTRA's generator) adds "note" saying so."""
    loaded = load(checkpoint_dir)
    tok = loaded.tokenizer
    require_masked_lm(loaded, "fill in [MASK]s")
    if loaded.objectives is not None and not objectives.fills_masks(loaded.objectives):
        raise InferenceError(loaded.untrained("masked-language-model", "masked language modelling"))
    if not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= tok.vocab_size:
        raise InferenceError(f"top_k must be a whole number between 1 and {tok.vocab_size} (the vocabulary size).")
    text = nonempty(text, "Type a text with [MASK] where a word should be predicted.")
    mask_token = tok.tok.id_to_token(tok.mask_id)
    text = canonical_masks(text, mask_token, tok.meta.get("algorithm", "wordpiece"))
    ids = tok.tok.encode(text).ids
    positions = [i for i, t in enumerate(ids) if t == tok.mask_id]
    if not positions:
        also = "" if mask_token == "[MASK]" else f" (or {mask_token})"
        raise InferenceError(f"The text has no [MASK]; write [MASK]{also} where a word should be predicted.")
    loaded.check_length(len(ids))
    model, note = loaded.family.fill_mask_model(loaded.model)
    with loaded.lock, torch.inference_mode():
        # No segment ids: everything is segment 0 (and DistilBERT has no token types at all).
        out = model(torch.tensor([ids]))
        probs = torch.softmax(out.mlm_logits[0, positions].float(), dim=-1)  # (M, V)
        top = probs.topk(top_k, dim=-1)
    return [
        {"position": pos,
         "predictions": [{"token": tok.tok.id_to_token(int(i)), "id": int(i), "prob": float(p)}
                         for p, i in zip(top.values[m], top.indices[m])],
         **({"note": note} if note else {})}
        for m, pos in enumerate(positions)
    ]


def canonical_masks(text: str, mask_token: str, algorithm: str) -> str:
    """Every spelling of a mask the user may type ([MASK], [mask], <mask>) as the tokenizer's own.

    Byte-level BPE and SentencePiece tokenizers carry a word's leading space inside its token
    (Ġword, ▁word), and a mask stands for such a token; a space typed before the mask would
    become a token of its own, so it is dropped (what RoBERTa's <mask> lstrip does)."""
    spellings = sorted({"[MASK]", "<mask>", mask_token}, key=len, reverse=True)
    pattern = "|".join(re.escape(m) for m in spellings)
    if algorithm in ("bpe", "unigram"):
        return re.sub(rf"\s*(?:{pattern})", mask_token, text, flags=re.IGNORECASE)
    return re.sub(pattern, mask_token, text, flags=re.IGNORECASE)


def next_sentence(checkpoint_dir: str | Path, text_a: str, text_b: str) -> dict[str, float]:
    """How likely `text_b` follows `text_a`: {"is_next": p, "not_next": 1 - p}."""
    loaded = load(checkpoint_dir)
    require_masked_lm(loaded, "judge sentence pairs")
    pair = _pair_objective(loaded, random_next=True)
    if pair is None:
        if not loaded.info:
            raise InferenceError("This model was trained without next sentence prediction, so it cannot judge "
                                 "sentence pairs. Pick a checkpoint of a run with the NSP objective.")
        raise InferenceError(loaded.untrained("next-sentence", "next sentence prediction"))
    text_a = nonempty(text_a, "Type a first sentence (A).")
    text_b = nonempty(text_b, "Type a second sentence (B).")
    p = _pair_scores(loaded, [(text_a, text_b)], pair.pairs.head)[0]
    return {"is_next": p, "not_next": 1.0 - p}


def sentence_order(checkpoint_dir: str | Path, text_a: str, text_b: str) -> dict[str, Any]:
    """The pair in both orders, side by side: {"ab": score of A then B, "ba": score of B then A,
    "head": the pair head asked ("sop", "nsp"), "judges_order": whether that head tells order}.

    With a sentence-order head (SOP, ALBERT) the score is P(the pair is in its original order);
    a model with only an NSP head answers P(IsNext) for each order, which is how it judges
    order too ("head" says which one was asked)."""
    loaded = load(checkpoint_dir)
    pairs = _pair_head(loaded).pairs
    text_a = nonempty(text_a, "Type a first sentence (A).")
    text_b = nonempty(text_b, "Type a second sentence (B).")
    ab, ba = _pair_scores(loaded, [(text_a, text_b), (text_b, text_a)], pairs.head)
    return {"ab": ab, "ba": ba, "head": pairs.head, "judges_order": pairs.judges_order}


def require_masked_lm(loaded: Loaded, task: str) -> None:
    """Encoder questions (fill-mask, sentence pairs) refused with a sentence for the families that
    are no masked LM (T5, GPT, ELMo), naming the tools they have instead."""
    family = loaded.family
    if family.not_masked_lm:
        tools = "word similarity" if family.word_vectors else "generation"
        raise InferenceError(f"{family.not_masked_lm}, so it cannot {task}; those questions are for encoder models "
                             f"(BERT, RoBERTa, ...). Use {tools} with this checkpoint.")


def _pair_objective(loaded: Loaded, *, random_next: bool = False) -> Any:
    """The pair objective whose head to ask (an order-judging one first; `random_next`: only one
    whose B is half the time from another document), of the objectives the model learnt; for a
    model that does not say (a checkpoint copied by hand), of the registered ones whose head it
    has. None when there is none."""
    learnt = loaded.objectives
    heads = [o for o in objectives.pair_heads(learnt) if o.pairs.random_next or not random_next]
    if learnt is None:
        heads = [o for o in heads if getattr(loaded.model, f"{o.pairs.head}_head", None) is not None]
    return heads[0] if heads else None


def _pair_head(loaded: Loaded) -> Any:
    """The objective whose sentence-pair head judges order: SOP when the model learnt it, else NSP."""
    require_masked_lm(loaded, "judge sentence pairs")
    pair = _pair_objective(loaded)
    if pair is not None:
        return pair
    if loaded.info:
        raise InferenceError(loaded.untrained("sentence-pair (SOP or NSP)", "a sentence-pair objective"))
    raise InferenceError("This model was trained without a sentence-pair objective (SOP or NSP), so it cannot "
                         "judge the order of two sentences. Pick a checkpoint of a run with NSP or SOP.")


def _pair_scores(loaded: Loaded, pairs: list[tuple[str, str]], head: str) -> list[float]:
    """Probability of class 0 of the pair head `head` (IsNext / in order) for each (A, B)."""
    tok = loaded.tokenizer
    encs = [tok.tok.encode(a, b) for a, b in pairs]
    loaded.check_length(max(len(e.ids) for e in encs))
    T = max(len(e.ids) for e in encs)
    ids = torch.full((len(encs), T), tok.pad_id, dtype=torch.long)
    types = torch.zeros((len(encs), T), dtype=torch.long)
    mask = torch.zeros((len(encs), T), dtype=torch.long)
    for i, e in enumerate(encs):
        n = len(e.ids)
        ids[i, :n], types[i, :n], mask[i, :n] = torch.tensor(e.ids), torch.tensor(e.type_ids), 1
    with loaded.lock, torch.inference_mode():
        out = loaded.model(ids, attention_mask=mask, token_type_ids=types)
        logits = getattr(out, f"{head}_logits", None)
        if logits is None:  # one two-way classifier on [CLS] serves every pair head (models_lib.heads.pretraining.NSPHead)
            logits = next((getattr(out, f"{o.pairs.head}_logits") for o in objectives.pair_heads()
                           if getattr(out, f"{o.pairs.head}_logits", None) is not None), None)
        if logits is None:
            raise InferenceError("This model has no sentence-pair head.")
        probs = torch.softmax(logits.float(), dim=-1)[:, 0]  # (N,) index 0 = IsNext / in order
    return [float(p) for p in probs]
