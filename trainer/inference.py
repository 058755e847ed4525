"""Use a checkpoint: fill in [MASK]s, judge sentence pairs and their order, generate text with a
UniLM model, list a run's checkpoints.

Every encoder family answers fill-mask: BERT, RoBERTa (its tokenizer's mask is `<mask>`;
"[MASK]" is accepted too), ALBERT, SpanBERT, UniLM, DistilBERT, and ELECTRA through its
generator (the discriminator has no MLM head; each answer says so). next_sentence needs an
NSP head (BERT); sentence_order asks ALBERT's SOP head or, failing that, NSP.

A checkpoint is a trained run's (trainer_state.json says which objectives it learnt) or an
imported Hugging Face model (import_info.json lists the heads whose weights it brought); a
question for a head the model never learnt is refused with a sentence.

Models are loaded on the CPU and kept in a small per-process LRU cache keyed by the folder
and its weights file's mtime (a re-written checkpoint is reloaded). Every problem the user
can fix raises InferenceError with a sentence saying what to do.
"""
from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainer import checkpoints
from trainer.errors import InferenceError, UserError

CACHE_SIZE = 4

_cache: "OrderedDict[tuple[str, int], _Loaded]" = OrderedDict()
_lock = threading.Lock()


@dataclass
class _Loaded:
    model: nn.Module
    tokenizer: Any  # trainer.tokenization.TokenizerBundle
    state: dict     # trainer_state.json ({} for imported models)
    info: dict = field(default_factory=dict)  # import_info.json ({} for trained checkpoints)

    @property
    def max_positions(self) -> int:
        return int(self.model.config.max_positions)

    @property
    def objectives(self) -> list[str] | None:
        """What the model learnt: the run's objectives, or the heads an import had weights for
        (None when neither file says, e.g. a checkpoint copied by hand)."""
        objectives = self.state.get("config", {}).get("objectives")
        if objectives is None:
            objectives = self.info.get("objectives")
        return None if objectives is None else list(objectives)

    def lacks(self, objective: str) -> bool:
        return self.objectives is not None and objective not in self.objectives

    def untrained(self, head: str, objective: str) -> str:
        """The sentence that refuses a question for a head the model did not learn."""
        if self.info:
            return (f"This imported model has no trained {head} head (the uploaded weights did not include it), "
                    "so it cannot answer this.")
        return f"This model was trained without {objective}, so it cannot answer this."


def list_checkpoints(run_folder: str | Path) -> list[tuple[int, Path]]:
    """[(step, folder)] of a run's complete checkpoints, oldest first."""
    return checkpoints.list_checkpoints(Path(run_folder))


GENERATOR_NOTE = ("ELECTRA: these are the generator's predictions; the discriminator, the model ELECTRA keeps, "
                  "only tells original from replaced tokens.")


def fill_mask(checkpoint_dir: str | Path, text: str, top_k: int = 5) -> list[dict]:
    """Predictions for each [MASK] in `text` (or the tokenizer's own mask token, e.g. RoBERTa's <mask>):
    [{"position": token index, "predictions": [{"token", "id", "prob"}, ...top_k, most likely first]}].
    ELECTRA answers with its generator; its entries then carry "note" (GENERATOR_NOTE) saying so."""
    loaded = _load(checkpoint_dir)
    tok = loaded.tokenizer
    if loaded.lacks("mlm"):
        raise InferenceError(loaded.untrained("masked-language-model", "masked language modelling"))
    if not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= tok.vocab_size:
        raise InferenceError(f"top_k must be a whole number between 1 and {tok.vocab_size} (the vocabulary size).")
    text = _nonempty(text, "Type a text with [MASK] where a word should be predicted.")
    mask_token = tok.tok.id_to_token(tok.mask_id)
    text = _canonical_masks(text, mask_token, tok.meta.get("algorithm", "wordpiece"))
    ids = tok.tok.encode(text).ids
    positions = [i for i, t in enumerate(ids) if t == tok.mask_id]
    if not positions:
        also = "" if mask_token == "[MASK]" else f" (or {mask_token})"
        raise InferenceError(f"The text has no [MASK]; write [MASK]{also} where a word should be predicted.")
    _check_length(len(ids), loaded)
    model, note = _mlm_model(loaded.model)
    with torch.inference_mode():
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


def _canonical_masks(text: str, mask_token: str, algorithm: str) -> str:
    """Every spelling of a mask the user may type ([MASK], [mask], <mask>) as the tokenizer's own.

    Byte-level BPE and SentencePiece tokenizers carry a word's leading space inside its token
    (Ġword, ▁word), and a mask stands for such a token; a space typed before the mask would
    become a token of its own, so it is dropped (what RoBERTa's <mask> lstrip does)."""
    spellings = sorted({"[MASK]", "<mask>", mask_token}, key=len, reverse=True)
    pattern = "|".join(re.escape(m) for m in spellings)
    if algorithm in ("bpe", "unigram"):
        return re.sub(rf"\s*(?:{pattern})", mask_token, text, flags=re.IGNORECASE)
    return re.sub(pattern, mask_token, text, flags=re.IGNORECASE)


def _mlm_model(model: nn.Module) -> tuple[nn.Module, str]:
    """The module that answers fill-mask, and a note when it is not the model itself (ELECTRA)."""
    generator = getattr(model, "generator", None)
    if generator is not None and hasattr(generator, "mlm_head"):
        return generator, GENERATOR_NOTE
    return model, ""


def generate_seq2seq(checkpoint_dir: str | Path, source_text: str, max_new_tokens: int = 32) -> dict[str, Any]:
    """A UniLM checkpoint continues `source_text` as a seq2seq target (greedy, UniLM's seq2seq mask):
    {"text": the generated text, "tokens": [token strings], "ids": [ids], "stopped": "end" (it wrote
    [SEP]) | "length" (max_new_tokens or the model's positions ran out)}."""
    from models_lib.unilm import UniLMForPreTraining, generate_seq2seq as _generate

    loaded = _load(checkpoint_dir)
    if not isinstance(loaded.model, UniLMForPreTraining):
        raise InferenceError(f"Only UniLM checkpoints generate text; this one holds a {loaded.model.config.label} "
                             f"model, trained without UniLM's seq2seq attention. Pick a checkpoint of a UniLM run.")
    if loaded.lacks("unilm"):
        raise InferenceError(loaded.untrained("seq2seq", "UniLM's attention modes"))
    tok = loaded.tokenizer
    source_text = _nonempty(source_text, "Type a source text to continue.")
    ids = tok.tok.encode(source_text).ids  # [CLS] source [SEP]
    room = loaded.max_positions - len(ids)
    if room < 1:
        raise InferenceError(f"The source is {len(ids)} tokens long (with the special tokens), but this model reads at "
                             f"most {loaded.max_positions} in all, which leaves no room for a target. Shorten it.")
    if not isinstance(max_new_tokens, int) or isinstance(max_new_tokens, bool) or not 1 <= max_new_tokens:
        raise InferenceError("max_new_tokens must be a whole number of at least 1.")
    with torch.inference_mode():
        out = _generate(loaded.model, torch.tensor([ids]), max_new_tokens=min(max_new_tokens, room),
                        mask_id=tok.mask_id, eos_id=tok.sep_id, pad_id=tok.pad_id)
    new = [int(i) for i in out[0].tolist()]  # one source: no padding
    ended = tok.sep_id in new
    if ended:
        new = new[: new.index(tok.sep_id)]
    return {"text": tok.tok.decode(new, skip_special_tokens=True), "tokens": [tok.tok.id_to_token(i) for i in new],
            "ids": new, "stopped": "end" if ended else "length"}


def next_sentence(checkpoint_dir: str | Path, text_a: str, text_b: str) -> dict[str, float]:
    """How likely `text_b` follows `text_a`: {"is_next": p, "not_next": 1 - p}."""
    loaded = _load(checkpoint_dir)
    if loaded.lacks("nsp"):
        if not loaded.info:
            raise InferenceError("This model was trained without next sentence prediction, so it cannot judge "
                                 "sentence pairs. Pick a checkpoint of a run with the NSP objective.")
        raise InferenceError(loaded.untrained("next-sentence", "next sentence prediction"))
    text_a = _nonempty(text_a, "Type a first sentence (A).")
    text_b = _nonempty(text_b, "Type a second sentence (B).")
    p = _pair_scores(loaded, [(text_a, text_b)], "nsp")[0]
    return {"is_next": p, "not_next": 1.0 - p}


def sentence_order(checkpoint_dir: str | Path, text_a: str, text_b: str) -> dict[str, Any]:
    """The pair in both orders, side by side: {"ab": score of A then B, "ba": score of B then A,
    "head": "sop" | "nsp"}.

    With a sentence-order head (SOP, ALBERT) the score is P(the pair is in its original order);
    a model with only an NSP head answers P(IsNext) for each order, which is how it judges
    order too ("head" says which one was asked)."""
    loaded = _load(checkpoint_dir)
    head = _pair_head(loaded)
    text_a = _nonempty(text_a, "Type a first sentence (A).")
    text_b = _nonempty(text_b, "Type a second sentence (B).")
    ab, ba = _pair_scores(loaded, [(text_a, text_b), (text_b, text_a)], head)
    return {"ab": ab, "ba": ba, "head": head}


def _pair_head(loaded: _Loaded) -> str:
    """The sentence-pair head to ask: SOP when the model learnt it, else NSP."""
    objectives = loaded.objectives
    if objectives is None:
        return "sop" if hasattr(loaded.model, "sop_head") else "nsp"
    for head in ("sop", "nsp"):
        if head in objectives:
            return head
    if loaded.info:
        raise InferenceError(loaded.untrained("sentence-pair (SOP or NSP)", "a sentence-pair objective"))
    raise InferenceError("This model was trained without a sentence-pair objective (SOP or NSP), so it cannot "
                         "judge the order of two sentences. Pick a checkpoint of a run with NSP or SOP.")


def _pair_scores(loaded: _Loaded, pairs: list[tuple[str, str]], head: str) -> list[float]:
    """Probability of class 0 of the pair head (IsNext / in order) for each (A, B)."""
    tok = loaded.tokenizer
    encs = [tok.tok.encode(a, b) for a, b in pairs]
    _check_length(max(len(e.ids) for e in encs), loaded)
    T = max(len(e.ids) for e in encs)
    ids = torch.full((len(encs), T), tok.pad_id, dtype=torch.long)
    types = torch.zeros((len(encs), T), dtype=torch.long)
    mask = torch.zeros((len(encs), T), dtype=torch.long)
    for i, e in enumerate(encs):
        n = len(e.ids)
        ids[i, :n], types[i, :n], mask[i, :n] = torch.tensor(e.ids), torch.tensor(e.type_ids), 1
    with torch.inference_mode():
        out = loaded.model(ids, attention_mask=mask, token_type_ids=types)
        logits = getattr(out, f"{head}_logits", None)
        if logits is None:  # one two-way classifier on [CLS] serves NSP and SOP (models_lib.heads.NSPHead)
            logits = out.nsp_logits
        if logits is None:
            raise InferenceError("This model has no sentence-pair head.")
        probs = torch.softmax(logits.float(), dim=-1)[:, 0]  # (N,) index 0 = IsNext / in order
    return [float(p) for p in probs]


def clear_cache() -> None:
    with _lock:
        _cache.clear()


# ---------------------------------------------------------------------------- loading
def _load(checkpoint_dir: str | Path) -> _Loaded:
    folder = Path(checkpoint_dir)
    if not folder.is_dir():
        raise InferenceError(f"The checkpoint {folder.name} does not exist (any more).")
    missing = [n for n in checkpoints.MODEL_FILES + checkpoints.TOKENIZER_FILES if not (folder / n).is_file()]
    if missing:
        raise InferenceError(f"The checkpoint {folder.name} is incomplete: {', '.join(missing)} "
                             f"{'is' if len(missing) == 1 else 'are'} missing.")
    key = (str(folder.resolve()), (folder / "model.safetensors").stat().st_mtime_ns)
    with _lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    loaded = _read(folder)
    with _lock:
        _cache[key] = loaded
        _cache.move_to_end(key)
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    return loaded


def _read(folder: Path) -> _Loaded:
    from models_lib.checkpoint import load_model
    from trainer.tokenization import load_tokenizer

    try:
        model = load_model(folder, map_location="cpu").eval()
    except ValueError as e:
        raise InferenceError(f"The checkpoint {folder.name} cannot be loaded: {e}") from None
    if not hasattr(_mlm_model(model)[0], "mlm_head"):
        raise InferenceError(f"The checkpoint {folder.name} holds a model without a language-model head.")
    try:
        tokenizer = load_tokenizer(folder)
    except UserError as e:
        raise InferenceError(f"The checkpoint {folder.name} has an unusable tokenizer: {e}") from None
    state_path = folder / checkpoints.STATE_NAME
    state = json.loads(state_path.read_text(encoding="utf-8")) if state_path.is_file() else {}
    from trainer.importing import read_import_info

    return _Loaded(model, tokenizer, state, read_import_info(folder))


def _check_length(n_tokens: int, loaded: _Loaded) -> None:
    if n_tokens > loaded.max_positions:
        raise InferenceError(f"The text is {n_tokens} tokens long (with the special tokens), but this model "
                             f"reads at most {loaded.max_positions}. Shorten it.")


def _nonempty(text: Any, message: str) -> str:
    if not isinstance(text, str) or not text.strip():
        raise InferenceError(message)
    return text.strip()
