"""Baselines of a stored labelled dataset: what a model must beat before its score means anything.

    compute(data_dir) -> dict         every baseline of the dataset's task, fit on train and scored
                                      on validation and test with the fine-tune run's own metrics
    compare(baselines, test=..., best_valid=...) -> dict | None
                                      whether a run's score beats the lexical baseline

A *trivial* baseline ignores the input (the majority class, the train mean); a *lexical* one reads
only its words (a bag-of-words logistic regression, ridge, the most frequent tag of each word, the
context sentence sharing most words with the question). A fine-tuned model that does not beat the
lexical baseline has learned nothing its words alone do not give away, which usually means its
checkpoint gave it nothing to build on.

Each fine-tuning task declares its own (Task.baselines, Task.references, Task.no_baseline in
trainer.finetune.REGISTRY); the built-in ones:
- classification: majority class (trivial); TF-IDF of words and word pairs + logistic regression (lexical)
- regression: the train mean (trivial); TF-IDF + ridge (lexical)
- multilabel: the labels on more than half of train's examples (trivial); TF-IDF + one logistic
  regression per label (lexical)
- token_classification: each word's most frequent tag in train, else the most frequent tag (lexical)
- extractive_qa: the context's first sentence (trivial); the context sentence sharing the most
  words with the question (lexical)
- multiple_choice: the position most often right in train (trivial); the choice sharing the most
  words with the context and question (lexical)
- text_to_text: the input copied as the output (trivial)
- sft: none; it is scored by perplexity, which takes a language model.

The scikit-learn models are fit with fixed settings (no tuning on validation) so the numbers are
reproducible; train is cut to its first MAX_TRAIN examples. No torch here.
"""
from __future__ import annotations

import math
import re
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.finetune import metrics as metric_fns

VERSION = 1
MAX_TRAIN = 50_000  # train examples the scikit-learn models are fit on, at most
EVAL_SPLITS = ("validation", "test")
TRIVIAL, LEXICAL = "trivial", "lexical"
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")

# ---------------------------------------------------------------------------- inputs
def sequence_text(example: dict) -> str:
    """One text, or a pair's two texts joined by a space: what the bag of words reads."""
    if "text" in example:
        return str(example["text"])
    return f"{example.get('sentence1', '')} {example.get('sentence2', '')}"


def words(text: str) -> list[str]:
    """SQuAD's normalisation (lower case, no punctuation or articles), split on blanks."""
    return metric_fns.normalize_answer(text).split()


def tfidf():
    """The bag of words every lexical baseline reads: TF-IDF of words and word pairs."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    return TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True)


# ---------------------------------------------------------------------------- the baselines
# Each baseline: (name, label, kind, fit) where fit(train examples) returns predict(examples) ->
# predictions in the form the task's metric function takes, and refs(examples) the references.

def _majority_class(train: Sequence[dict]):
    top = Counter(str(ex["label"]) for ex in train).most_common(1)[0][0]
    return lambda examples: [top] * len(examples)


def _bow_logistic(train: Sequence[dict]):
    from sklearn.linear_model import LogisticRegression

    labels = [str(ex["label"]) for ex in train]
    if len(set(labels)) < 2:
        return None  # one class in train: the majority class already is this baseline
    vectorizer = tfidf()
    features = vectorizer.fit_transform([sequence_text(ex) for ex in train])
    model = LogisticRegression(max_iter=1000).fit(features, labels)
    return lambda examples: [str(p) for p in model.predict(vectorizer.transform([sequence_text(ex)
                                                                                   for ex in examples]))]


def _train_mean(train: Sequence[dict]):
    mean = sum(float(ex["label"]) for ex in train) / len(train)
    return lambda examples: [mean] * len(examples)


def _bow_ridge(train: Sequence[dict]):
    from sklearn.linear_model import Ridge

    vectorizer = tfidf()
    features = vectorizer.fit_transform([sequence_text(ex) for ex in train])
    model = Ridge(alpha=1.0).fit(features, [float(ex["label"]) for ex in train])
    return lambda examples: [float(p) for p in model.predict(vectorizer.transform([sequence_text(ex)
                                                                                     for ex in examples]))]


def _frequent_labels(train: Sequence[dict]):
    counts = Counter(label for ex in train for label in set(ex["label"]))
    chosen = {label for label, n in counts.items() if n * 2 > len(train)}
    return lambda examples: [set(chosen) for _ in examples]


def _bow_one_vs_rest(train: Sequence[dict]):
    from sklearn.linear_model import LogisticRegression
    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.preprocessing import MultiLabelBinarizer

    binarizer = MultiLabelBinarizer()
    targets = binarizer.fit_transform([list(ex["label"]) for ex in train])
    if targets.shape[1] == 0:
        return None
    vectorizer = tfidf()
    features = vectorizer.fit_transform([sequence_text(ex) for ex in train])
    model = OneVsRestClassifier(LogisticRegression(max_iter=1000)).fit(features, targets)

    def predict(examples):
        rows = model.predict(vectorizer.transform([sequence_text(ex) for ex in examples]))
        return [set(labels) for labels in binarizer.inverse_transform(rows)]
    return predict


def _tag_per_word(train: Sequence[dict]):
    per_word: dict[str, Counter] = {}
    overall = Counter()
    for ex in train:
        for token, tag in zip(ex["tokens"], ex["tags"]):
            per_word.setdefault(token, Counter())[tag] += 1
            overall[tag] += 1
    fallback = "O" if "O" in overall else overall.most_common(1)[0][0]
    table = {token: counts.most_common(1)[0][0] for token, counts in per_word.items()}
    return lambda examples: [[table.get(token, fallback) for token in ex["tokens"]] for ex in examples]


def sentences(text: str) -> list[str]:
    """A context cut after each . ! or ? followed by a blank (never empty: the text itself)."""
    parts = [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]
    return parts or [text.strip()]


def _first_sentence(train: Sequence[dict]):
    return lambda examples: [sentences(ex["context"])[0] for ex in examples]


def overlap_pick(query: str, candidates: Sequence[str]) -> int:
    """The index of the candidate sharing the most distinct words with `query` (the first on a tie)."""
    wanted = set(words(query))
    scores = [len(wanted & set(words(c))) for c in candidates]
    return max(range(len(candidates)), key=lambda i: (scores[i], -i))


def _overlap_sentence(train: Sequence[dict]):
    def predict(examples):
        out = []
        for ex in examples:
            found = sentences(ex["context"])
            out.append(found[overlap_pick(ex["question"], found)])
        return out
    return predict


def _frequent_position(train: Sequence[dict]):
    top = Counter(int(ex["label"]) for ex in train).most_common(1)[0][0]
    return lambda examples: [min(top, len(ex["choices"]) - 1) for ex in examples]


def _overlap_choice(train: Sequence[dict]):
    return lambda examples: [overlap_pick(f"{ex.get('context', '')} {ex.get('question', '')}", ex["choices"])
                             for ex in examples]


def _copy_input(train: Sequence[dict]):
    return lambda examples: [str(ex["input"]) for ex in examples]


@dataclass(frozen=True)
class Baseline:
    """One baseline a task declares (Task.baselines): `fit(train)` gives predict(examples), or None
    when the training split gives it nothing to learn from."""
    name: str
    label: str
    kind: str  # TRIVIAL or LEXICAL
    fit: Callable[[Sequence[dict]], Callable | None]


# What each task declares (Task.baselines), and the gold answers its metric scores them against
# (Task.references).
CLASSIFICATION = (Baseline("majority", "Majority class", TRIVIAL, _majority_class),
                  Baseline("bow_logistic", "Bag of words + logistic regression", LEXICAL, _bow_logistic))
REGRESSION = (Baseline("train_mean", "Train mean", TRIVIAL, _train_mean),
              Baseline("bow_ridge", "Bag of words + ridge regression", LEXICAL, _bow_ridge))
MULTILABEL = (Baseline("frequent_labels", "Labels on most train examples", TRIVIAL, _frequent_labels),
              Baseline("bow_logistic", "Bag of words + logistic regression per label", LEXICAL, _bow_one_vs_rest))
TOKEN_CLASSIFICATION = (Baseline("tag_per_word", "Most frequent tag of each word", LEXICAL, _tag_per_word),)
EXTRACTIVE_QA = (Baseline("first_sentence", "First sentence of the context", TRIVIAL, _first_sentence),
                 Baseline("overlap_sentence", "Context sentence sharing most words with the question", LEXICAL,
                          _overlap_sentence))
MULTIPLE_CHOICE = (Baseline("frequent_position", "Position most often right", TRIVIAL, _frequent_position),
                   Baseline("overlap_choice", "Choice sharing most words with the question", LEXICAL, _overlap_choice))
TEXT_TO_TEXT = (Baseline("copy_input", "The input copied", TRIVIAL, _copy_input),)


def class_references(examples: Sequence[dict]) -> list:
    return [str(ex["label"]) for ex in examples]


def score_references(examples: Sequence[dict]) -> list:
    return [float(ex["label"]) for ex in examples]


def label_set_references(examples: Sequence[dict]) -> list:
    return [set(ex["label"]) for ex in examples]


def tag_references(examples: Sequence[dict]) -> list:
    return [list(ex["tags"]) for ex in examples]


def answer_references(examples: Sequence[dict]) -> list:
    return [[a["text"] for a in ex.get("answers") or ()] for ex in examples]


def choice_references(examples: Sequence[dict]) -> list:
    return [int(ex["label"]) for ex in examples]


def target_references(examples: Sequence[dict]) -> list:
    return [str(ex["target"]) for ex in examples]


# ---------------------------------------------------------------------------- computing
def _metric_key(task: str, data_dir: Path) -> tuple[Callable[..., dict], str, bool]:
    """(the metric function, its primary key, higher is better) of the run that fine-tunes on `task`
    with the dataset in `data_dir` (the task picks its scoring from it: SQuAD 2.0 or not)."""
    from trainer import finetune

    metrics = finetune.metrics_for(task, dataset=data_dir)
    return metrics.compute, metrics.primary, metrics.higher_is_better


def _clean(values: dict[str, float]) -> dict[str, float]:
    return {k: float(v) for k, v in values.items() if isinstance(v, (int, float)) and math.isfinite(v)}


def _declared(task: str):
    """The registry's Task of that name (trainer.finetune.REGISTRY), which declares the baselines; None
    for a name nobody registered."""
    from trainer import finetune

    return finetune.get(task) if task in finetune.REGISTRY else None


def compute(data_dir: str | Path) -> dict[str, Any]:
    """Every baseline of the stored dataset in `data_dir` (trainer.prep.labelled's layout):

        {"version", "task", "metric" (the primary), "higher_is_better",
         "baselines": [{"name", "label", "kind": "trivial" | "lexical",
                        "validation": {metric: value} | None, "test": {...} | None}],
         "note": a sentence when the task has none, or when one could not be fit}

    A split without examples scores None. DatasetError when the dataset cannot be read."""
    from trainer.prep.labelled.store import iter_examples, read_meta

    data_dir = Path(data_dir)
    task = str(read_meta(data_dir).get("task", ""))
    out: dict[str, Any] = {"version": VERSION, "task": task, "metric": "", "higher_is_better": True,
                           "baselines": [], "note": ""}
    declared = _declared(task)
    if declared is None or not declared.baselines:
        out["note"] = (declared.no_baseline if declared is not None else "") or f"The task {task!r} has no baseline."
        return out
    score, primary, higher = _metric_key(task, data_dir)
    out.update(metric=primary, higher_is_better=higher)
    train = []
    for ex in iter_examples(data_dir, "train"):
        if len(train) >= MAX_TRAIN:
            break
        train.append(ex)
    splits = {split: list(iter_examples(data_dir, split)) for split in EVAL_SPLITS}
    skipped = []
    from threadpoolctl import threadpool_limits  # scikit-learn's own dependency

    # One BLAS thread: these small sparse fits run 10x slower when the threads fight a busy
    # machine's cores (a worker beside a training run) than on one core.
    with threadpool_limits(limits=1), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for baseline in declared.baselines:
            name, label, kind = baseline.name, baseline.label, baseline.kind
            try:
                predict = baseline.fit(train) if train else None
            except ValueError:  # scikit-learn's: no word in any text (an empty vocabulary)
                predict = None
            if predict is None:
                skipped.append(label.lower())
                continue
            row: dict[str, Any] = {"name": name, "label": label, "kind": kind}
            for split, examples in splits.items():
                row[split] = _clean(score(predict(examples), declared.references(examples))) if examples else None
            out["baselines"].append(row)
    if skipped:
        out["note"] = (f"Not computed: {', '.join(skipped)} (the training split gives it nothing to learn from, "
                       "such as a single class or no words).")
    return out


# ---------------------------------------------------------------------------- judging a run
def lexical(baselines: dict | None) -> dict | None:
    """The dataset's lexical baseline row (None when it has none)."""
    rows = (baselines or {}).get("baselines") or []
    return next((row for row in rows if row.get("kind") == LEXICAL), None)


def compare(baselines: dict | None, *, test: dict | None = None, best_valid: float | None = None) -> dict | None:
    """A run's primary metric against the lexical baseline: on test when the run scored its test
    split, else its best validation value against the baseline's validation score.

        {"baseline": label, "metric", "split": "test" | "validation", "run": value,
         "baseline_value": value, "beats": bool, "higher_is_better"}

    None when there is nothing to compare (no lexical baseline, no score on that split)."""
    row = lexical(baselines)
    if row is None:
        return None
    metric, higher = baselines.get("metric") or "", bool(baselines.get("higher_is_better", True))
    value, split = None, ""
    if test and isinstance(test.get(metric), (int, float)):
        value, split = float(test[metric]), "test"
    elif isinstance(best_valid, (int, float)):
        value, split = float(best_valid), "validation"
    reference = (row.get(split) or {}).get(metric) if split else None
    if value is None or not isinstance(reference, (int, float)):
        return None
    beats = value > reference if higher else value < reference
    return {"baseline": row.get("label", ""), "metric": metric, "split": split, "run": value,
            "baseline_value": float(reference), "beats": beats, "higher_is_better": higher}
