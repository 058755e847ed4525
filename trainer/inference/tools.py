"""Use a checkpoint: fill in [MASK]s, judge sentence pairs and their order, generate text (T5,
GPT, UniLM; all at once or streamed token by token), fill T5's sentinel spans, show attention
weights, compare a word's ELMo vectors in two sentences, list a run's checkpoints.

Every encoder family answers fill-mask: BERT, RoBERTa (its tokenizer's mask is `<mask>`;
"[MASK]" is accepted too), ALBERT, SpanBERT, UniLM, DistilBERT, and ELECTRA through its
generator (the discriminator has no MLM head; each answer says so). next_sentence needs an
NSP head (BERT); sentence_order asks ALBERT's SOP head or, failing that, NSP.

Generation (`generate`, `fill_spans`, `stream_generate`) takes the decoding fields that
`decoding_options` checks: strategy "greedy" | "beam" | "sample", max_new_tokens, num_beams,
temperature, top_k, top_p and seed. Inputs are laid out as the run's collators laid them out in
training: T5 reads "text EOS" (trainer.objectives.denoising), GPT and ELMo read plain text (documents are
only separated by EOS in trainer.objectives.lm), UniLM "[CLS] source [SEP]". EOS is the
tokenizer's separator ([SEP], or </s> for byte-level BPE); T5's decoder starts from the pad id.

A checkpoint is a trained run's (trainer_state.json says which objectives it learnt) or an
imported Hugging Face model (import_info.json lists the heads whose weights it brought); a
question for a head the model never learnt is refused with a sentence.

Models are loaded on the CPU and kept in a small per-process LRU cache keyed by the folder
and its weights file's mtime (a re-written checkpoint is reloaded). Every problem the user
can fix raises InferenceError with a sentence saying what to do.
"""
from __future__ import annotations

import json
import math
import random
import re
import threading
from collections import OrderedDict
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainer.training import checkpoints
from trainer.errors import InferenceError, UserError

CACHE_SIZE = 4
MAX_INPUT_TOKENS = 1024      # T5 and ELMo inputs (models with learned positions stop at their own maximum)
MAX_NEW_TOKENS = 256
MAX_BEAMS = 8
STRATEGIES = ("greedy", "beam", "sample")
ATTENTION_MAX_TOKENS = 128   # per side of an attention map: 128 x 128 weights per head
ATTENTION_MAX_WEIGHTS = 2_000_000  # all layers at once beyond this: ask for one layer
ATTENTION_DECIMALS = 4
ATTENTION_TARGET_TOKENS = 32  # T5 without a target: the greedy output, at most this long
GENERATIVE = ("t5", "gpt", "unilm")
NOT_MASKED_LM = {"t5": "T5 is an encoder-decoder that writes text", "gpt": "GPT predicts the next token",
                 "elmo": "ELMo is a pair of left-to-right and right-to-left LSTM language models"}
SENTINEL = re.compile(r"<extra_id_(\d+)>")

_cache: "OrderedDict[tuple[str, int], _Loaded]" = OrderedDict()
_lock = threading.Lock()


@dataclass
class _Loaded:
    model: nn.Module
    tokenizer: Any  # trainer.prep.tokenization.TokenizerBundle
    state: dict     # trainer_state.json ({} for imported models)
    info: dict = field(default_factory=dict)  # import_info.json ({} for trained checkpoints)
    # One request at a time runs this model: recording attention switches its modules' state,
    # and hooks see every call of the module, whichever thread makes it.
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def max_positions(self) -> int:
        return int(getattr(self.model.config, "max_positions", 512))

    @property
    def family(self) -> str:
        """models_lib's family name: "bert", "roberta", ..., "t5", "gpt", "elmo"."""
        return str(getattr(self.model.config, "family", ""))

    @property
    def input_limit(self) -> int:
        """The most tokens the explorer feeds: the model's positions, but T5's relative positions
        (and ELMo's LSTMs) set no limit of their own, so MAX_INPUT_TOKENS then."""
        return min(self.max_positions, MAX_INPUT_TOKENS)

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
    _require_encoder(loaded, "fill in [MASK]s")
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
    [SEP]) | "length" (max_new_tokens or the model's positions ran out)}. `generate` with the
    greedy strategy; T5 and GPT checkpoints answer too."""
    loaded = _load(checkpoint_dir)
    if loaded.family not in GENERATIVE:
        raise InferenceError(f"Only UniLM checkpoints generate text; this one holds a {loaded.model.config.label} "
                             f"model, trained without UniLM's seq2seq attention. Pick a checkpoint of a UniLM run.")
    source_text = _nonempty(source_text, "Type a source text to continue.")
    if not isinstance(max_new_tokens, int) or isinstance(max_new_tokens, bool) or not 1 <= max_new_tokens:
        raise InferenceError("max_new_tokens must be a whole number of at least 1.")
    out = generate(checkpoint_dir, source_text, strategy="greedy", max_new_tokens=min(max_new_tokens, MAX_NEW_TOKENS))
    return {k: out[k] for k in ("text", "tokens", "ids", "stopped")}


def next_sentence(checkpoint_dir: str | Path, text_a: str, text_b: str) -> dict[str, float]:
    """How likely `text_b` follows `text_a`: {"is_next": p, "not_next": 1 - p}."""
    loaded = _load(checkpoint_dir)
    _require_encoder(loaded, "judge sentence pairs")
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
    _require_encoder(loaded, "judge sentence pairs")
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
    with loaded.lock, torch.inference_mode():
        out = loaded.model(ids, attention_mask=mask, token_type_ids=types)
        logits = getattr(out, f"{head}_logits", None)
        if logits is None:  # one two-way classifier on [CLS] serves NSP and SOP (models_lib.heads.pretraining.NSPHead)
            logits = out.nsp_logits
        if logits is None:
            raise InferenceError("This model has no sentence-pair head.")
        probs = torch.softmax(logits.float(), dim=-1)[:, 0]  # (N,) index 0 = IsNext / in order
    return [float(p) for p in probs]


# ---------------------------------------------------------------------------- generation
@dataclass(frozen=True)
class Decoding:
    """Checked decoding fields (see decoding_options)."""

    strategy: str = "greedy"
    max_new_tokens: int = 32
    num_beams: int = 4
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None

    @property
    def sampling(self) -> bool:
        return self.strategy == "sample"

    def model_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of models_lib's generate (max_new_tokens and the ids apart)."""
        if self.strategy == "beam":
            return {"num_beams": self.num_beams}
        if self.strategy == "sample":
            return {"do_sample": True, "temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p}
        return {}

    def as_dict(self) -> dict[str, Any]:
        """What was used, for the answer: only the fields the strategy reads."""
        out: dict[str, Any] = {"strategy": self.strategy, "max_new_tokens": self.max_new_tokens}
        if self.strategy == "beam":
            out["num_beams"] = self.num_beams
        if self.strategy == "sample":
            out.update(temperature=self.temperature, top_k=self.top_k, top_p=self.top_p, seed=self.seed)
        return out


DECODING_FIELDS = ("strategy", "max_new_tokens", "num_beams", "temperature", "top_k", "top_p", "seed")


def decoding_options(**fields: Any) -> Decoding:
    """Check the decoding fields a request may carry (None = the default); raises InferenceError
    with a sentence for each mistake. A sampling request without a seed gets a random one, so
    that the answer says how to draw the same text again."""
    unknown = sorted(set(fields) - set(DECODING_FIELDS))
    if unknown:
        raise InferenceError(f"Unknown decoding field(s): {', '.join(unknown)}. "
                             f"Known: {', '.join(DECODING_FIELDS)}.")
    given = {k: v for k, v in fields.items() if v is not None}
    strategy = given.get("strategy", "greedy")
    if strategy not in STRATEGIES:
        raise InferenceError(f"strategy must be greedy, beam or sample, not {strategy!r}.")
    max_new = _whole(given.get("max_new_tokens", 32), "max_new_tokens", 1, MAX_NEW_TOKENS)
    beams = _whole(given.get("num_beams", 4), "num_beams", 1, MAX_BEAMS)
    top_k = _whole(given.get("top_k", 0), "top_k", 0, None)
    temperature = _number(given.get("temperature", 1.0), "temperature")
    if not temperature > 0:
        raise InferenceError(f"temperature must be greater than 0 (1 samples from the model's own distribution; "
                             f"smaller is more conservative), not {temperature:g}.")
    top_p = _number(given.get("top_p", 1.0), "top_p")
    if not 0 < top_p <= 1:
        raise InferenceError(f"top_p must be greater than 0 and at most 1 (1 keeps every token), not {top_p:g}.")
    seed = given.get("seed")
    if seed is not None:
        seed = _whole(seed, "seed", 0, 2**63 - 1)
    elif strategy == "sample":
        seed = random.SystemRandom().randrange(2**31)
    return Decoding(strategy, max_new, beams, temperature, top_k, top_p, seed)


def _whole(value: Any, name: str, low: int, high: int | None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise InferenceError(f"{name} must be a whole number, not {value!r}.")
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise InferenceError(f"{name} must be {bound}, not {value}.")
    return value


def _number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InferenceError(f"{name} must be a number, not {value!r}.")
    return float(value)


@dataclass
class _Prompt:
    """A generation request made ready: the model's input and how to read its output."""

    loaded: _Loaded
    input_ids: list[int]    # what start_generation reads
    skip: int               # leading ids of the output that are not generated (T5's start token, the prompt)
    max_new_tokens: int     # the request's, cut to the room the model's positions leave
    context: list[int]      # ids decoded before the new ones so that spacing comes out right (GPT's prompt)


def _prepare(loaded: _Loaded, prompt: Any, opts: Decoding, *, what: str = "a prompt") -> _Prompt:
    tok = loaded.tokenizer
    family = loaded.family
    if family not in GENERATIVE:
        label = getattr(loaded.model.config, "label", family)
        raise InferenceError(f"A {label} model does not generate text. Pick a checkpoint of a T5, GPT or UniLM run "
                             "(or an imported T5 or GPT-2 model).")
    text = _nonempty(prompt, f"Type {what}.")
    if family == "t5":  # "text EOS", as trainer.objectives.denoising lays out encoder inputs
        ids = tok.tok.encode(text, add_special_tokens=False).ids + [tok.sep_id]
        _check_input(len(ids), loaded)
        return _Prompt(loaded, ids, 1, opts.max_new_tokens, [])
    if family == "gpt":  # plain text: documents are only separated by EOS in training
        ids = tok.tok.encode(text, add_special_tokens=False).ids
        room = loaded.max_positions - len(ids)
        if room < 1:
            raise InferenceError(f"The prompt is {len(ids)} tokens long, but this model reads at most "
                                 f"{loaded.max_positions} in all, which leaves no room to generate. Shorten it.")
        return _Prompt(loaded, ids, len(ids), min(opts.max_new_tokens, room), ids)
    if loaded.lacks("unilm"):
        raise InferenceError(loaded.untrained("seq2seq", "UniLM's attention modes"))
    ids = tok.tok.encode(text).ids  # [CLS] source [SEP]
    room = loaded.max_positions - len(ids)
    if room < 1:
        raise InferenceError(f"The source is {len(ids)} tokens long (with the special tokens), but this model reads at "
                             f"most {loaded.max_positions} in all, which leaves no room for a target. Shorten it.")
    return _Prompt(loaded, ids, len(ids), min(opts.max_new_tokens, room), [])  # the source comes first


def _check_input(n_tokens: int, loaded: _Loaded) -> None:
    if n_tokens > loaded.input_limit:
        raise InferenceError(f"The text is {n_tokens} tokens long, but the explorer feeds this model at most "
                             f"{loaded.input_limit}. Shorten it.")


def _run_generate(p: _Prompt, opts: Decoding) -> tuple[list[int], bool]:
    """(generated ids without EOS, whether the model ended with EOS)."""
    loaded, tok = p.loaded, p.loaded.tokenizer
    generator = torch.Generator().manual_seed(opts.seed) if opts.sampling else None
    with loaded.lock, torch.inference_mode():
        out = loaded.model.generate(torch.tensor([p.input_ids]), max_new_tokens=p.max_new_tokens,
                                    eos_token_id=tok.sep_id, pad_token_id=tok.pad_id, generator=generator,
                                    **_mask_token(loaded), **opts.model_kwargs())
    new = [int(i) for i in out[0, p.skip:].tolist()]
    ended = tok.sep_id in new
    return (new[: new.index(tok.sep_id)] if ended else new), ended


def _mask_token(loaded: _Loaded) -> dict[str, int]:
    """UniLM writes each next token at a [MASK] it appends: its generate needs that id."""
    return {"mask_token_id": loaded.tokenizer.mask_id} if loaded.family == "unilm" else {}


def _continuation(tok: Any, context: list[int], new: list[int]) -> str:
    """The text the new ids add after `context`: decoded together, so that word boundaries (a
    WordPiece "##", a byte-level "Ġ") come out as the tokenizer means them."""
    if not context:
        return tok.tok.decode(new, skip_special_tokens=True)
    before = tok.tok.decode(context, skip_special_tokens=True)
    whole = tok.tok.decode(context + new, skip_special_tokens=True)
    if whole.startswith(before):
        return whole[len(before):]
    return " " + tok.tok.decode(new, skip_special_tokens=True)


def _answer(p: _Prompt, opts: Decoding, new: list[int], ended: bool) -> dict[str, Any]:
    tok = p.loaded.tokenizer
    return {"family": p.loaded.family, "text": _continuation(tok, p.context, new),
            "tokens": [tok.tok.id_to_token(i) for i in new], "ids": new,
            "stopped": "end" if ended else "length", "prompt_tokens": len(p.input_ids),
            "decoding": opts.as_dict()}


def generate(checkpoint_dir: str | Path, prompt: str, **decoding: Any) -> dict[str, Any]:
    """A T5, GPT or UniLM checkpoint writes text for `prompt`: T5 its output (text-to-text, e.g.
    "summarize: ..."), GPT the continuation, UniLM a seq2seq target. `decoding`: see
    decoding_options. -> {"family", "text" (GPT: what follows the prompt, leading space
    included), "tokens", "ids", "stopped": "end" (the model wrote EOS) | "length"
    (max_new_tokens or the model's positions ran out), "prompt_tokens", "decoding" (the fields
    used; a sample's seed draws the same text again)}."""
    loaded = _load(checkpoint_dir)
    opts = decoding_options(**decoding)
    p = _prepare(loaded, prompt, opts)
    new, ended = _run_generate(p, opts)
    return _answer(p, opts, new, ended)


def fill_spans(checkpoint_dir: str | Path, text: str, **decoding: Any) -> dict[str, Any]:
    """T5 span filling: `text` has sentinels <extra_id_0>, <extra_id_1>, ... where spans are
    missing; the model writes "<extra_id_0> span <extra_id_1> span ..." (span corruption's
    target) and each sentinel gets its span. -> {"spans": [{"sentinel", "index", "text",
    "tokens", "found" (False when the output had no such sentinel)}], "filled" (the text with
    each sentinel replaced by its span), "output" (the raw output, sentinels kept), "stopped",
    "decoding"}."""
    loaded = _load(checkpoint_dir)
    if loaded.family != "t5":
        label = getattr(loaded.model.config, "label", loaded.family)
        raise InferenceError(f"Span filling needs a T5 checkpoint (trained with span corruption); this one holds a "
                             f"{label} model.")
    tok = loaded.tokenizer
    sentinels = list(getattr(tok, "sentinel_ids", None) or [])
    if not sentinels:
        raise InferenceError("This checkpoint's tokenizer has no sentinel tokens (<extra_id_0>, <extra_id_1>, ...), "
                             "so it cannot fill spans. Train the T5 run on a tokenizer with sentinel tokens.")
    text = _nonempty(text, "Type a text with <extra_id_0> where a span is missing.")
    typed = sorted({int(n) for n in SENTINEL.findall(text)})
    if not typed:
        raise InferenceError("The text has no sentinel: write <extra_id_0> where a span is missing "
                             "(and <extra_id_1>, <extra_id_2>, ... for more spans).")
    if typed[-1] >= len(sentinels):
        raise InferenceError(f"This tokenizer has {len(sentinels)} sentinel tokens, <extra_id_0> to "
                             f"<extra_id_{len(sentinels) - 1}>; <extra_id_{typed[-1]}> is not one of them.")
    opts = decoding_options(**decoding)
    p = _prepare(loaded, text, opts, what="a text with <extra_id_0> where a span is missing")
    index_of = {sid: i for i, sid in enumerate(sentinels)}
    asked = [index_of[i] for i in p.input_ids if i in index_of]
    new, ended = _run_generate(p, opts)
    spans: dict[int, list[int]] = {}
    current = None
    for i in new:
        if i in index_of:
            current = index_of[i]
            spans.setdefault(current, [])
        elif current is not None:
            spans[current].append(i)
    found = []
    for n in dict.fromkeys(asked):  # in the order the text has them, each once
        ids = spans.get(n, [])
        found.append({"sentinel": f"<extra_id_{n}>", "index": n, "found": n in spans,
                      "text": tok.tok.decode(ids, skip_special_tokens=True).strip(),
                      "tokens": [tok.tok.id_to_token(i) for i in ids]})
    by_index = {s["index"]: s["text"] for s in found if s["found"]}  # a span never written keeps its sentinel
    filled = SENTINEL.sub(lambda m: by_index.get(int(m.group(1)), m.group(0)), text)
    sentinel_set = set(sentinels)
    output = tok.tok.decode([i for i in new if i not in tok.special_ids or i in sentinel_set],
                            skip_special_tokens=False)
    return {"spans": found, "filled": filled, "output": output, "stopped": "end" if ended else "length",
            "decoding": opts.as_dict()}


def stream_generate(checkpoint_dir: str | Path, prompt: str,
                    **decoding: Any) -> Generator[str, None, dict[str, Any]]:
    """`generate`, token by token: a generator of text pieces as the model produces them; its
    return value (StopIteration.value) is what `generate` answers ("text" there is the final
    text; the pieces joined usually equal it, but a tokenizer may re-space earlier text once
    later tokens arrive, so a page should show "text" at the end).

    The request is checked and the model loaded now (InferenceError here, not at the first
    next()). Greedy and sampling steps run one at a time through the model's incremental
    decoding (start_generation / generation_step); beam search only knows its best sequence at
    the end, so it yields the whole text once. Each step holds the model's lock and grad mode
    only while it runs, so the generator may be advanced from any thread."""
    loaded = _load(checkpoint_dir)
    opts = decoding_options(**decoding)
    p = _prepare(loaded, prompt, opts)
    if opts.strategy == "beam":
        return _all_at_once(p, opts)
    return _step_by_step(p, opts)


def _all_at_once(p: _Prompt, opts: Decoding) -> Generator[str, None, dict[str, Any]]:
    new, ended = _run_generate(p, opts)
    answer = _answer(p, opts, new, ended)
    if answer["text"]:
        yield answer["text"]
    return answer


def _step_by_step(p: _Prompt, opts: Decoding) -> Generator[str, None, dict[str, Any]]:
    from models_lib.core.generation import filter_logits

    loaded, tok = p.loaded, p.loaded.tokenizer
    model = loaded.model
    generator = torch.Generator().manual_seed(opts.seed) if opts.sampling else None
    with loaded.lock, torch.inference_mode():
        state, feed = model.start_generation(torch.tensor([p.input_ids]), None, **_mask_token(loaded))
    new: list[int] = []
    shown = ""
    ended = False
    for _ in range(p.max_new_tokens):
        with loaded.lock, torch.inference_mode():  # never held across a yield
            logits, state = model.generation_step(state, feed)  # (1, V)
            if opts.sampling:  # as models_lib.core.generation samples: the same seed draws the same tokens
                probs = filter_logits(logits.float(), temperature=opts.temperature, top_k=opts.top_k,
                                      top_p=opts.top_p).softmax(-1)
                nxt = torch.multinomial(probs, 1, generator=generator).squeeze(1)
            else:
                nxt = logits.argmax(-1)  # (1,)
        token = int(nxt[0])
        if token == tok.sep_id:
            ended = True
            break
        new.append(token)
        text = _continuation(tok, p.context, new)
        # A piece is sent once the text so far extends what was shown and ends in whole
        # characters (a byte-level token may hold half of a UTF-8 character).
        if text.startswith(shown) and not text.endswith("\ufffd") and len(text) > len(shown):
            piece, shown = text[len(shown):], text
            yield piece
        feed = nxt[:, None]  # (1, 1)
    answer = _answer(p, opts, new, ended)
    if answer["text"].startswith(shown) and len(answer["text"]) > len(shown):
        yield answer["text"][len(shown):]
    return answer


# ---------------------------------------------------------------------------- attention
STACK_LABELS = {"encoder": "Encoder self-attention", "decoder": "Decoder self-attention (causal)",
                "cross": "Decoder cross-attention (decoder tokens attend to the encoder's)"}


def attention_stacks(family: str) -> list[str]:
    """Which attention maps a family has: "encoder", "decoder" (causal self-attention), "cross"."""
    if family == "t5":
        return ["encoder", "decoder", "cross"]
    if family == "gpt":
        return ["decoder"]
    if family == "elmo":
        return []
    return ["encoder"]


def attention_maps(checkpoint_dir: str | Path, text: str, *, target: str | None = None, stack: str | None = None,
                   layer: int | None = None) -> dict[str, Any]:
    """The softmax attention weights of every layer and head for `text`: {"family", "stack",
    "stacks" (what this family offers), "tokens" (queries, rows), "key_tokens" (columns),
    "layers", "heads", "layer" (the one asked for, or None for all), "maps": [layer][head] =
    rows x columns of weights (rounded to 4 decimals; each row sums to 1), "target"}.

    Encoders show their self-attention, GPT its causal self-attention; T5 has three stacks:
    the encoder's, the decoder's (causal) and the decoder's cross-attention over the encoder's
    tokens. T5's decoder side reads a target: `target` or, without one, the model's own greedy
    output. At most ATTENTION_MAX_TOKENS tokens a side. ELMo has no attention (a sentence)."""
    loaded = _load(checkpoint_dir)
    tok, family = loaded.tokenizer, loaded.family
    stacks = attention_stacks(family)
    if not stacks:
        raise InferenceError("ELMo is a pair of LSTM language models: it has no attention to show. Its word vectors "
                             "can be compared with the word-similarity tool instead.")
    stack = stack or stacks[0]
    if stack not in stacks:
        raise InferenceError(f"A {family.upper() if family == 't5' else family} model has no {stack!r} attention; "
                             f"choose {' or '.join(stacks)}.")
    text = _nonempty(text, "Type a text to see its attention.")
    if family == "t5":
        ids = tok.tok.encode(text, add_special_tokens=False).ids + [tok.sep_id]
    elif family == "gpt":
        ids = tok.tok.encode(text, add_special_tokens=False).ids
    else:
        ids = tok.tok.encode(text).ids  # [CLS] text [SEP], as the encoders were trained
    _check_attention_length(len(ids), "text")
    _check_length(len(ids), loaded)
    decoder_ids: list[int] = []
    if family == "t5" and stack != "encoder":
        if target is not None and str(target).strip():
            target_ids = tok.tok.encode(str(target).strip(), add_special_tokens=False).ids
        else:
            greedy = Decoding(max_new_tokens=ATTENTION_TARGET_TOKENS)
            target_ids, _ = _run_generate(_Prompt(loaded, ids, 1, ATTENTION_TARGET_TOKENS, []), greedy)
            target = tok.tok.decode(target_ids, skip_special_tokens=True)
        decoder_ids = [int(loaded.model.config.decoder_start_token_id)] + target_ids
        _check_attention_length(len(decoder_ids), "target")
    calls = _record_attention(loaded, ids, decoder_ids)
    maps = [w for s, w in calls if s == stack]  # one (N, T, S) per layer, in layer order
    if not maps:
        raise InferenceError("This model recorded no attention weights for that stack.")
    n_layers, n_heads = len(maps), int(maps[0].shape[0])
    if layer is not None:
        layer = _whole(layer, "layer", 0, n_layers - 1)
        chosen = [maps[layer]]
    else:
        total = sum(int(m.numel()) for m in maps)
        if total > ATTENTION_MAX_WEIGHTS:
            raise InferenceError(f"That is {total:,} attention weights; ask for one layer at a time "
                                 f"(layer 0 to {n_layers - 1}).")
        chosen = maps
    query_ids = decoder_ids if stack in ("decoder", "cross") and family == "t5" else ids
    key_ids = decoder_ids if stack == "decoder" and family == "t5" else ids
    return {
        "family": family, "stack": stack, "stacks": stacks, "layers": n_layers, "heads": n_heads, "layer": layer,
        "tokens": [_shown_token(tok, i) for i in query_ids],
        "key_tokens": [_shown_token(tok, i) for i in key_ids],
        "maps": [_rounded(m) for m in chosen],
        "target": target if family == "t5" and stack != "encoder" else None,
    }


def _check_attention_length(n: int, what: str) -> None:
    if n > ATTENTION_MAX_TOKENS:
        raise InferenceError(f"The {what} is {n} tokens long; the attention viewer shows at most "
                             f"{ATTENTION_MAX_TOKENS} tokens. Shorten it.")


def _record_attention(loaded: _Loaded, ids: list[int], decoder_ids: list[int]) -> list[tuple[str, torch.Tensor]]:
    """[(stack, weights (N, T, S))] of every attention call of one forward pass, in call order.

    Forward hooks collect each call (not each module), so a module that serves several layers
    (ALBERT's shared layers) gives one map per layer."""
    from models_lib.core.layers import recording_attention

    model, family = loaded.model, loaded.family
    calls: list[tuple[str, torch.Tensor]] = []

    def stack_of(name: str, module: nn.Module) -> str:
        if family == "gpt":
            return "decoder"
        if family == "t5":
            return "cross" if getattr(module, "cross", False) else "decoder" if name.startswith("decoder.") else "encoder"
        return "encoder"

    with loaded.lock, torch.inference_mode(), recording_attention(model) as modules:
        hooks = [m.register_forward_hook(lambda mod, args, out, name=name: calls.append(
                     (stack_of(name, mod), mod.weights[0].float())))
                 for name, m in modules]
        try:
            x = torch.tensor([ids])
            if family == "t5":
                state, start = model.start_generation(x, None)
                if decoder_ids:
                    model.generation_step(state, torch.tensor([decoder_ids]))
            elif family == "gpt":
                state, feed = model.start_generation(x, None)
                model.generation_step(state, feed)
            else:
                model.encode(x)
        finally:
            for h in hooks:
                h.remove()
    return calls


def _rounded(weights: torch.Tensor) -> list:
    """(N, T, S) -> nested lists of floats with ATTENTION_DECIMALS decimals (short JSON)."""
    scale = 10.0 ** ATTENTION_DECIMALS
    return (torch.round(weights.double() * scale) / scale).tolist()


# ---------------------------------------------------------------------------- ELMo word vectors
def word_similarity(checkpoint_dir: str | Path, sentence_a: str, sentence_b: str, word: str) -> dict[str, Any]:
    """How alike an ELMo checkpoint's vectors of `word` are in two sentences, layer by layer
    (the seeds' 苹果: fruit in one sentence, phone maker in the other). The word's tokens in
    each sentence (its first occurrence, matched without regard to case) are averaged per
    layer. -> {"word", "layers": [{"layer", "name", "cosine"}] (layer 0 is the token
    representation, the same in every context; then each biLSTM layer), "tokens_a",
    "tokens_b", "positions_a", "positions_b" (the word's token positions)}."""
    loaded = _load(checkpoint_dir)
    if loaded.family != "elmo":
        label = getattr(loaded.model.config, "label", loaded.family)
        raise InferenceError(f"Word similarity across contexts needs an ELMo checkpoint; this one holds a {label} model.")
    sentence_a = _nonempty(sentence_a, "Type a first sentence (A).")
    sentence_b = _nonempty(sentence_b, "Type a second sentence (B).")
    word = _nonempty(word, "Type the word to compare (it must appear in both sentences).")
    tok = loaded.tokenizer
    sides = []
    for name, sentence in (("A", sentence_a), ("B", sentence_b)):
        match = re.search(re.escape(word), sentence, flags=re.IGNORECASE)
        if match is None:
            raise InferenceError(f"“{word}” is not in sentence {name}. Type a word that appears in both sentences.")
        enc = tok.tok.encode(sentence, add_special_tokens=False)
        _check_input(len(enc.ids), loaded)
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


def _require_encoder(loaded: _Loaded, task: str) -> None:
    """Encoder questions (fill-mask, sentence pairs) refused with a sentence for T5, GPT and ELMo."""
    why = NOT_MASKED_LM.get(loaded.family)
    if why:
        tools = "word similarity" if loaded.family == "elmo" else "generation"
        raise InferenceError(f"{why}, so it cannot {task}; those questions are for encoder models "
                             f"(BERT, RoBERTa, ...). Use {tools} with this checkpoint.")


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
    from trainer.prep.tokenization import load_tokenizer

    try:
        model = load_model(folder, map_location="cpu").eval()
    except ValueError as e:
        raise InferenceError(f"The checkpoint {folder.name} cannot be loaded: {e}") from None
    family = getattr(model.config, "family", "")
    if family not in NOT_MASKED_LM and not hasattr(_mlm_model(model)[0], "mlm_head"):
        raise InferenceError(f"The checkpoint {folder.name} holds a model without a language-model head.")
    try:
        tokenizer = load_tokenizer(folder)
    except UserError as e:
        raise InferenceError(f"The checkpoint {folder.name} has an unusable tokenizer: {e}") from None
    state_path = folder / checkpoints.STATE_NAME
    state = json.loads(state_path.read_text(encoding="utf-8")) if state_path.is_file() else {}
    from trainer.inference.importing import read_import_info

    return _Loaded(model, tokenizer, state, read_import_info(folder))


def _check_length(n_tokens: int, loaded: _Loaded) -> None:
    if n_tokens > loaded.max_positions:
        raise InferenceError(f"The text is {n_tokens} tokens long (with the special tokens), but this model "
                             f"reads at most {loaded.max_positions}. Shorten it.")


def _nonempty(text: Any, message: str) -> str:
    if not isinstance(text, str) or not text.strip():
        raise InferenceError(message)
    return text.strip()


# Byte-level BPE spells a space as "Ġ" and a newline as "Ċ" inside its tokens; on a chart's axis
# the SentencePiece-style "▁" and "↵" read better.
_BYTE_LEVEL_MARKS = str.maketrans({"Ġ": "▁", "Ċ": "↵"})


def _shown_token(bundle: Any, token_id: int) -> str:
    """A token's vocabulary string as the attention viewer labels it."""
    text = bundle.tok.id_to_token(int(token_id)) or ""
    return text.translate(_BYTE_LEVEL_MARKS) if bundle.meta.get("algorithm") == "bpe" else text
