"""The generation engine: one thread that decodes every request's choices, several at once.

Requests wait in a bounded queue (Busy when it is full: the app answers 429). The engine takes
what is waiting, up to `max_batch` choices, as one batch when the family decodes prompts of
different lengths together (Family.batched_generation: GPT, left-padded with an attention mask),
else one at a time, and feeds the batch token by token through the model's incremental decoding
(start_generation / generation_step, the key/value cache). A choice leaves the batch when it
ends (end-of-text, a stop string, its max_tokens) or its client went away (Choice.cancel), and its
rows leave the cache with it (reorder_generation_state). Batches are continuous: between two
steps, choices that arrived meanwhile (while there is room) read their prompts apart, write their
first token at once, and join the running batch (the model's merge_generation_state), so a new
request never waits for the batch before it to finish.

Each step decodes each row as the explorer's stream does (trainer.inference.generate): greedy is
the argmax; sampling filters the row's logits with its temperature and top_p and draws with the
row's own seeded generator, so a choice alone in its batch gives exactly the explorer's text for
the same checkpoint, prompt, decoding and seed. Text reaches the client in pieces that end in
whole characters; a piece that could be the start of a stop string is held back until it is not.
"""
from __future__ import annotations

import collections
import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from trainer.families import GenerationPrompt
from trainer.inference.generate import Decoding, _continuation

log = logging.getLogger(__name__)

MAX_BATCH = 16
MAX_WAITING = 64


class Busy(Exception):
    """The queue is full; the message says how many choices are waiting."""


@dataclass(frozen=True)
class Event:
    kind: str          # "delta" (text), "done" (text = the whole reply, finish_reason, tokens), "error"
    index: int         # the choice's index in its request
    text: str = ""
    finish_reason: str = ""
    tokens: int = 0


@dataclass
class Choice:
    """One reply to write: a prompt made ready (trainer.inference.generate.prepare), its decoding,
    its stop strings and where its events go (called from the engine's thread)."""

    prompt: GenerationPrompt
    opts: Decoding
    emit: Callable[[Event], None]
    index: int = 0
    stop: tuple[str, ...] = ()
    cancelled: threading.Event = field(default_factory=threading.Event)
    new: list[int] = field(default_factory=list)
    shown: str = ""
    generator: torch.Generator | None = None

    def cancel(self) -> None:
        self.cancelled.set()

    # ------------------------------------------------------------------------ one token
    def advance(self, token: int, tok: Any) -> bool:
        """Take the next token; True when the choice has ended (its "done" event emitted)."""
        if token == tok.sep_id:
            return self._finish(tok, "stop")
        self.new.append(token)
        text = _continuation(tok, self.prompt.context, self.new)
        cut = self._stop_at(text)
        if cut is not None:
            return self._finish(tok, "stop", cut)
        if text.startswith(self.shown) and not text.endswith("\ufffd"):
            safe = len(text) - _held_back(text, self.stop)
            if safe > len(self.shown):
                self.emit(Event("delta", self.index, text[len(self.shown):safe]))
                self.shown = text[:safe]
        if len(self.new) >= self.prompt.max_new_tokens:
            return self._finish(tok, "length")
        return False

    def _stop_at(self, text: str) -> int | None:
        found = [text.find(s) for s in self.stop if s and text.find(s) >= 0]
        return min(found) if found else None

    def _finish(self, tok: Any, reason: str, cut: int | None = None) -> bool:
        text = _continuation(tok, self.prompt.context, self.new)
        if cut is None:
            cut = self._stop_at(text)
            reason = "stop" if cut is not None else reason
        if cut is not None:
            text = text[:cut]
        if text.startswith(self.shown) and len(text) > len(self.shown):
            self.emit(Event("delta", self.index, text[len(self.shown):]))
        self.emit(Event("done", self.index, text, reason, len(self.new)))
        return True


def _held_back(text: str, stops: tuple[str, ...]) -> int:
    """How many characters at the end of `text` could begin a stop string."""
    held = 0
    for stop in stops:
        for k in range(min(len(stop) - 1, len(text)), held, -1):
            if text.endswith(stop[:k]):
                held = k
                break
    return held


class Engine:
    """Decodes the choices `submit` queues, in batches, on a thread of its own."""

    def __init__(self, loaded_of: Callable[[], Any], *, max_batch: int = MAX_BATCH,
                 max_waiting: int = MAX_WAITING) -> None:
        self._loaded_of = loaded_of  # () -> trainer.inference.loading.Loaded
        self.max_batch = max(1, int(max_batch))
        self.max_waiting = max(1, int(max_waiting))
        self._waiting: collections.deque[Choice] = collections.deque()
        self._cv = threading.Condition()
        self._stopping = False
        self.active = 0        # choices in the batch being decoded
        self.finished = 0      # choices that ended (end-of-text, a stop string, max_tokens)
        self.cancelled = 0     # choices dropped because their client went away
        self.joined = 0        # choices that joined a batch already running
        self._thread = threading.Thread(target=self._loop, name="generation", daemon=True)

    def start(self) -> "Engine":
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._cv:
            self._stopping = True
            for choice in self._waiting:
                choice.cancel()
            self._cv.notify_all()
        self._thread.join(timeout=10)

    @property
    def waiting(self) -> int:
        with self._cv:
            return len(self._waiting)

    def submit(self, choices: list[Choice]) -> None:
        """Queue one request's choices together; Busy when they do not fit the queue."""
        with self._cv:
            if len(self._waiting) + len(choices) > self.max_waiting:
                raise Busy(f"The server is busy: {len(self._waiting)} replies are waiting to be generated (at most "
                           f"{self.max_waiting}). Try again in a moment.")
            for choice in choices:
                if choice.opts.sampling:
                    choice.generator = torch.Generator().manual_seed(int(choice.opts.seed))
                self._waiting.append(choice)
            self._cv.notify()

    # ------------------------------------------------------------------------ the thread
    def _take_now(self, room: int) -> list[Choice]:
        """Up to `room` waiting choices, without waiting."""
        with self._cv:
            out = []
            while self._waiting and len(out) < room:
                choice = self._waiting.popleft()
                if choice.cancelled.is_set():
                    self.cancelled += 1
                else:
                    out.append(choice)
            return out

    def _take(self, batched: bool) -> list[Choice]:
        """What is waiting (up to a batch, or one), once something is."""
        with self._cv:
            while not self._waiting and not self._stopping:
                self._cv.wait()
        return self._take_now(self.max_batch if batched else 1)

    def _loop(self) -> None:
        while True:
            loaded = self._loaded_of()
            batch = self._take(bool(loaded.family.batched_generation))
            if self._stopping:
                return
            if not batch:
                continue
            self.active = len(batch)
            try:
                self._decode(loaded, batch)
            except Exception:  # a bug, not the client's: each choice hears so, the engine goes on
                log.exception("generation failed")
                for choice in batch:
                    choice.emit(Event("error", choice.index, "Generation stopped because of an internal error. "
                                                             "The details have been logged; try again."))
            finally:
                self.active = 0

    def _decode(self, loaded: Any, rows: list[Choice]) -> None:
        model = loaded.model
        joins = bool(loaded.family.batched_generation) and hasattr(model, "merge_generation_state")
        state, rows, chosen = self._start(loaded, rows)
        while rows and not self._stopping:
            if joins and len(rows) < self.max_batch and self._waiting:
                joining = self._take_now(self.max_batch - len(rows))
                if joining:
                    other, joined, first = self._start(loaded, joining)
                    if joined:
                        with loaded.lock, torch.inference_mode():
                            state = model.merge_generation_state(state, other)
                        rows, chosen = rows + joined, chosen + first
                        self.joined += len(joined)
                        self.active = len(rows)
            feed = torch.tensor(chosen)[:, None]  # (B, 1)
            with loaded.lock, torch.inference_mode():
                logits, state = self._next(model, state, feed)
                chosen = [self._pick(row, logits[i:i + 1]) for i, row in enumerate(rows)]
            state, rows, chosen = self._advance(loaded, state, rows, chosen)
            self.active = len(rows)

    @staticmethod
    def _next(model: Any, state: Any, feed: torch.Tensor) -> tuple[torch.Tensor, Any]:
        from models_lib.core.generation import next_logits

        return next_logits(model, state, feed)  # (B, V)

    @staticmethod
    def _pick(row: Choice, row_logits: torch.Tensor) -> int:
        """The row's next token from its (1, V) logits, as the explorer's stream picks it."""
        from models_lib.core.generation import filter_logits

        if row.opts.sampling:  # the same seed draws the same tokens
            probs = filter_logits(row_logits.float(), temperature=row.opts.temperature, top_k=row.opts.top_k,
                                  top_p=row.opts.top_p).softmax(-1)
            return int(torch.multinomial(probs, 1, generator=row.generator)[0, 0])
        return int(row_logits.argmax(-1)[0])

    def _start(self, loaded: Any, rows: list[Choice]) -> tuple[Any, list[Choice], list[int]]:
        """Read the rows' prompts and pick each one's first token: (state, the rows still going, their tokens)."""
        tok, model = loaded.tokenizer, loaded.model
        ids, mask = _left_padded([r.prompt.input_ids for r in rows], int(tok.pad_id))
        with loaded.lock, torch.inference_mode():
            state, feed = model.start_generation(ids, mask, **loaded.family.generate_kwargs(tok))
            logits, state = self._next(model, state, feed)
            chosen = [self._pick(row, logits[i:i + 1]) for i, row in enumerate(rows)]
        return self._advance(loaded, state, rows, chosen)

    def _advance(self, loaded: Any, state: Any, rows: list[Choice],
                 chosen: list[int]) -> tuple[Any, list[Choice], list[int]]:
        """Give each row its token; the rows that ended or whose client left leave the batch."""
        keep = []
        for i, (row, token) in enumerate(zip(rows, chosen)):
            if row.cancelled.is_set():
                self.cancelled += 1
            elif row.advance(token, loaded.tokenizer):
                self.finished += 1
            else:
                keep.append(i)
        if keep and len(keep) < len(rows):
            model = loaded.model
            with loaded.lock, torch.inference_mode():
                state = model.reorder_generation_state(state, torch.tensor(keep))
                if hasattr(model, "compact_generation_state"):
                    state = model.compact_generation_state(state)
        return state, [rows[i] for i in keep], [chosen[i] for i in keep]


def _left_padded(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(ids (B, S), attention mask or None when no row is padded): prompts aligned on the right."""
    if len(prompts) == 1:
        return torch.tensor(prompts), None
    S = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), S), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), S), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, S - len(p):] = torch.tensor(p)
        mask[i, S - len(p):] = 1
    return ids, (mask if not bool(mask.all()) else None)
