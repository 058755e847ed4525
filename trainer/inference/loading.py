"""Load a checkpoint for the explorer: its model, tokenizer and what it learnt, kept in a small
per-process LRU cache, bounded in models (CACHE_SIZE) and in bytes (CACHE_BYTES: the parameters
and buffers of the models it keeps), so that what a web or worker process holds while idle is
bounded whatever the models' sizes; the least recently used model goes first.

A checkpoint is a trained run's (trainer_state.json says which objectives it learnt) or an
imported Hugging Face model (import_info.json lists the heads whose weights it brought); a
question for a head the model never learnt is refused with a sentence (`Loaded.untrained`).
Models are loaded on the CPU and cached keyed by the folder and its weights file's mtime (a
re-written checkpoint is reloaded). `Loaded.family` is the checkpoint's trainer.families
Family, which the capability modules (masked, generate, attention, similarity) ask instead of
comparing family names. Every problem the user can fix raises InferenceError with a sentence.
"""
from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from trainer import families
from trainer.errors import InferenceError, UserError
from trainer.families import Family
from trainer.training import checkpoints

CACHE_SIZE = 4
# Bytes of parameters and buffers the cache keeps (an environment variable of the same name); a
# model larger than this alone is served but not kept.
CACHE_BYTES = int(os.environ.get("EXPLORER_CACHE_BYTES", str(2 * 1024**3)))
MAX_INPUT_TOKENS = 1024      # T5 and ELMo inputs (models with learned positions stop at their own maximum)

_cache: "OrderedDict[tuple[str, int], Loaded]" = OrderedDict()
_sizes: dict[tuple[str, int], int] = {}  # each cached model's nbytes, counted once as it is kept
_lock = threading.Lock()


@dataclass
class Loaded:
    model: nn.Module
    tokenizer: Any  # trainer.prep.tokenization.TokenizerBundle
    state: dict     # trainer_state.json ({} for imported models)
    info: dict = field(default_factory=dict)  # import_info.json ({} for trained checkpoints)
    # One request at a time runs this model: recording attention switches its modules' state,
    # and hooks see every call of the module, whichever thread makes it.
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def nbytes(self) -> int:
        """Bytes of the model's parameters and buffers (shared tensors once): what keeping it costs."""
        return model_bytes(self.model)

    @property
    def max_positions(self) -> int:
        return int(getattr(self.model.config, "max_positions", 512))

    @property
    def family_name(self) -> str:
        """models_lib's family name: "bert", "roberta", ..., "t5", "gpt", "elmo"."""
        return str(getattr(self.model.config, "family", ""))

    @property
    def family(self) -> Family:
        """The trainer.families Family of the checkpoint's model."""
        return families.get(self.family_name)

    @property
    def label(self) -> str:
        """The model's own label ("GPT-2", "BERT", ...), for sentences."""
        return str(getattr(self.model.config, "label", self.family_name))

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

    def check_length(self, n_tokens: int) -> None:
        """A text must fit the model's positions (special tokens included)."""
        if n_tokens > self.max_positions:
            raise InferenceError(f"The text is {n_tokens} tokens long (with the special tokens), but this model "
                                 f"reads at most {self.max_positions}. Shorten it.")

    def check_input(self, n_tokens: int) -> None:
        """A text must fit what the explorer feeds this model (input_limit)."""
        if n_tokens > self.input_limit:
            raise InferenceError(f"The text is {n_tokens} tokens long, but the explorer feeds this model at most "
                                 f"{self.input_limit}. Shorten it.")


def list_checkpoints(run_folder: str | Path) -> list[tuple[int, Path]]:
    """[(step, folder)] of a run's complete checkpoints, oldest first."""
    return checkpoints.list_checkpoints(Path(run_folder))


def model_bytes(model: nn.Module) -> int:
    tensors = {id(t): t for t in (*model.parameters(), *model.buffers())}
    return sum(t.numel() * t.element_size() for t in tensors.values())


def clear_cache() -> None:
    with _lock:
        _cache.clear()
        _sizes.clear()


def cached_bytes() -> int:
    """Bytes of parameters and buffers the cache holds now."""
    with _lock:
        return sum(_sizes.values())


def load(checkpoint_dir: str | Path) -> Loaded:
    """The checkpoint's model, tokenizer and records, from the cache when its weights are unchanged."""
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
    size = loaded.nbytes
    with _lock:
        _cache[key] = loaded
        _sizes[key] = size
        _cache.move_to_end(key)
        while _cache and (len(_cache) > CACHE_SIZE or sum(_sizes.values()) > CACHE_BYTES):
            oldest, _ = _cache.popitem(last=False)  # this one itself, last, when it alone is too large
            _sizes.pop(oldest, None)
    return loaded


def _read(folder: Path) -> Loaded:
    from models_lib.checkpoint import load_model
    from trainer.inference.importing import read_import_info
    from trainer.prep.tokenization import load_tokenizer

    try:
        model = load_model(folder, map_location="cpu").eval()
    except ValueError as e:
        raise InferenceError(f"The checkpoint {folder.name} cannot be loaded: {e}") from None
    name = str(getattr(model.config, "family", ""))
    if name not in families.names():
        raise InferenceError(f"The checkpoint {folder.name} holds a model of a family LM Workbench does not know "
                             f"({name!r}).")
    family = families.get(name)
    fine_tuned = getattr(model, "task_config", None) is not None  # a task head (trainer.inference.downstream)
    if family.masked_lm and not fine_tuned and not hasattr(family.fill_mask_model(model)[0], "mlm_head"):
        raise InferenceError(f"The checkpoint {folder.name} holds a model without a language-model head.")
    try:
        tokenizer = load_tokenizer(folder)
    except UserError as e:
        raise InferenceError(f"The checkpoint {folder.name} has an unusable tokenizer: {e}") from None
    state_path = folder / checkpoints.STATE_NAME
    state = json.loads(state_path.read_text(encoding="utf-8")) if state_path.is_file() else {}
    return Loaded(model, tokenizer, state, read_import_info(folder))


def nonempty(text: Any, message: str) -> str:
    """The text, stripped; InferenceError(message) when there is none."""
    if not isinstance(text, str) or not text.strip():
        raise InferenceError(message)
    return text.strip()
