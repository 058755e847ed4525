"""Generate text with a checkpoint whose Family `generates` (T5, GPT, UniLM): all at once or
streamed token by token; fill T5's sentinel spans; UniLM's seq2seq answer.

Generation (`generate`, `fill_spans`, `stream_generate`) takes the decoding fields that
`decoding_options` checks: strategy "greedy" | "beam" | "sample", max_new_tokens, num_beams,
temperature, top_k, top_p and seed. The Family lays the input out as its run's collators laid
it out in training (Family.generation_prompt: T5 reads "text EOS", GPT plain text, UniLM
"[CLS] source [SEP]") and says what its model's generate needs besides (generate_kwargs:
UniLM's mask id). EOS is the tokenizer's separator ([SEP], or </s> for byte-level BPE); T5's
decoder starts from the pad id.

Chat (`chat=True`, GPT checkpoints of an SFT run): the prompt is one user turn in the chat template
the run was fine-tuned with (its trainer_state.json's config), laid out exactly as SFT's collator
lays out a prompt (trainer.finetune.sft.SFTCollator.prompt_ids), and the model writes the
assistant's reply until its end-of-text.
"""
from __future__ import annotations

import math
import random
import re
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trainer.errors import InferenceError
from trainer.families import GenerationPrompt
from trainer.inference.loading import Loaded, load, nonempty

MAX_NEW_TOKENS = 256
MAX_BEAMS = 8
STRATEGIES = ("greedy", "beam", "sample")
SENTINEL = re.compile(r"<extra_id_(\d+)>")


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
    max_new = whole(given.get("max_new_tokens", 32), "max_new_tokens", 1, MAX_NEW_TOKENS)
    beams = whole(given.get("num_beams", 4), "num_beams", 1, MAX_BEAMS)
    top_k = whole(given.get("top_k", 0), "top_k", 0, None)
    temperature = _number(given.get("temperature", 1.0), "temperature")
    if not temperature > 0:
        raise InferenceError(f"temperature must be greater than 0 (1 samples from the model's own distribution; "
                             f"smaller is more conservative), not {temperature:g}.")
    top_p = _number(given.get("top_p", 1.0), "top_p")
    if not 0 < top_p <= 1:
        raise InferenceError(f"top_p must be greater than 0 and at most 1 (1 keeps every token), not {top_p:g}.")
    seed = given.get("seed")
    if seed is not None:
        seed = whole(seed, "seed", 0, 2**63 - 1)
    elif strategy == "sample":
        seed = random.SystemRandom().randrange(2**31)
    return Decoding(strategy, max_new, beams, temperature, top_k, top_p, seed)


def whole(value: Any, name: str, low: int, high: int | None) -> int:
    """A whole number within [low, high] (a float like 3.0 counts); InferenceError otherwise."""
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


# ---------------------------------------------------------------------------- one prompt
def prepare(loaded: Loaded, prompt: Any, max_new_tokens: int, *, what: str = "a prompt",
            chat: bool = False) -> GenerationPrompt:
    """The prompt laid out by the checkpoint's Family (with `chat`, as a user turn of its SFT chat
    template); InferenceError for a family that does not generate or a prompt that does not fit."""
    family = loaded.family
    if not family.generates:
        raise InferenceError(f"A {loaded.label} model does not generate text. Pick a checkpoint of a T5, GPT or UniLM "
                             "run (or an imported T5 or GPT-2 model).")
    text = nonempty(prompt, f"Type {what}.")
    if chat:
        return _chat_prompt(loaded, text, max_new_tokens)
    return family.generation_prompt(loaded, text, max_new_tokens)


def chat_template(loaded: Loaded) -> str | None:
    """The chat template of the run that fine-tuned this checkpoint for a task that chats (Task.chats:
    SFT), or None for any other."""
    from trainer import finetune

    config = loaded.state.get("config") or {}
    if not finetune.chats(str(config.get("task", ""))):
        return None
    from trainer.finetune.chat import DEFAULT_CHAT_TEMPLATE

    return str(config.get("chat_template") or DEFAULT_CHAT_TEMPLATE)


CHAT_REFUSAL = ("Chat needs a GPT checkpoint of a supervised fine-tuning (SFT) run: it writes the prompt in the chat "
                "template that run learnt. This checkpoint has none; generate without chat to continue the text as it "
                "is.")


def _chat_prompt(loaded: Loaded, text: str, max_new_tokens: int) -> GenerationPrompt:
    return chat_prompt(loaded, [{"role": "user", "content": text}], max_new_tokens)


def chat_prompt(loaded: Loaded, messages: list[dict[str, str]], max_new_tokens: int) -> GenerationPrompt:
    """A conversation (system / user / assistant messages, the assistant's reply to come last)
    laid out in the checkpoint's SFT chat template, as SFT's collator lays out a prompt."""
    from types import SimpleNamespace

    from trainer.finetune.sft import SFTCollator

    template = chat_template(loaded)
    if template is None:
        raise InferenceError(CHAT_REFUSAL)
    tok = loaded.tokenizer
    collator = SFTCollator(tok, loaded.max_positions, SimpleNamespace(chat_template=template), tok.sep_id)
    ids = collator.prompt_ids([*messages, {"role": "assistant", "content": ""}])
    return loaded.family.prompt_of_ids(loaded, ids, max_new_tokens, what="The prompt in its chat template",
                                       output="for a reply")


def run(loaded: Loaded, p: GenerationPrompt, opts: Decoding) -> tuple[list[int], bool]:
    """(generated ids without EOS, whether the model ended with EOS)."""
    tok = loaded.tokenizer
    generator = torch.Generator().manual_seed(opts.seed) if opts.sampling else None
    with loaded.lock, torch.inference_mode():
        out = loaded.model.generate(torch.tensor([p.input_ids]), max_new_tokens=p.max_new_tokens,
                                    eos_token_id=tok.sep_id, pad_token_id=tok.pad_id, generator=generator,
                                    **loaded.family.generate_kwargs(tok), **opts.model_kwargs())
    new = [int(i) for i in out[0, p.skip:].tolist()]
    ended = tok.sep_id in new
    return (new[: new.index(tok.sep_id)] if ended else new), ended


def _continuation(tok: Any, context: list[int], new: list[int]) -> str:
    """The text the new ids add after `context`: decoded together, so that word boundaries (a
    WordPiece "##", a byte-level "Ġ") come out as the tokenizer means them."""
    if not context:
        return tok.tok.decode(new, skip_special_tokens=True)
    before = tok.tok.decode(context, skip_special_tokens=True)
    whole_text = tok.tok.decode(context + new, skip_special_tokens=True)
    if whole_text.startswith(before):
        return whole_text[len(before):]
    return " " + tok.tok.decode(new, skip_special_tokens=True)


def _answer(loaded: Loaded, p: GenerationPrompt, opts: Decoding, new: list[int], ended: bool) -> dict[str, Any]:
    tok = loaded.tokenizer
    return {"family": loaded.family_name, "text": _continuation(tok, p.context, new),
            "tokens": [tok.tok.id_to_token(i) for i in new], "ids": new,
            "stopped": "end" if ended else "length", "prompt_tokens": len(p.input_ids),
            "decoding": opts.as_dict()}


# ---------------------------------------------------------------------------- the tools
def generate(checkpoint_dir: str | Path, prompt: str, *, chat: bool = False, **decoding: Any) -> dict[str, Any]:
    """A T5, GPT or UniLM checkpoint writes text for `prompt`: T5 its output (text-to-text, e.g.
    "summarize: ..."), GPT the continuation, UniLM a seq2seq target. `decoding`: see
    decoding_options. -> {"family", "text" (GPT: what follows the prompt, leading space
    included), "tokens", "ids", "stopped": "end" (the model wrote EOS) | "length"
    (max_new_tokens or the model's positions ran out), "prompt_tokens", "decoding" (the fields
    used; a sample's seed draws the same text again)}. `chat`: see the module's docstring."""
    loaded = load(checkpoint_dir)
    opts = decoding_options(**decoding)
    p = prepare(loaded, prompt, opts.max_new_tokens, chat=chat)
    new, ended = run(loaded, p, opts)
    return _answer(loaded, p, opts, new, ended)


def generate_seq2seq(checkpoint_dir: str | Path, source_text: str, max_new_tokens: int = 32) -> dict[str, Any]:
    """A UniLM checkpoint continues `source_text` as a seq2seq target (greedy, UniLM's seq2seq mask):
    {"text": the generated text, "tokens": [token strings], "ids": [ids], "stopped": "end" (it wrote
    [SEP]) | "length" (max_new_tokens or the model's positions ran out)}. `generate` with the
    greedy strategy; T5 and GPT checkpoints answer too."""
    _require_seq2seq(load(checkpoint_dir))
    source_text = nonempty(source_text, "Type a source text to continue.")
    if not isinstance(max_new_tokens, int) or isinstance(max_new_tokens, bool) or not 1 <= max_new_tokens:
        raise InferenceError("max_new_tokens must be a whole number of at least 1.")
    out = generate(checkpoint_dir, source_text, strategy="greedy", max_new_tokens=min(max_new_tokens, MAX_NEW_TOKENS))
    return {k: out[k] for k in ("text", "tokens", "ids", "stopped")}


def generate_target(checkpoint_dir: str | Path, source_text: str, **decoding: Any) -> dict[str, Any]:
    """The explorer's UniLM panel: a UniLM checkpoint writes a seq2seq target for `source_text`,
    decoded as `decoding` says (decoding_options); `generate`'s answer. Other families are refused
    with generate_seq2seq's sentence."""
    _require_seq2seq(load(checkpoint_dir))
    return generate(checkpoint_dir, nonempty(source_text, "Type a source text to continue."), **decoding)


def _require_seq2seq(loaded: Any) -> None:
    if not loaded.family.generates:
        raise InferenceError(f"Only UniLM checkpoints generate text; this one holds a {loaded.model.config.label} "
                             f"model, trained without UniLM's seq2seq attention. Pick a checkpoint of a UniLM run.")


def fill_spans(checkpoint_dir: str | Path, text: str, **decoding: Any) -> dict[str, Any]:
    """T5 span filling: `text` has sentinels <extra_id_0>, <extra_id_1>, ... where spans are
    missing; the model writes "<extra_id_0> span <extra_id_1> span ..." (span corruption's
    target) and each sentinel gets its span. -> {"spans": [{"sentinel", "index", "text",
    "tokens", "found" (False when the output had no such sentinel)}], "filled" (the text with
    each sentinel replaced by its span), "output" (the raw output, sentinels kept), "stopped",
    "decoding"}."""
    loaded = load(checkpoint_dir)
    if not loaded.family.fills_spans:
        raise InferenceError(f"Span filling needs a T5 checkpoint (trained with span corruption); this one holds a "
                             f"{loaded.label} model.")
    tok = loaded.tokenizer
    sentinels = list(getattr(tok, "sentinel_ids", None) or [])
    if not sentinels:
        raise InferenceError("This checkpoint's tokenizer has no sentinel tokens (<extra_id_0>, <extra_id_1>, ...), "
                             "so it cannot fill spans. Train the T5 run on a tokenizer with sentinel tokens.")
    text = nonempty(text, "Type a text with <extra_id_0> where a span is missing.")
    typed = sorted({int(n) for n in SENTINEL.findall(text)})
    if not typed:
        raise InferenceError("The text has no sentinel: write <extra_id_0> where a span is missing "
                             "(and <extra_id_1>, <extra_id_2>, ... for more spans).")
    if typed[-1] >= len(sentinels):
        raise InferenceError(f"This tokenizer has {len(sentinels)} sentinel tokens, <extra_id_0> to "
                             f"<extra_id_{len(sentinels) - 1}>; <extra_id_{typed[-1]}> is not one of them.")
    opts = decoding_options(**decoding)
    p = prepare(loaded, text, opts.max_new_tokens, what="a text with <extra_id_0> where a span is missing")
    index_of = {sid: i for i, sid in enumerate(sentinels)}
    asked = [index_of[i] for i in p.input_ids if i in index_of]
    new, ended = run(loaded, p, opts)
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


def stream_generate(checkpoint_dir: str | Path, prompt: str, *, chat: bool = False,
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
    loaded = load(checkpoint_dir)
    opts = decoding_options(**decoding)
    p = prepare(loaded, prompt, opts.max_new_tokens, chat=chat)
    if opts.strategy == "beam":
        return _all_at_once(loaded, p, opts)
    return _step_by_step(loaded, p, opts)


def _all_at_once(loaded: Loaded, p: GenerationPrompt, opts: Decoding) -> Generator[str, None, dict[str, Any]]:
    new, ended = run(loaded, p, opts)
    answer = _answer(loaded, p, opts, new, ended)
    if answer["text"]:
        yield answer["text"]
    return answer


def _step_by_step(loaded: Loaded, p: GenerationPrompt, opts: Decoding) -> Generator[str, None, dict[str, Any]]:
    from models_lib.core.generation import filter_logits, next_logits

    tok, model = loaded.tokenizer, loaded.model
    generator = torch.Generator().manual_seed(opts.seed) if opts.sampling else None
    with loaded.lock, torch.inference_mode():
        state, feed = model.start_generation(torch.tensor([p.input_ids]), None, **loaded.family.generate_kwargs(tok))
    new: list[int] = []
    shown = ""
    ended = False
    for _ in range(p.max_new_tokens):
        with loaded.lock, torch.inference_mode():  # never held across a yield
            logits, state = next_logits(model, state, feed)  # (1, V): the real vocabulary's ids only
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
    answer = _answer(loaded, p, opts, new, ended)
    if answer["text"].startswith(shown) and len(answer["text"]) > len(shown):
        yield answer["text"][len(shown):]
    return answer
