"""Ask fine-tuned checkpoints (trainer.finetune) and any encoder what they were made for:

    classify(folder, text, text_b=None)          label probabilities (single-label), a probability per
                                                 label against the threshold (multi-label), or the value
                                                 (regression) of a sequence classifier
    tag(folder, text)                            a token classifier's tag per word and the entities (BIO
                                                 spans, with character offsets into the text)
    answer(folder, question, context, n_best)    an extractive QA model's answer span in the context, its
                                                 score and the n best candidates (SQuAD's decoding, as
                                                 trainer.finetune.qa scores the run)
    choose(folder, context, choices)             a GPT-1 multiple-choice model's probability for each choice
                                                 (one pass per choice, a softmax over their scores)
    embed(folder, sentences, pooling)            sentence vectors of any encoder checkpoint (mean of the
                                                 tokens or the first token) and their cosine similarities
                                                 (sentence_vectors; trainer.inference.neighbours searches
                                                 a dataset's with it)

The model is read as trainer.inference.loading caches it; the tokenizer is the checkpoint's own,
cut to the length the run fine-tuned with (its trainer_state.json), else the model's positions.
Every problem a user can fix raises InferenceError with a sentence.
"""
from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Sequence

import torch

from models_lib.heads import tasks as heads
from trainer.errors import InferenceError
from trainer.inference.loading import Loaded, load, nonempty

MAX_SENTENCES = 8
POOLINGS = ("mean", "cls")
MAX_N_BEST = 20
MAX_CHOICES = 8
_WORD = re.compile(r"\w+(?:[-'’]\w+)*|[^\w\s]", re.UNICODE)  # words and single punctuation marks, as CoNLL splits

# the models_lib head a fine-tuned checkpoint has -> how an error names such a model
HEAD_NAMES = {heads.SEQUENCE_CLASSIFICATION: "a sequence classifier", heads.TOKEN_CLASSIFICATION: "a token classifier",
              heads.QUESTION_ANSWERING: "an extractive question-answering model",
              heads.MULTIPLE_CHOICE: "a multiple-choice model (GPT-1)"}


# ---------------------------------------------------------------------------- shared
def task_of(loaded: Loaded) -> str:
    """The downstream task the checkpoint's model has a head for ("" for a pre-training model)."""
    task = getattr(loaded.model, "task_config", None)
    return str(task.task) if task is not None else ""


def _require(loaded: Loaded, task: str, tool: str) -> Any:
    have = task_of(loaded)
    if have != task:
        what = HEAD_NAMES.get(have, "a pre-trained model without a task head")
        raise InferenceError(f"{tool} needs a checkpoint fine-tuned as {HEAD_NAMES[task]}; this one is {what}. "
                             "Choose a checkpoint of a fine-tuning run for that task.")
    return loaded.model.task_config


def _max_length(loaded: Loaded) -> int:
    configured = loaded.state.get("config", {}).get("max_length")
    limit = loaded.max_positions
    return min(int(configured), limit) if isinstance(configured, int) and configured > 0 else limit


def _tokenizer(loaded: Loaded, max_length: int) -> Any:
    """A copy of the checkpoint's tokenizer that cuts to max_length and does not pad."""
    tok = loaded.tokenizer.tok.__class__.from_str(loaded.tokenizer.tok.to_str())
    tok.no_padding()
    tok.enable_truncation(max_length)
    return tok


def _tensors(encodings: Sequence[Any], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    T = max(len(e.ids) for e in encodings)
    ids = torch.full((len(encodings), T), pad_id, dtype=torch.long)
    mask = torch.zeros((len(encodings), T), dtype=torch.long)
    types = torch.zeros((len(encodings), T), dtype=torch.long)
    for i, e in enumerate(encodings):
        ids[i, :len(e.ids)] = torch.tensor(e.ids)
        mask[i, :len(e.ids)] = 1
        types[i, :len(e.ids)] = torch.tensor(e.type_ids)
    return ids, mask, types


def _token_types(model: Any, types: torch.Tensor) -> torch.Tensor | None:
    """Segment ids for a model with token-type embeddings; None for one without (RoBERTa, DistilBERT)."""
    return types if getattr(model.config, "type_vocab_size", 0) else None


# ---------------------------------------------------------------------------- classify
def classify(checkpoint_dir: str | Path, text: str, text_b: str | None = None) -> dict[str, Any]:
    """-> {"problem_type", "labels": [{"label", "probability"}] most likely first (regression: []),
    "predicted": [labels] (the argmax, or every label over the threshold), "value" (regression),
    "threshold" (multi-label), "truncated", "generated" (the text a T5 model wrote, else None)}.
    A T5 checkpoint fine-tuned on a classification or regression dataset writes its answer
    (trainer.finetune.text_classify); see _classify_by_writing."""
    loaded = load(checkpoint_dir)
    text = nonempty(text, "Type a text to classify.")
    pair = (text_b or "").strip()
    written = written_task(loaded)
    if written is not None:
        return _classify_by_writing(loaded, written, text, pair)
    spec = _require(loaded, heads.SEQUENCE_CLASSIFICATION, "Classification")
    max_length = _max_length(loaded)
    tok = _tokenizer(loaded, max_length)
    enc = tok.encode(text, pair) if pair else tok.encode(text)
    full = len(loaded.tokenizer.tok.encode(text, pair).ids) if pair else len(loaded.tokenizer.tok.encode(text).ids)
    ids, mask, types = _tensors([enc], int(loaded.tokenizer.pad_id))
    model = loaded.model
    with loaded.lock, torch.inference_mode():
        logits = model(ids, mask, _token_types(model, types)).logits[0].float()
    names = [spec.id2label[i] for i in range(spec.num_labels)]
    out: dict[str, Any] = {"problem_type": spec.problem_type, "truncated": full > len(enc.ids),
                           "max_length": max_length, "value": None, "threshold": None, "generated": None}
    if spec.problem_type == heads.REGRESSION:
        out.update(labels=[], predicted=[], value=float(logits.view(-1)[0]))
        return out
    if spec.problem_type == "multi_label_classification":
        probs = torch.sigmoid(logits).tolist()
        out["threshold"] = float(spec.threshold)
        predicted = [n for n, p in zip(names, probs) if p > spec.threshold]
    else:
        probs = torch.softmax(logits, -1).tolist()
        predicted = [names[int(torch.tensor(probs).argmax())]]
    ranked = sorted(zip(names, probs), key=lambda x: -x[1])
    out.update(labels=[{"label": n, "probability": float(p)} for n, p in ranked], predicted=predicted)
    return out


def written_task(loaded: Loaded) -> Any:
    """The fine-tuning Task of a checkpoint that answers the explorer's classify by writing its
    label or score as text, else None: one without a task head whose run's task, as its family
    trains it (trainer.finetune.for_family), writes its labels (Task.writes_labels: T5's
    text-to-text classification and regression, trainer.finetune.text_classify)."""
    from trainer import finetune

    name = (loaded.state.get("config") or {}).get("task")
    if task_of(loaded) or not isinstance(name, str) or name not in finetune.names():
        return None
    task = finetune.for_family(name, loaded.family_name)
    return task if task.writes_labels else None


def _classify_by_writing(loaded: Loaded, task: Any, text: str, pair: str) -> dict[str, Any]:
    """The checkpoint generates its answer for "prefix text" (a pair as "sentence1: A sentence2: B"),
    greedily, as the run's validation did; the answer is read as the run read it (an output that
    is no label predicts nothing, one that is no number has no value). For classification each
    label's probability is that of the whole "label </s>" as the output, renormalised over the
    labels (text_classify.label_probabilities)."""
    from trainer.finetune import mixing, text_classify

    config = loaded.state.get("config") or {}
    regression = task.problem == heads.REGRESSION
    labels = [str(x) for x in config.get("label_words") or []]
    if not regression and len(labels) < 2:
        raise InferenceError("This T5 checkpoint does not record the labels it was fine-tuned to write (its run "
                             "is older than that); fine-tune it again to classify with it here.")
    tok, eos = loaded.tokenizer, int(loaded.tokenizer.sep_id)
    example = {"sentence1": text, "sentence2": pair} if pair else {"text": text}
    ids = tok.tok.encode(str(config.get("source_prefix") or "") + mixing.source_of(example),
                         add_special_tokens=False).ids
    max_length = _max_length(loaded)
    source = ids[: max_length - 1] + [eos]
    input_ids = torch.tensor([source], dtype=torch.long)
    mask = torch.ones_like(input_ids)
    model = loaded.model
    max_new = int(config.get("max_target_length") or 64)
    with loaded.lock, torch.inference_mode():
        generated = tok.decode(model.generate(input_ids, mask, max_new_tokens=max_new)[0, 1:].tolist()).strip()
        if not regression:
            targets = [tok.tok.encode(label, add_special_tokens=False).ids + [eos] for label in labels]
            probs = text_classify.label_probabilities(model, input_ids, mask, targets)
    out: dict[str, Any] = {"truncated": len(ids) + 1 > len(source), "max_length": max_length, "threshold": None,
                           "generated": generated}
    if regression:
        value, ok = text_classify.read_score(generated)
        out.update(problem_type="regression", labels=[], predicted=[], value=value if ok else None)
        return out
    forms = text_classify.label_forms(labels, lambda label: tok.decode(tok.tok.encode(
        label, add_special_tokens=False).ids))
    predicted = text_classify.read_label(generated, forms)
    ranked = sorted(zip(labels, probs), key=lambda x: -x[1])
    out.update(problem_type="single_label_classification", value=None,
               labels=[{"label": n, "probability": float(p)} for n, p in ranked],
               predicted=[] if predicted == text_classify.INVALID else [predicted])
    return out


# ---------------------------------------------------------------------------- choose
def choose(checkpoint_dir: str | Path, context: str, choices: Sequence[str]) -> dict[str, Any]:
    """-> {"choices": [{"index", "text", "probability", "score"}] in the order given, "labels": the
    same as {"label", "probability"} most likely first (what classify's bars draw), "predicted":
    [the most likely choice's text], "predicted_index", "truncated", "max_length"}. Each choice is
    read as the run fine-tuned it: start context delimiter choice extract."""
    from trainer.finetune.gpt1 import GPT1ChoiceCollator

    loaded = load(checkpoint_dir)
    _require(loaded, heads.MULTIPLE_CHOICE, "Choosing")
    context = nonempty(context, "Type a context (or question) to choose an answer for.")
    texts = [c.strip() for c in choices if isinstance(c, str) and c.strip()]
    if not 2 <= len(texts) <= MAX_CHOICES:
        raise InferenceError(f"Give from 2 to {MAX_CHOICES} choices (one per line); there "
                             f"{'is' if len(texts) == 1 else 'are'} {len(texts)}.")
    if len(set(texts)) != len(texts):
        raise InferenceError("Two of the choices are the same; give each choice once.")
    max_length = _max_length(loaded)
    if max_length < 5:
        raise InferenceError("This model reads too few tokens for a context and a choice.")
    collator = GPT1ChoiceCollator(loaded.tokenizer, max_length, int(loaded.model.config.vocab_size))
    batch = collator([{"context": context, "choices": texts, "label": 0}])
    first = len(collator.ids([context])[0])
    truncated = any(first + len(ids) + 3 > max_length for ids in collator.ids(texts))
    with loaded.lock, torch.inference_mode():
        scores = loaded.model(batch.input_ids, batch.attention_mask).logits[0].float()
    probs = torch.softmax(scores, -1).tolist()
    rows = [{"index": i, "text": t, "probability": float(p), "score": float(s)}
            for i, (t, p, s) in enumerate(zip(texts, probs, scores.tolist()))]
    best = max(range(len(rows)), key=lambda i: rows[i]["probability"])
    ranked = sorted(rows, key=lambda r: -r["probability"])
    return {"choices": rows, "labels": [{"label": r["text"], "probability": r["probability"]} for r in ranked],
            "predicted": [texts[best]], "predicted_index": best, "truncated": truncated, "max_length": max_length}


# ---------------------------------------------------------------------------- tag
def words_of(text: str) -> list[tuple[str, int, int]]:
    """The text's words and punctuation marks with their character spans."""
    return [(m.group(), m.start(), m.end()) for m in _WORD.finditer(text)]


def entities_of(words: Sequence[dict], text: str) -> list[dict]:
    """BIO tags -> entities {"type", "start", "end", "text", "score"} (conlleval's reading: an
    I-X after O or another type starts an entity, as the run's entity F1 counts them)."""
    out: list[dict] = []
    current: dict | None = None
    for w in words:
        tag = w["tag"]
        prefix, _, kind = tag.partition("-")
        if prefix in ("B", "I") and kind and not (prefix == "I" and current is not None and current["type"] == kind):
            current = {"type": kind, "start": w["start"], "end": w["end"], "scores": [w["probability"]]}
            out.append(current)
        elif prefix == "I" and current is not None:
            current["end"] = w["end"]
            current["scores"].append(w["probability"])
        else:
            current = None
    return [{"type": e["type"], "start": e["start"], "end": e["end"], "text": text[e["start"]:e["end"]],
             "score": sum(e["scores"]) / len(e["scores"])} for e in out]


def tag(checkpoint_dir: str | Path, text: str) -> dict[str, Any]:
    """-> {"words": [{"text", "start", "end", "tag", "probability"}], "entities": [...],
    "truncated": words past the model's length get no tag}. The text is split into words and
    punctuation; the first sub-token of each word carries its tag, as in training."""
    loaded = load(checkpoint_dir)
    spec = _require(loaded, heads.TOKEN_CLASSIFICATION, "Tagging")
    text = nonempty(text, "Type a sentence to tag.")
    words = words_of(text)
    tok = _tokenizer(loaded, _max_length(loaded))
    enc = tok.encode([w for w, _, _ in words], is_pretokenized=True)
    ids, mask, types = _tensors([enc], int(loaded.tokenizer.pad_id))
    model = loaded.model
    with loaded.lock, torch.inference_mode():
        probs = torch.softmax(model(ids, mask, _token_types(model, types)).logits[0].float(), -1)
    first: dict[int, int] = {}
    for t, w in enumerate(enc.word_ids):
        if w is not None and w not in first:
            first[w] = t
    tagged = []
    for i, (word, start, end) in enumerate(words):
        if i not in first:
            break  # cut off by the length limit
        p, label = probs[first[i]].max(-1)
        tagged.append({"text": word, "start": start, "end": end, "tag": spec.id2label[int(label)],
                       "probability": float(p)})
    return {"words": tagged, "entities": entities_of(tagged, text), "truncated": len(tagged) < len(words)}


# ---------------------------------------------------------------------------- extractive QA
def answer(checkpoint_dir: str | Path, question: str, context: str, *, n_best: int = 5) -> dict[str, Any]:
    """-> {"answer": {"text", "start", "end", "score"} (text "" when the model's "no answer" score
    beats every span by more than the run's threshold), "n_best": [{"text", "start", "end",
    "score"}] best first, "null_score", "windows"}. Scores are start + end logits."""
    from trainer.finetune.qa import CLS_POSITION, QACollator, WindowLogits, predict_answer

    loaded = load(checkpoint_dir)
    _require(loaded, heads.QUESTION_ANSWERING, "Question answering")
    question = nonempty(question, "Type a question.")
    context = nonempty(context, "Paste a context that may hold the answer.")
    if not 1 <= int(n_best) <= MAX_N_BEST:
        raise InferenceError(f"n_best must be between 1 and {MAX_N_BEST}.")
    config = loaded.state.get("config", {})
    max_answer_length = int(config.get("max_answer_length") or 30)
    threshold = float(config.get("null_score_threshold") or 0.0)
    collate = QACollator(loaded.tokenizer, _max_length(loaded), doc_stride=int(config.get("doc_stride") or 0))
    batch = collate([{"question": question, "context": context}])
    model = loaded.model
    with loaded.lock, torch.inference_mode():
        out = model(batch.input_ids, batch.attention_mask, _token_types(model, batch.token_type_ids))
    starts, ends = out.start_logits.float().numpy(), out.end_logits.float().numpy()
    windows = [WindowLogits(starts[r], ends[r], batch.offsets[r]) for r in range(len(batch.offsets))]
    best = predict_answer(context, windows, n_best=20, max_answer_length=max_answer_length,
                          null_score_threshold=threshold, version_2=True)
    candidates: dict[tuple[int, int], float] = {}
    for w in windows:
        n = len(w.offsets)
        order_s = sorted(range(n), key=lambda i: -w.start_logits[i])[:20]
        order_e = sorted(range(n), key=lambda i: -w.end_logits[i])[:20]
        for i in order_s:
            for j in order_e:
                if w.offsets[i] is None or w.offsets[j] is None or not 0 <= j - i < max_answer_length:
                    continue
                span = (w.offsets[i][0], w.offsets[j][1])
                score = float(w.start_logits[i] + w.end_logits[j])
                candidates[span] = max(score, candidates.get(span, -math.inf))
    ranked = sorted(candidates.items(), key=lambda kv: -kv[1])
    listed = []
    for (begin, end), score in ranked:
        text = context[begin:end].strip()
        if text and all(c["text"] != text for c in listed):
            listed.append({"text": text, "start": begin + (len(context[begin:end]) - len(context[begin:end].lstrip())),
                           "end": begin + len(context[begin:end].rstrip()), "score": score})
        if len(listed) == n_best:
            break
    null = min(float(w.start_logits[CLS_POSITION] + w.end_logits[CLS_POSITION]) for w in windows)
    return {"answer": {"text": best.text, "start": best.start, "end": best.end,
                       "score": best.score if math.isfinite(best.score) else None},
            "n_best": listed, "null_score": null, "threshold": threshold, "windows": len(windows)}


# ---------------------------------------------------------------------------- sentence embeddings
def _encoder(loaded: Loaded) -> Any:
    """The TransformerEncoder of any encoder checkpoint (ELECTRA: its discriminator's)."""
    model = loaded.model
    source = getattr(model, "discriminator", None) or model
    backbone = getattr(source, "backbone", None)
    if backbone is None or not hasattr(backbone, "encode"):
        raise InferenceError(f"Sentence embeddings come from an encoder (BERT, RoBERTa, ALBERT, ELECTRA, "
                             f"DistilBERT, SpanBERT, UniLM or an imported one); this checkpoint holds a "
                             f"{loaded.label} model.")
    return backbone


def sentence_vectors(loaded: Loaded, texts: Sequence[str], *, pooling: str = "mean") -> tuple[torch.Tensor, list[bool]]:
    """(unit-length sentence vectors (N, H) of an encoder checkpoint, which texts were cut to the
    model's length). mean: the average of the last layer's token vectors (special tokens included,
    as sentence-transformers' mean pooling does); cls: the first token's vector."""
    if pooling not in POOLINGS:
        raise InferenceError(f"pooling must be one of {', '.join(POOLINGS)}, not {pooling!r}.")
    encoder = _encoder(loaded)
    tok = _tokenizer(loaded, _max_length(loaded))
    encodings = tok.encode_batch(list(texts))
    truncated = [len(loaded.tokenizer.tok.encode(t).ids) > len(e.ids) for t, e in zip(texts, encodings)]
    ids, mask, types = _tensors(encodings, int(loaded.tokenizer.pad_id))
    with loaded.lock, torch.inference_mode():
        hidden = encoder.encode(ids, mask, _token_types(encoder, types)).float()  # (N, T, H)
        if pooling == "cls":
            vectors = hidden[:, 0]
        else:
            weights = mask.unsqueeze(-1).float()
            vectors = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)
        unit = torch.nn.functional.normalize(vectors, dim=-1)
    return unit, truncated


def embed(checkpoint_dir: str | Path, sentences: Sequence[str], *, pooling: str = "mean") -> dict[str, Any]:
    """-> {"pooling", "sentences", "similarity": (N, N) cosines, "dimensions", "truncated": [bool]}
    (sentence_vectors says how the sentences become vectors)."""
    if pooling not in POOLINGS:
        raise InferenceError(f"pooling must be one of {', '.join(POOLINGS)}, not {pooling!r}.")
    texts = [s.strip() for s in sentences if isinstance(s, str) and s.strip()]
    if not 2 <= len(texts) <= MAX_SENTENCES:
        raise InferenceError(f"Give from 2 to {MAX_SENTENCES} sentences (one per line) to compare; "
                             f"there {'is' if len(texts) == 1 else 'are'} {len(texts)}.")
    unit, truncated = sentence_vectors(load(checkpoint_dir), texts, pooling=pooling)
    similarity = (unit @ unit.T).clamp(-1.0, 1.0)
    return {"pooling": pooling, "sentences": texts, "similarity": [[float(x) for x in row] for row in similarity],
            "dimensions": int(unit.shape[-1]), "truncated": truncated}
