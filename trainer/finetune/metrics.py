"""Fine-tuning metrics: one function per task type, from plain Python lists to a flat dict of floats.

    classification_metrics(predictions, references)         accuracy, f1_macro, f1_micro, mcc
    multilabel_metrics(predictions, references)             accuracy (exact set), f1_micro, f1_macro
    multiple_choice_metrics(predictions, references)        accuracy (the right choice's index picked)
    regression_metrics(predictions, references)             pearson, spearman, mse
    token_classification_metrics(predictions, references, *, strict=False)
                                                            entity_precision, entity_recall, entity_f1
    extractive_qa_metrics(predictions, references, *, version_2=False)
                                                            exact_match, f1 (+ has_ans_*, no_ans_* in v2)
    summarization_metrics(predictions, references, *, use_stemmer=True)   rouge_l
    translation_metrics(predictions, references, *, tokenize="13a")       bleu
    sft_metrics(nll_sums, token_counts=None)                perplexity
    text_to_text_metrics(predictions, references, *, lowercase=False)
                                                            rouge1, rouge2, rouge_l, bleu, exact_match
    confusion_matrix(predictions, references, labels)       rows: reference label, columns: predicted
    per_class_table(predictions, references, labels=None)   [{label, precision, recall, f1, support}, ...]
    METRICS                                                 task type -> TaskMetrics (compute, primary, charts)

Arguments always come as (predictions, references), the model's output first. The numbers are
the reference libraries' own: scikit-learn, scipy, seqeval, rouge-score and sacrebleu, imported
inside the functions so that reading `METRICS` (the web app, the launch form) loads none of them,
and no function here imports torch. SQuAD's exact match and F1 are written here, after the rules of
the official v1.1 and v2.0 evaluation scripts.

Scales: every metric bounded by 1 is a fraction (accuracy 0.91, not 91; MCC and the
correlations in -1..1), SQuAD's included (its script prints 100x these); BLEU is on sacrebleu's
0..100 scale, the one every BLEU is quoted on; perplexity is exp(mean token NLL).

Degenerate inputs:
- No example at all, lists of unequal length, a malformed tag or a non-finite number: ValueError
  with a sentence saying which.
- One class only (classification): MCC 0.0, as scikit-learn gives, without its warning; macro F1
  over the one class.
- Correlations: Pearson and Spearman are 0.0 when either list is constant or has fewer than two
  values, where scipy gives nan with a ConstantInputWarning. A constant prediction carries no
  ranking, so 0.0 (no correlation) is its honest score; nan would not survive JSON, would break
  "higher is better" in early stopping, and would sort arbitrarily on a leaderboard.
- Precision, recall or F1 whose denominator is zero count 0.0 (scikit-learn's and seqeval's
  zero_division=0), silently: no entity predicted gives entity precision 0.0.
- Perplexity is capped at exp(50), as the training engine caps its own, so it stays finite.
"""
from __future__ import annotations

import math
import re
import string
import warnings
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from trainer.charts import BLUE, GREEN, ORANGE, VALID, ChartSpec, MetricSpec, StatSpec

PURPLE = "#8e44ad"
PERPLEXITY_CAP = 50.0  # mean NLL above which the perplexity stops growing (trainer/training/engine.py's cap)


# ---------------------------------------------------------------------------------- input checks
def _check_pairs(predictions: Sequence, references: Sequence, what: str) -> None:
    """Both lists non-empty and of one length."""
    for name, values in (("predictions", predictions), ("references", references)):
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
            raise ValueError(f"{what}: {name} must be a list, not {type(values).__name__}.")
    if not references:
        raise ValueError(f"{what}: there are no examples (the lists are empty).")
    if len(predictions) != len(references):
        raise ValueError(f"{what}: {len(predictions)} predictions for {len(references)} references; "
                         "they must pair up one to one.")


def _finite(values: Sequence, name: str, what: str) -> list[float]:
    out = []
    for i, v in enumerate(values):
        try:
            x = float(v)
        except (TypeError, ValueError):
            raise ValueError(f"{what}: {name}[{i}] is {v!r}, not a number.") from None
        if not math.isfinite(x):
            raise ValueError(f"{what}: {name}[{i}] is {x}; every value must be finite.")
        out.append(x)
    return out


# -------------------------------------------------------------------------------- classification
def classification_metrics(predictions: Sequence[Hashable], references: Sequence[Hashable], *,
                           labels: Sequence[Hashable] | None = None) -> dict[str, float]:
    """Single-label classification (one sentence or a pair; labels as ints or strings, T5's
    text labels too): accuracy, macro and micro F1 over the labels seen in either list (or over
    `labels`: a prediction outside them, such as T5's output that is no label, is then wrong
    without being a class of its own), and the Matthews correlation coefficient (CoLA's metric;
    0.0 when one class is all there is)."""
    _check_pairs(predictions, references, "classification")
    from sklearn import metrics as skm

    over = {} if labels is None else {"labels": list(labels)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {
            "accuracy": float(skm.accuracy_score(references, predictions)),
            "f1_macro": float(skm.f1_score(references, predictions, average="macro", zero_division=0, **over)),
            "f1_micro": float(skm.f1_score(references, predictions, average="micro", zero_division=0, **over)),
            "mcc": float(skm.matthews_corrcoef(references, predictions)),
        }


def multiple_choice_metrics(predictions: Sequence[int], references: Sequence[int]) -> dict[str, float]:
    """Multiple choice (each example's picked choice and the right one, as indices): accuracy,
    what GPT-1 reports on RACE and the Story Cloze Test. F1 over choice positions would mean nothing."""
    _check_pairs(predictions, references, "multiple choice")
    return {"accuracy": sum(int(p) == int(r) for p, r in zip(predictions, references)) / len(references)}


def _label_sets(rows: Sequence, name: str) -> list[list[Hashable]]:
    out = []
    for i, row in enumerate(rows):
        if isinstance(row, (str, bytes)) or not isinstance(row, Iterable):
            raise ValueError(f"multi-label classification: {name}[{i}] is {row!r}; each example's labels "
                             "must be a list or set of labels (an empty one for none).")
        out.append(list(dict.fromkeys(row)))
    return out


def multilabel_metrics(predictions: Sequence[Iterable[Hashable]],
                       references: Sequence[Iterable[Hashable]]) -> dict[str, float]:
    """Multi-label classification, each example's labels a list or set (empty for none):
    "accuracy" is the share of examples whose predicted set equals the reference set exactly
    (scikit-learn's subset accuracy); micro and macro F1 over the labels seen in either list.
    With no label anywhere every set matches: accuracy 1.0, both F1 0.0."""
    _check_pairs(predictions, references, "multi-label classification")
    pred_sets, ref_sets = _label_sets(predictions, "predictions"), _label_sets(references, "references")
    classes = list(dict.fromkeys(label for row in (*ref_sets, *pred_sets) for label in row))
    if not classes:
        return {"accuracy": 1.0, "f1_micro": 0.0, "f1_macro": 0.0}
    from sklearn import metrics as skm
    from sklearn.preprocessing import MultiLabelBinarizer

    binarizer = MultiLabelBinarizer(classes=classes)
    y_true, y_pred = binarizer.fit_transform(ref_sets), binarizer.transform(pred_sets)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {
            "accuracy": float(skm.accuracy_score(y_true, y_pred)),
            "f1_micro": float(skm.f1_score(y_true, y_pred, average="micro", zero_division=0)),
            "f1_macro": float(skm.f1_score(y_true, y_pred, average="macro", zero_division=0)),
        }


def _check_labels(labels: Sequence[Hashable], seen: Iterable[Hashable], what: str) -> list[Hashable]:
    labels = list(labels)
    if not labels:
        raise ValueError(f"{what}: labels is empty; give every class in the order wanted.")
    if len(set(labels)) != len(labels):
        raise ValueError(f"{what}: labels lists a class twice: {labels!r}.")
    unknown = [x for x in dict.fromkeys(seen) if x not in set(labels)]
    if unknown:
        raise ValueError(f"{what}: {unknown!r} occur in the predictions or references but not in labels "
                         f"{labels!r}.")
    return labels


def confusion_matrix(predictions: Sequence[Hashable], references: Sequence[Hashable],
                     labels: Sequence[Hashable]) -> list[list[int]]:
    """Counts[i][j]: examples whose reference is labels[i] and prediction labels[j] (scikit-learn's
    orientation: rows are the truth). Every label that occurs must be in `labels`."""
    _check_pairs(predictions, references, "confusion matrix")
    labels = _check_labels(labels, [*references, *predictions], "confusion matrix")
    from sklearn import metrics as skm

    matrix = skm.confusion_matrix(references, predictions, labels=labels)
    return [[int(n) for n in row] for row in matrix]


def per_class_table(predictions: Sequence[Hashable], references: Sequence[Hashable],
                    labels: Sequence[Hashable] | None = None) -> list[dict[str, Any]]:
    """One row per class, in `labels` order (default: the sorted labels seen in either list):
    {"label", "precision", "recall", "f1", "support"}; support counts the references of that
    class; a ratio with a zero denominator is 0.0."""
    _check_pairs(predictions, references, "per-class table")
    from sklearn import metrics as skm
    from sklearn.utils.multiclass import unique_labels

    if labels is None:
        labels = [x.item() if hasattr(x, "item") else x for x in unique_labels(references, predictions)]
    else:
        labels = _check_labels(labels, [*references, *predictions], "per-class table")
    precision, recall, f1, support = skm.precision_recall_fscore_support(
        references, predictions, labels=labels, zero_division=0)
    return [{"label": label, "precision": float(p), "recall": float(r), "f1": float(f), "support": int(n)}
            for label, p, r, f, n in zip(labels, precision, recall, f1, support)]


# ------------------------------------------------------------------------------------ regression
def _correlation(method: Callable, x: list[float], y: list[float]) -> float:
    """scipy's coefficient, or 0.0 where it is undefined (a constant list, fewer than two values)."""
    if len(x) < 2 or len(set(x)) == 1 or len(set(y)) == 1:
        return 0.0
    return float(method(x, y).statistic)


def regression_metrics(predictions: Sequence[float], references: Sequence[float]) -> dict[str, float]:
    """One score per example (STS-B): Pearson's and Spearman's correlation (0.0 where undefined,
    see the module docstring) and the mean squared error."""
    _check_pairs(predictions, references, "regression")
    pred = _finite(predictions, "predictions", "regression")
    ref = _finite(references, "references", "regression")
    from scipy import stats
    from sklearn import metrics as skm

    return {
        "pearson": _correlation(stats.pearsonr, pred, ref),
        "spearman": _correlation(stats.spearmanr, pred, ref),
        "mse": float(skm.mean_squared_error(ref, pred)),
    }


# --------------------------------------------------------------------------- token classification
_BIO_TAG = re.compile(r"(?:[BI]-.+|O)\Z", re.DOTALL)


def _check_tags(rows: Sequence, name: str) -> None:
    for i, row in enumerate(rows):
        if isinstance(row, (str, bytes)) or not isinstance(row, Sequence):
            raise ValueError(f"token classification: {name}[{i}] must be a list of tags, not {row!r}.")
        for tag in row:
            if not isinstance(tag, str) or not _BIO_TAG.match(tag):
                raise ValueError(f"token classification: {name}[{i}] has the tag {tag!r}; tags must be BIO "
                                 "(IOB2): 'O', 'B-TYPE' or 'I-TYPE'.")


def token_classification_metrics(predictions: Sequence[Sequence[str]], references: Sequence[Sequence[str]],
                                 *, strict: bool = False) -> dict[str, float]:
    """Named-entity recognition with BIO (IOB2) tags, one list of tags per sentence: entity-level
    precision, recall and F1 (micro over every entity type), by seqeval.

    An entity counts only when its type and both ends match. Default (strict=False): seqeval's
    default mode, which is conlleval's, the script behind every published CoNLL-2003 and BERT NER
    number: an I-X after O or after another type still starts an entity. strict=True: seqeval's
    strict IOB2 mode, where only a B-X starts an entity, so a model that emits I-X without a B-X
    scores lower; use it to judge well-formed output, the default to compare with papers."""
    _check_pairs(predictions, references, "token classification")
    _check_tags(predictions, "predictions")
    _check_tags(references, "references")
    for i, (pred, ref) in enumerate(zip(predictions, references)):
        if len(pred) != len(ref):
            raise ValueError(f"token classification: sentence {i} has {len(pred)} predicted tags for "
                             f"{len(ref)} reference tags.")
    from seqeval import metrics as sq
    from seqeval.scheme import IOB2

    y_true, y_pred = [list(r) for r in references], [list(p) for p in predictions]
    options: dict[str, Any] = {"mode": "strict", "scheme": IOB2} if strict else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {
            "entity_precision": float(sq.precision_score(y_true, y_pred, zero_division=0, **options)),
            "entity_recall": float(sq.recall_score(y_true, y_pred, zero_division=0, **options)),
            "entity_f1": float(sq.f1_score(y_true, y_pred, zero_division=0, **options)),
        }


# -------------------------------------------------------------------------------- extractive QA
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD's normalisation, in the official script's order: lower-case, drop ASCII punctuation
    (string.punctuation: "don't" becomes "dont"), replace the words a, an, the with a space, then
    collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def answer_exact_match(prediction: str, gold: str) -> float:
    """1.0 when both answers normalise to the same string."""
    return float(normalize_answer(prediction) == normalize_answer(gold))


def answer_f1(prediction: str, gold: str, *, version_2: bool = False) -> float:
    """Token-overlap F1 of the normalised answers, tokens split on whitespace and counted with
    multiplicity. Two answers with no token left: v2.0 scores 1.0 (both say "no answer"), v1.1 0.0."""
    pred_tokens, gold_tokens = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred_tokens and not gold_tokens:
        return 1.0 if version_2 else 0.0
    shared = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if shared == 0:
        return 0.0
    precision, recall = shared / len(pred_tokens), shared / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def extractive_qa_metrics(predictions: Sequence[str], references: Sequence[Sequence[str]],
                          *, version_2: bool = False) -> dict[str, float]:
    """SQuAD exact match and F1: each question's score is its best over the gold answers, then
    the mean over questions (fractions; the official script prints 100x).

    predictions: one answer string per question ("" = no answer, v2.0). references: the gold
    answers of each question, a list of strings.
    v1.1 (version_2=False): every question needs at least one gold answer.
    v2.0: an empty list marks an unanswerable question, whose only gold is "" (a prediction
    scores 1.0 when it normalises to nothing); as in the official script, gold answers that
    normalise to nothing are dropped ([""] when none is left), and the result adds has_ans_* and
    no_ans_* over the answerable and the unanswerable questions, each pair only when such
    questions exist."""
    _check_pairs(predictions, references, "extractive QA")
    exact, f1, answerable = [], [], []
    for i, (prediction, golds) in enumerate(zip(predictions, references)):
        if not isinstance(prediction, str):
            raise ValueError(f"extractive QA: predictions[{i}] must be a string (\"\" for no answer), "
                             f"not {prediction!r}.")
        if isinstance(golds, (str, bytes)) or not isinstance(golds, Sequence) or \
                not all(isinstance(g, str) for g in golds):
            raise ValueError(f"extractive QA: references[{i}] must be a list of answer strings, not {golds!r}.")
        if not golds and not version_2:
            raise ValueError(f"extractive QA: question {i} has no gold answer; SQuAD v1.1 needs one. "
                             "Unanswerable questions need version_2=True.")
        answerable.append(bool(golds))
        if version_2:
            golds = [g for g in golds if normalize_answer(g)] or [""]
        exact.append(max(answer_exact_match(prediction, g) for g in golds))
        f1.append(max(answer_f1(prediction, g, version_2=version_2) for g in golds))
    out = {"exact_match": sum(exact) / len(exact), "f1": sum(f1) / len(f1)}
    if version_2:
        for prefix, wanted in (("has_ans", True), ("no_ans", False)):
            picked = [i for i, has in enumerate(answerable) if has == wanted]
            if picked:
                out[f"{prefix}_exact_match"] = sum(exact[i] for i in picked) / len(picked)
                out[f"{prefix}_f1"] = sum(f1[i] for i in picked) / len(picked)
    return out


# ---------------------------------------------------------------------------------- generation
def _reference_lists(references: Sequence, what: str) -> list[list[str]]:
    """Each example's references as a non-empty list of strings (a lone string is one reference)."""
    out = []
    for i, refs in enumerate(references):
        refs = [refs] if isinstance(refs, str) else refs
        if not isinstance(refs, Sequence) or not refs or not all(isinstance(r, str) for r in refs):
            raise ValueError(f"{what}: references[{i}] must be a string or a non-empty list of strings, "
                             f"not {refs!r}.")
        out.append(list(refs))
    return out


def _check_strings(predictions: Sequence, what: str) -> None:
    for i, p in enumerate(predictions):
        if not isinstance(p, str):
            raise ValueError(f"{what}: predictions[{i}] must be a string, not {p!r}.")


def summarization_metrics(predictions: Sequence[str], references: Sequence[str | Sequence[str]],
                          *, use_stemmer: bool = True) -> dict[str, float]:
    """ROUGE-L F-measure by rouge-score, the mean over examples of each one's best over its
    references (one string or a list each). Porter stemming is on by default, as in the
    published summarisation results and transformers' run_summarization. rouge-score's
    tokenizer keeps only a-z and 0-9 after lower-casing: text in other scripts (Chinese) scores 0."""
    _check_pairs(predictions, references, "summarization")
    _check_strings(predictions, "summarization")
    refs = _reference_lists(references, "summarization")
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=use_stemmer)
    scores = [scorer.score_multi(targets, prediction)["rougeL"].fmeasure
              for prediction, targets in zip(predictions, refs)]
    return {"rouge_l": float(sum(scores) / len(scores))}


def translation_metrics(predictions: Sequence[str], references: Sequence[str | Sequence[str]],
                        *, tokenize: str = "13a", lowercase: bool = False) -> dict[str, float]:
    """Corpus BLEU by sacrebleu (0..100), with its default 13a tokenizer ("zh", "ja-mecab",
    "intl", ... for other scripts; see sacrebleu). Each example has one reference or a list; the
    examples may have different numbers of references."""
    _check_pairs(predictions, references, "translation")
    _check_strings(predictions, "translation")
    refs = _reference_lists(references, "translation")
    import sacrebleu

    # sacrebleu takes one stream per reference position; a shorter list leaves None in the others.
    streams = [[r[k] if k < len(r) else None for r in refs] for k in range(max(map(len, refs)))]
    bleu = sacrebleu.corpus_bleu(list(predictions), streams, tokenize=tokenize, lowercase=lowercase)
    return {"bleu": float(bleu.score)}


# --------------------------------------------------------------------------------------- SFT
def sft_metrics(nll_sums: Sequence[float], token_counts: Sequence[int] | None = None) -> dict[str, float]:
    """Supervised fine-tuning: perplexity = exp(mean NLL per response token), in nats.

    nll_sums: the summed negative log-likelihood of the response tokens of each batch (or
    example); token_counts: how many tokens each sum covers (default: one each, i.e. nll_sums
    are per-token NLLs). The mean weighs every token alike, not every batch."""
    what = "SFT perplexity"
    counts = [1] * len(nll_sums) if token_counts is None else token_counts
    _check_pairs(nll_sums, counts, what)
    nlls = _finite(nll_sums, "nll_sums", what)
    for i, n in enumerate(counts):
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"{what}: token_counts[{i}] is {n!r}; counts are whole numbers, 0 or more.")
    if any(x < 0 for x in nlls):
        raise ValueError(f"{what}: a negative log-likelihood cannot be negative; got {min(nlls)}.")
    total = sum(counts)
    if total == 0:
        raise ValueError(f"{what}: no response token was scored (every count is 0).")
    return {"perplexity": math.exp(min(sum(nlls) / total, PERPLEXITY_CAP))}


def text_to_text_metrics(predictions: Sequence[str], references: Sequence[str | Sequence[str]],
                         *, lowercase: bool = False) -> dict[str, float]:
    """Generated text against reference text (T5's and UniLM's text to text): ROUGE-1, ROUGE-2
    and ROUGE-L F-measures by rouge-score (Porter stemming on, each example's best over its
    references, the mean over examples), corpus BLEU by sacrebleu (0..100, 13a tokenizer;
    `lowercase` for a model whose tokenizer lowercases, which could never write a capital), and
    exact match: the share of examples equal to one of their references after SQuAD's
    normalisation (lower case, no punctuation, articles or extra spaces)."""
    _check_pairs(predictions, references, "text to text")
    _check_strings(predictions, "text to text")
    refs = _reference_lists(references, "text to text")
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    totals = Counter()
    for prediction, targets in zip(predictions, refs):
        scores = scorer.score_multi(targets, prediction)
        for key in ("rouge1", "rouge2", "rougeL"):
            totals[key] += scores[key].fmeasure
    n = len(refs)
    exact = sum(max(answer_exact_match(p, r) for r in targets) for p, targets in zip(predictions, refs))
    return {"rouge1": float(totals["rouge1"] / n), "rouge2": float(totals["rouge2"] / n),
            "rouge_l": float(totals["rougeL"] / n),
            "bleu": translation_metrics(predictions, refs, lowercase=lowercase)["bleu"],
            "exact_match": float(exact / n)}


# ---------------------------------------------------------------------------- dashboard and table
# Charts of their own for the fine-tuning metrics; SFT's perplexity goes on CHARTS["perplexity"].
# Validation only: the metrics need whole predictions, which the engine makes when it validates.
FINETUNE_CHARTS: tuple[ChartSpec, ...] = (
    ChartSpec("ft_classification", "Accuracy and F1", order=11, scale="percent", legend="metric"),
    ChartSpec("ft_mcc", "Matthews correlation (MCC)", order=12),
    ChartSpec("ft_correlation", "Correlation with the reference scores", order=13, legend="metric"),
    ChartSpec("ft_mse", "Mean squared error", order=14),
    ChartSpec("ft_entities", "Entities: precision, recall, F1", order=15, scale="percent", legend="metric"),
    ChartSpec("ft_squad", "Exact match and F1", order=16, scale="percent", legend="metric"),
    ChartSpec("ft_squad_split", "Answerable and unanswerable questions", order=17, scale="percent",
              legend="metric"),
    ChartSpec("ft_rouge", "ROUGE-L (F)", order=18, scale="percent"),
    ChartSpec("ft_bleu", "BLEU", unit="BLEU", order=19),
    ChartSpec("ft_text", "ROUGE-1, ROUGE-2, ROUGE-L (F) and exact match", order=20, scale="percent",
              legend="metric"),
    ChartSpec("ft_mix_exact", "Exact match per task (multi-task)", order=21, scale="percent", legend="metric"),
    ChartSpec("ft_mix_rouge", "ROUGE-L (F) per task (multi-task)", order=22, scale="percent", legend="metric"),
)


def mix_series(tasks: Sequence[str]) -> tuple[MetricSpec, ...]:
    """A multi-task run's per-task series (trainer.finetune.mixing.per_task_metrics) and their mean."""
    return tuple(_valid(f"{key}/{name}", label, chart)
                 for key, chart in (("exact_match", "ft_mix_exact"), ("rouge_l", "ft_mix_rouge"))
                 for name, label in ([(t, t) for t in tasks] + [("mean", "mean of the tasks")] if tasks else []))


def _valid(name: str, label: str, chart: str, color: str = "") -> MetricSpec:
    return MetricSpec(name, label, chart=chart, splits=VALID, color=color)


def _headline(metric: str, label: str, *, format: str = "percent", digits: int = 1) -> tuple[StatSpec, ...]:
    return (StatSpec(f"ft_{metric}", label, metric=metric, format=format, digits=digits, order=5),)


@dataclass(frozen=True)
class TaskMetrics:
    """What a fine-tuning task type is scored with.

    compute(predictions, references) gives the dict; `primary` is the key that early stopping
    and the leaderboard use by default, better when higher unless higher_is_better is False;
    `metrics` draws each key on the dashboard (on FINETUNE_CHARTS or CHARTS), `stats` puts the
    primary one above the charts (SFT's perplexity is already a common stat); `report` is the test
    split's report it writes (trainer.finetune.report.REPORTS: "class", a confusion matrix and a
    per-class table over the labels; "entity", per tag and per entity type; "": none)."""

    task: str
    compute: Callable[..., dict[str, float]]
    primary: str
    higher_is_better: bool
    metrics: tuple[MetricSpec, ...]
    stats: tuple[StatSpec, ...] = field(default=())
    report: str = ""

    def better(self, value: float, than: float | None) -> bool:
        """Whether `value` of the primary metric beats `than` (None: nothing yet, so it does)."""
        if than is None:
            return True
        return value > than if self.higher_is_better else value < than


_CLASSIFICATION_SERIES = (
    _valid("accuracy", "accuracy", "ft_classification", BLUE),
    _valid("f1_macro", "macro F1", "ft_classification", ORANGE),
    _valid("f1_micro", "micro F1", "ft_classification", GREEN),
)
_SQUAD_SERIES = (_valid("exact_match", "exact match", "ft_squad", BLUE), _valid("f1", "F1", "ft_squad", ORANGE))

METRICS: dict[str, TaskMetrics] = {t.task: t for t in (
    # Accuracy is what the published recipes report (SST-2, MNLI); on imbalanced data compare f1_macro.
    TaskMetrics("classification", classification_metrics, "accuracy", True,
                (*_CLASSIFICATION_SERIES, _valid("mcc", "MCC", "ft_mcc")),
                _headline("accuracy", "validation accuracy"), report="class"),
    # Micro F1: the usual multi-label headline; exact-set accuracy is harsh with many labels.
    TaskMetrics("multilabel_classification", multilabel_metrics, "f1_micro", True,
                (_valid("accuracy", "exact-set accuracy", "ft_classification", BLUE),
                 *_CLASSIFICATION_SERIES[1:]),
                _headline("f1_micro", "validation micro F1")),
    TaskMetrics("multiple_choice", multiple_choice_metrics, "accuracy", True, _CLASSIFICATION_SERIES[:1],
                _headline("accuracy", "validation accuracy")),
    TaskMetrics("regression", regression_metrics, "pearson", True,
                (_valid("pearson", "Pearson", "ft_correlation", BLUE),
                 _valid("spearman", "Spearman", "ft_correlation", ORANGE),
                 _valid("mse", "MSE", "ft_mse")),
                _headline("pearson", "validation Pearson", format="fixed", digits=4)),
    TaskMetrics("token_classification", token_classification_metrics, "entity_f1", True,
                (_valid("entity_precision", "precision", "ft_entities", BLUE),
                 _valid("entity_recall", "recall", "ft_entities", ORANGE),
                 _valid("entity_f1", "F1", "ft_entities", GREEN)),
                _headline("entity_f1", "validation entity F1"), report="entity"),
    TaskMetrics("extractive_qa", extractive_qa_metrics, "f1", True, _SQUAD_SERIES,
                _headline("f1", "validation F1")),
    TaskMetrics("extractive_qa_v2", partial(extractive_qa_metrics, version_2=True), "f1", True,
                (*_SQUAD_SERIES,
                 _valid("has_ans_exact_match", "answerable: exact match", "ft_squad_split", BLUE),
                 _valid("has_ans_f1", "answerable: F1", "ft_squad_split", ORANGE),
                 _valid("no_ans_exact_match", "unanswerable: exact match", "ft_squad_split", GREEN),
                 _valid("no_ans_f1", "unanswerable: F1", "ft_squad_split", PURPLE)),
                _headline("f1", "validation F1")),
    TaskMetrics("summarization", summarization_metrics, "rouge_l", True, (_valid("rouge_l", "ROUGE-L", "ft_rouge"),),
                _headline("rouge_l", "validation ROUGE-L")),
    TaskMetrics("translation", translation_metrics, "bleu", True, (_valid("bleu", "BLEU", "ft_bleu"),),
                _headline("bleu", "validation BLEU", format="fixed", digits=2)),
    TaskMetrics("sft", sft_metrics, "perplexity", False, (_valid("perplexity", "perplexity", "perplexity"),)),
    # ROUGE-L: the summarisation headline (T5, UniLM); BLEU and exact match beside it.
    TaskMetrics("text_to_text", text_to_text_metrics, "rouge_l", True,
                (_valid("rouge1", "ROUGE-1", "ft_text", BLUE), _valid("rouge2", "ROUGE-2", "ft_text", ORANGE),
                 _valid("rouge_l", "ROUGE-L", "ft_text", GREEN),
                 _valid("exact_match", "exact match", "ft_text", PURPLE), _valid("bleu", "BLEU", "ft_bleu")),
                _headline("rouge_l", "validation ROUGE-L")),
)}


# A metric's name in a sentence ("entity F1", "macro F1", "Pearson"): the headline's words, else
# the dashboard series' label, else the key with its underscores as spaces.
def metric_label(key: str) -> str:
    for task in METRICS.values():
        for stat in task.stats:
            if stat.metric == key:
                return stat.label.removeprefix("validation ")
    for task in METRICS.values():
        for spec in task.metrics:
            if spec.name == key:
                return spec.label
    return str(key).replace("_", " ")
