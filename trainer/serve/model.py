"""The one checkpoint a server answers for: where it is, what it can answer, and the answers
that are not generation (embeddings and the encoder tasks).

    served = open_model(PATH, name=..., pooling="mean")   # a checkpoint, a run folder, or an HF folder
    served.endpoints                                      # the /v1 paths this checkpoint answers

The answers come from the explorer's own functions (trainer.inference), so a served model says
what the explorer says for the same checkpoint and input. Every problem a client can fix raises
InferenceError with a sentence; the app turns it into OpenAI's error shape.
"""
from __future__ import annotations

import hashlib
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch

from models_lib.heads import tasks as heads
from trainer.errors import ConfigError, InferenceError, UserError
from trainer.inference import downstream, generate
from trainer.inference.loading import Loaded, load

POOLINGS = downstream.POOLINGS  # mean (the default, as sentence-transformers' mean pooling) or cls
MAX_EMBEDDING_INPUTS = 2048     # OpenAI's bound on one request's list of inputs
EMBED_GROUP = 16               # texts encoded together (of like lengths: see ServedModel.embed)
MAX_T5_OUTPUT = 1024            # T5's decoder has no positions of its own: the tokens one reply may have
TASK_ENDPOINTS = {heads.SEQUENCE_CLASSIFICATION: "/v1/text-classification",
                  heads.TOKEN_CLASSIFICATION: "/v1/token-classification",
                  heads.QUESTION_ANSWERING: "/v1/question-answering"}


@dataclass
class ServedModel:
    folder: Path           # the checkpoint folder read
    name: str              # the model id clients name
    pooling: str = "mean"  # how /v1/embeddings turns token vectors into one vector
    created: int = 0       # the checkpoint's time (Unix seconds), as /v1/models reports it
    _scratch: Path | None = field(default=None, repr=False)  # an imported HF folder's checkpoint, removed on close

    @property
    def loaded(self) -> Loaded:
        return load(self.folder)

    # ------------------------------------------------------------------------ what it answers
    @property
    def generates(self) -> bool:
        return bool(self.loaded.family.generates) and not downstream.task_of(self.loaded)

    @property
    def chats(self) -> bool:
        return self.generates and generate.chat_template(self.loaded) is not None

    @property
    def embeds(self) -> bool:
        loaded = self.loaded
        if loaded.family.word_vectors:
            return True
        try:
            downstream._encoder(loaded)
            return True
        except InferenceError:
            return callable(getattr(loaded.model, "encode", None)) and loaded.family.fills_spans  # T5's encoder

    @property
    def fills_masks(self) -> bool:
        loaded = self.loaded
        if not loaded.family.masked_lm or downstream.task_of(loaded):
            return False
        from trainer import objectives

        return loaded.objectives is None or objectives.fills_masks(loaded.objectives)

    @property
    def endpoints(self) -> list[str]:
        out = ["/v1/models"]
        if self.generates:
            out.append("/v1/completions")
        if self.chats:
            out.append("/v1/chat/completions")
        if self.embeds:
            out.append("/v1/embeddings")
        if self.fills_masks:
            out.append("/v1/fill-mask")
        task = downstream.task_of(self.loaded)
        if task in TASK_ENDPOINTS:
            out.append(TASK_ENDPOINTS[task])
        elif downstream.written_task(self.loaded) is not None:
            out.append("/v1/text-classification")
        return out

    @property
    def context(self) -> int:
        """The most tokens one generation may hold: prompt and reply for a decoder-only model (its
        positions), the reply alone for T5 (whose input has its own limit)."""
        loaded = self.loaded
        if loaded.family.fills_spans:
            return MAX_T5_OUTPUT
        return loaded.max_positions

    def close(self) -> None:
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    # ------------------------------------------------------------------------ embeddings
    def token_count(self, text: str) -> int:
        return len(self.loaded.tokenizer.tok.encode(text).ids)

    def embed(self, texts: Sequence[str]) -> torch.Tensor:
        """Unit-length vectors (N, D) of the texts, `pooling` over the last layer's token vectors
        (ELMo: every layer's, averaged, as an equal scalar mix; T5: its encoder's). The texts are
        encoded longest first in groups of EMBED_GROUP of like lengths, so little of a batch is padding."""
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        parts = [self._embed([texts[i] for i in order[k:k + EMBED_GROUP]]) for k in range(0, len(order), EMBED_GROUP)]
        vectors = torch.cat(parts)
        out = torch.empty_like(vectors)
        out[torch.tensor(order)] = vectors
        return out

    def _embed(self, texts: Sequence[str]) -> torch.Tensor:
        loaded = self.loaded
        if loaded.family.word_vectors:
            return self._elmo_vectors(loaded, texts)
        try:
            return downstream.sentence_vectors(loaded, texts, pooling=self.pooling)[0]
        except InferenceError:
            if not self.embeds:
                raise
        return self._t5_vectors(loaded, texts)

    def _t5_vectors(self, loaded: Loaded, texts: Sequence[str]) -> torch.Tensor:
        tok = loaded.tokenizer
        encodings = [tok.tok.encode(t).ids for t in texts]
        T = max(len(e) for e in encodings)
        ids = torch.full((len(texts), T), int(tok.pad_id), dtype=torch.long)
        mask = torch.zeros((len(texts), T), dtype=torch.long)
        for i, e in enumerate(encodings):
            ids[i, :len(e)] = torch.tensor(e)
            mask[i, :len(e)] = 1
        with loaded.lock, torch.inference_mode():
            hidden = loaded.model.encode(ids, mask).float()  # (N, T, H)
            return _pool(hidden, mask, self.pooling)

    def _elmo_vectors(self, loaded: Loaded, texts: Sequence[str]) -> torch.Tensor:
        tok = loaded.tokenizer
        out = []
        with loaded.lock, torch.inference_mode():
            for text in texts:
                ids = tok.tok.encode(text, add_special_tokens=False).ids or [int(tok.unk_id)]
                layers = loaded.model.embed(torch.tensor([ids]))  # L + 1 tensors (1, T, 2P)
                hidden = torch.stack([h.float() for h in layers]).mean(0)  # (1, T, 2P)
                out.append(_pool(hidden, torch.ones(1, len(ids), dtype=torch.long), self.pooling)[0])
        return torch.stack(out)

    def check_embedding_input(self, text: str) -> int:
        """The text's token count; InferenceError when it does not fit what the model reads."""
        n = self.token_count(text)
        limit = self.loaded.input_limit
        if n > limit:
            raise InferenceError(f"An input is {n} tokens long, but this model reads at most {limit}. Shorten it "
                                 f"or split it.")
        return n

    # ------------------------------------------------------------------------ encoder tasks
    def fill_mask(self, text: str, top_k: int) -> list[list[dict[str, Any]]]:
        """Hugging Face's fill-mask shape per mask: [{score, token, token_str, sequence}]."""
        from trainer.inference.masked import canonical_masks, fill_mask

        found = fill_mask(self.folder, text, top_k=top_k)
        tok = self.loaded.tokenizer
        mask_token = tok.tok.id_to_token(tok.mask_id)
        ids = tok.tok.encode(canonical_masks(text.strip(), mask_token, tok.meta.get("algorithm", "wordpiece"))).ids
        out = []
        for mask in found:
            answers = []
            for p in mask["predictions"]:
                filled = list(ids)
                filled[mask["position"]] = p["id"]
                answers.append({"score": p["prob"], "token": p["id"],
                                "token_str": tok.tok.decode([p["id"]], skip_special_tokens=True).strip() or p["token"],
                                "sequence": tok.tok.decode(filled, skip_special_tokens=True)})
            out.append(answers)
        return out

    def classify(self, text: str, text_pair: str | None) -> list[dict[str, Any]]:
        """[{label, score}], most likely first (a regression: [{"label": "value", "score": value}])."""
        found = downstream.classify(self.folder, text, text_pair)
        if found["value"] is not None:
            return [{"label": "value", "score": found["value"]}]
        if found["labels"]:
            return [{"label": x["label"], "score": x["probability"]} for x in found["labels"]]
        return [{"label": label, "score": 1.0} for label in found["predicted"]]  # a T5 that wrote its label

    def tag(self, text: str) -> list[dict[str, Any]]:
        """Hugging Face's aggregated token classification: [{entity_group, score, word, start, end}]."""
        found = downstream.tag(self.folder, text)
        return [{"entity_group": e["type"], "score": e["score"], "word": e["text"], "start": e["start"],
                 "end": e["end"]} for e in found["entities"]]

    def answer(self, question: str, context: str) -> dict[str, Any]:
        """Hugging Face's question answering: {score, start, end, answer}. The score is the best span's
        probability among the candidates and "no answer" (a softmax over their start + end logits)."""
        found = downstream.answer(self.folder, question, context, n_best=downstream.MAX_N_BEST)
        best = found["answer"]
        scores = [c["score"] for c in found["n_best"]] + [found["null_score"]]
        chosen = best["score"] if best["text"] else found["null_score"]
        total = float(torch.tensor(scores).logsumexp(0))
        score = float(torch.tensor(chosen - total).exp()) if chosen is not None else 0.0
        return {"score": score, "start": best["start"], "end": best["end"], "answer": best["text"]}


def _pool(hidden: torch.Tensor, mask: torch.Tensor, pooling: str) -> torch.Tensor:
    if pooling == "cls":
        vectors = hidden[:, 0]
    else:
        weights = mask.unsqueeze(-1).float()
        vectors = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)
    return torch.nn.functional.normalize(vectors, dim=-1)


# ---------------------------------------------------------------------------- opening one
def open_model(path: str | Path, *, name: str = "", pooling: str = "mean") -> ServedModel:
    """The model at `path`: a checkpoint folder, a run's folder (its latest checkpoint), or a
    Hugging Face folder (an export of ours or a save_pretrained() folder: imported into a scratch
    checkpoint first). ConfigError with a sentence when it is none of these."""
    from trainer.training.checkpoints import list_checkpoints

    if pooling not in POOLINGS:
        raise ConfigError(f"--pooling must be one of {', '.join(POOLINGS)}, not {pooling!r}.")
    source = Path(path).expanduser()
    if not source.exists():
        raise ConfigError(f"{source} does not exist. Name a checkpoint folder, a run folder or an exported model "
                          f"folder.")
    scratch = None
    if (source / "model_config.json").is_file():
        folder = source
    elif list_checkpoints(source):
        folder = list_checkpoints(source)[-1][1]
    elif (source / "config.json").is_file():
        from trainer.inference.importing import import_model

        key = hashlib.sha256(str(source.resolve()).encode()).hexdigest()[:12]
        scratch = Path(tempfile.mkdtemp(prefix=f"lmwb-serve-{key}-"))
        folder = scratch / "checkpoint"
        try:
            import_model(source, folder)
        except UserError:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
    else:
        raise ConfigError(f"{source} is neither a checkpoint, a run folder with checkpoints, nor a Hugging Face model "
                          f"folder (config.json). Train one first or name a checkpoint folder.")
    served = ServedModel(folder, name or _default_name(source), pooling,
                         int((folder / "model.safetensors").stat().st_mtime) if (folder / "model.safetensors").exists()
                         else 0, scratch)
    try:
        served.loaded  # noqa: B018 (load it now: a broken checkpoint stops the command, not the first request)
    except InferenceError as e:
        served.close()
        raise ConfigError(str(e)) from None
    if served.endpoints == ["/v1/models"]:
        served.close()
        raise ConfigError(f"{source} holds a model this server has nothing to answer with (no generation, embeddings "
                          f"or task head).")
    return served


def _default_name(source: Path) -> str:
    resolved = source.resolve()
    if resolved.name.startswith("step-") and resolved.parent.name == "checkpoints":
        return f"{resolved.parent.parent.name}-{resolved.name}"
    return resolved.name or "model"
