"""GPT-3's zero-, one- and few-shot evaluation (Brown et al. 2020) of a causal checkpoint on a
labelled classification dataset.

A prompt is k demonstrations drawn from the training split, each the template filled with its
text and label, then the query filled with its text and cut just before its label:

    template  "Text: {text}\\nLabel: {label}"    placeholders: {text}, {sentence1}, {sentence2}, {label}
    prompt    demo_1 + separator + ... + demo_k + separator + "Text: <query>\\nLabel:"

Each label is scored by the log-likelihood the model gives its tokens after the prompt (the
whitespace before {label} goes with the label, as byte-level BPE tokenises " positive"), by
default divided by its number of tokens (length-normalised); the prediction is the label with
the highest score. `evaluate` reports accuracy for k = 0 .. k_max on the same queries, each
query's demonstrations the first k of one seeded draw, so a larger k adds demonstrations.
`score_prompt` is the explorer's prompt builder: the exact prompt and each label's score.
Every problem the user can fix raises InferenceError with a sentence.
"""
from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any, Sequence

import torch

from trainer.errors import DatasetError, InferenceError
from trainer.inference.loading import Loaded, load
from trainer.prep.labelled.tasks import TASKS

DEFAULT_TEMPLATE = "Text: {text}\nLabel: {label}"
DEFAULT_SEPARATOR = "\n\n"
PLACEHOLDERS = ("{text}", "{sentence1}", "{sentence2}", "{label}")
MAX_SHOTS = 32
MAX_QUERIES = 1000
# The labelled-dataset task it reads (texts with one class each): the one its TaskSpec marks in_context.
DATASET_TASK = next(spec.name for spec in TASKS.values() if spec.in_context)
_FIELD = re.compile(r"\{(text|sentence1|sentence2)\}")


def fill(template: str, example: dict[str, Any], label: str | None) -> str:
    """The template with the example's fields in; label None cuts it just before {label}. One
    pass per side of {label}, so a text that itself holds "{text}" stays as it is."""
    check_template(template)
    text = example.get("text")
    if text is None:
        text = f"{example.get('sentence1', '')} {example.get('sentence2', '')}".strip()
    values = {"text": str(text), "sentence1": str(example.get("sentence1", text)),
              "sentence2": str(example.get("sentence2", ""))}
    head, _, tail = template.partition("{label}")
    head, tail = (_FIELD.sub(lambda m: values[m.group(1)], part) for part in (head, tail))
    return head if label is None else head + str(label) + tail


def check_template(template: Any) -> str:
    if not isinstance(template, str) or not template.strip():
        raise InferenceError("Write a template, e.g. \"Text: {text}\\nLabel: {label}\".")
    if template.count("{label}") != 1:
        raise InferenceError("The template must hold {label} exactly once: the model is scored on the label there.")
    if not any(p in template.partition("{label}")[0] for p in ("{text}", "{sentence1}", "{sentence2}")):
        raise InferenceError("The template must put {text} (or {sentence1} / {sentence2}) before {label}, so the "
                             "model reads the text before it is asked for the label.")
    return template


def build_prompt(demonstrations: Sequence[dict[str, Any]], query: dict[str, Any], *, template: str = DEFAULT_TEMPLATE,
                 separator: str = DEFAULT_SEPARATOR) -> tuple[str, str]:
    """(prompt, gap): the demonstrations filled in with their labels and the query cut before its
    label, joined by `separator`, with the whitespace before the label moved into `gap` (which
    each scored label is prefixed with)."""
    pieces = [fill(template, d, d["label"]) for d in demonstrations] + [fill(template, query, None)]
    prompt = separator.join(pieces)
    stripped = prompt.rstrip()
    return stripped, prompt[len(stripped):]


def _causal(loaded: Loaded) -> None:
    if not loaded.family.causal_lm:
        raise InferenceError(f"In-context evaluation scores labels with a causal language model; a {loaded.label} "
                             f"checkpoint is not one. Pick a GPT run's checkpoint or an imported GPT-2.")


@torch.inference_mode()
def score_labels(loaded: Loaded, prompt: str, gap: str, labels: Sequence[str], *,
                 normalise: bool = True) -> list[dict[str, Any]]:
    """Per label: its tokens, the sum of their log-probabilities after the prompt and the score
    (that sum divided by the number of tokens when `normalise`). The prompt is cut from the
    left when prompt and label do not fit the model's positions."""
    tok = loaded.tokenizer
    context = tok.encode(prompt)
    if not context:
        raise InferenceError("The prompt is empty; the template must put some text before {label}.")
    out = []
    for label in labels:
        cont = tok.encode(gap + str(label))
        if not cont:
            raise InferenceError(f"The label {label!r} has no tokens to score.")
        room = loaded.max_positions - len(cont)
        if room < 1:
            raise InferenceError(f"The label {label!r} is longer than the model's {loaded.max_positions} positions.")
        ids = (context[-room:] + cont)
        with loaded.lock:
            logits = loaded.model(torch.tensor([ids])).logits[0].float()  # (T, V)
        logp = torch.log_softmax(logits[:-1], dim=-1)  # position t predicts token t + 1
        start = len(ids) - len(cont)
        total = float(sum(logp[start - 1 + i, t] for i, t in enumerate(cont)))
        out.append({"label": str(label), "tokens": [tok.id_to_token(t) for t in cont], "logprob": total,
                    "score": total / len(cont) if normalise else total})
    return out


def predict(scores: list[dict[str, Any]]) -> str:
    return max(scores, key=lambda s: s["score"])["label"]


def _dataset(dataset_dir: str | Path) -> tuple[list[str], list[dict], list[dict]]:
    """(labels, training examples, validation examples, or test ones when there is no validation split)."""
    from trainer.prep.labelled import store

    try:
        meta = store.read_meta(Path(dataset_dir))
        if meta.get("task") != DATASET_TASK:
            raise InferenceError("In-context evaluation needs a classification dataset (texts with one label each).")
        train = list(store.iter_examples(Path(dataset_dir), "train"))
        sizes = meta.get("sizes") or {}
        split = "validation" if sizes.get("validation") or not sizes.get("test") else "test"
        held = list(store.iter_examples(Path(dataset_dir), split))
    except (DatasetError, OSError) as e:
        raise InferenceError(f"The dataset cannot be read: {e}") from None
    labels = [str(x) for x in meta.get("labels") or sorted({str(e["label"]) for e in train})]
    if not held:
        raise InferenceError("The dataset has no validation or test examples to evaluate on.")
    return labels, train, held


def demonstrations(train: Sequence[dict], k: int, seed: int, index: int) -> list[dict]:
    """The first k of query `index`'s seeded shuffle of the training examples (so the k + 1
    demonstrations of a query are its k and one more)."""
    order = list(range(len(train)))
    random.Random(f"{seed}:{index}").shuffle(order)
    return [train[j] for j in order[:k]]


def _whole(value: Any, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InferenceError(f"{name} must be a whole number from {low} to {high}, not {value!r}.")
    return value


def evaluate(checkpoint_dir: str | Path, dataset_dir: str | Path, *, k_max: int = 4, seed: int = 0,
             n_queries: int = 100, template: str = DEFAULT_TEMPLATE, separator: str = DEFAULT_SEPARATOR,
             normalise: bool = True) -> dict[str, Any]:
    """Accuracy against k = 0 .. k_max on the first n_queries held-out examples ->
    {"k": [0, ...], "accuracy": [...], "n_queries", "labels", "template", "separator", "normalise",
    "seed", "first_prompt": the k_max prompt of the first query}."""
    k_max = _whole(k_max, "k_max", 0, MAX_SHOTS)
    n_queries = _whole(n_queries, "n_queries", 1, MAX_QUERIES)
    check_template(template)
    loaded = load(checkpoint_dir)
    _causal(loaded)
    labels, train, held = _dataset(dataset_dir)
    queries = held[:n_queries]
    hits = [0] * (k_max + 1)
    first_prompt = ""
    for i, query in enumerate(queries):
        draw = demonstrations(train, k_max, seed, i)  # the first k of it for each k
        for k in range(k_max + 1):
            prompt, gap = build_prompt(draw[:k], query, template=template, separator=separator)
            if i == 0 and k == k_max:
                first_prompt = prompt
            hits[k] += predict(score_labels(loaded, prompt, gap, labels, normalise=normalise)) == str(query["label"])
    return {"k": list(range(k_max + 1)), "accuracy": [h / len(queries) for h in hits], "n_queries": len(queries),
            "labels": labels, "template": template, "separator": separator, "normalise": normalise, "seed": seed,
            "first_prompt": first_prompt}


def score_prompt(checkpoint_dir: str | Path, dataset_dir: str | Path, *, index: int = 0, k: int = 2, seed: int = 0,
                 template: str = DEFAULT_TEMPLATE, separator: str = DEFAULT_SEPARATOR,
                 normalise: bool = True) -> dict[str, Any]:
    """The prompt builder: held-out example `index` with k seeded demonstrations -> {"prompt" (the
    exact text the model reads, before the label), "gap", "scores": per label (its tokens,
    log-likelihood, score), "predicted", "gold", "k", "index"}."""
    k = _whole(k, "k", 0, MAX_SHOTS)
    check_template(template)
    loaded = load(checkpoint_dir)
    _causal(loaded)
    labels, train, held = _dataset(dataset_dir)
    index = _whole(index, "index", 0, len(held) - 1)
    prompt, gap = build_prompt(demonstrations(train, k, seed, index), held[index], template=template,
                               separator=separator)
    scores = score_labels(loaded, prompt, gap, labels, normalise=normalise)
    return {"prompt": prompt, "gap": gap, "scores": scores, "predicted": predict(scores),
            "gold": str(held[index]["label"]), "k": k, "index": index}
