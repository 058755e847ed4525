"""Fine-tuning metrics (trainer/finetune/metrics.py): each equals its reference library on small
fixtures, SQuAD's exact match and F1 equal hand-worked cases of the official scripts' rules, the
degenerate inputs give the documented values without a warning, and the METRICS table agrees
with what the functions return and with the dashboard's chart contract."""
from __future__ import annotations

import json
import math
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import sacrebleu
from rouge_score import rouge_scorer
from scipy import stats
from seqeval import metrics as seqeval_metrics
from seqeval.scheme import IOB2
from sklearn import metrics as skm
from sklearn.preprocessing import MultiLabelBinarizer

from trainer.charts import CHARTS, COMMON_STATS, charts_for, stats_for
from trainer.finetune import metrics as m

ROOT = Path(__file__).resolve().parents[2]


def no_warnings(fn, *args, **kwargs):
    """fn's result, failing the test if it warns."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return fn(*args, **kwargs)


# ---------------------------------------------------------------------------------- classification
PRED = ["pos", "neg", "neu", "pos", "neg", "pos", "neu", "neg", "pos"]
REF = ["pos", "neg", "pos", "pos", "neu", "neg", "neu", "neg", "neu"]


def test_classification_equals_scikit_learn():
    got = m.classification_metrics(PRED, REF)
    assert got == {
        "accuracy": pytest.approx(skm.accuracy_score(REF, PRED)),
        "f1_macro": pytest.approx(skm.f1_score(REF, PRED, average="macro")),
        "f1_micro": pytest.approx(skm.f1_score(REF, PRED, average="micro")),
        "mcc": pytest.approx(skm.matthews_corrcoef(REF, PRED)),
    }
    assert got["f1_macro"] != pytest.approx(got["f1_micro"])   # the fixture tells them apart
    assert all(type(v) is float for v in got.values())


def test_classification_takes_int_labels():
    pred, ref = [0, 1, 1, 0, 2], [0, 1, 0, 0, 2]
    assert m.classification_metrics(pred, ref)["mcc"] == pytest.approx(skm.matthews_corrcoef(ref, pred))


def test_one_class_gives_mcc_zero_as_scikit_learn_does_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert skm.matthews_corrcoef([1, 1, 1], [1, 1, 1]) == 0.0
    got = no_warnings(m.classification_metrics, [1, 1, 1], [1, 1, 1])
    assert got == {"accuracy": 1.0, "f1_macro": 1.0, "f1_micro": 1.0, "mcc": 0.0}
    # a class that is never predicted: its F1 is 0.0, silently
    assert no_warnings(m.classification_metrics, [0, 0, 0], [0, 1, 1])["f1_macro"] == pytest.approx(0.25)


def test_multilabel_equals_scikit_learn():
    pred = [["sport"], ["politics", "economy"], [], ["sport", "economy"]]
    ref = [["sport"], ["politics"], ["economy"], ["sport", "economy"]]
    binarizer = MultiLabelBinarizer().fit(pred + ref)
    y_true, y_pred = binarizer.transform(ref), binarizer.transform(pred)
    got = m.multilabel_metrics(pred, ref)
    assert got == {
        "accuracy": pytest.approx(skm.accuracy_score(y_true, y_pred)),
        "f1_micro": pytest.approx(skm.f1_score(y_true, y_pred, average="micro")),
        "f1_macro": pytest.approx(skm.f1_score(y_true, y_pred, average="macro")),
    }
    assert got["accuracy"] == 0.5


def test_multilabel_without_any_label_and_with_a_string_row():
    assert no_warnings(m.multilabel_metrics, [[], []], [[], set()]) == {"accuracy": 1.0, "f1_micro": 0.0,
                                                                         "f1_macro": 0.0}
    with pytest.raises(ValueError, match=r"predictions\[0\] is 'sport'"):
        m.multilabel_metrics(["sport"], [["sport"]])


def test_confusion_matrix_follows_the_given_label_order():
    labels = ["neu", "pos", "neg"]
    got = m.confusion_matrix(PRED, REF, labels)
    assert got == skm.confusion_matrix(REF, PRED, labels=labels).tolist()
    assert got[1] == [1, 2, 0]   # by hand: the three references "pos" were predicted neu once, pos twice
    assert all(type(n) is int for row in got for n in row)


def test_confusion_matrix_refuses_labels_that_do_not_cover_the_data():
    with pytest.raises(ValueError, match=r"\['neu'\] occur .* but not in labels"):
        m.confusion_matrix(PRED, REF, ["pos", "neg"])
    with pytest.raises(ValueError, match="twice"):
        m.confusion_matrix(PRED, REF, ["pos", "neg", "neu", "pos"])
    with pytest.raises(ValueError, match="labels is empty"):
        m.confusion_matrix(PRED, REF, [])


def test_per_class_table_equals_scikit_learn():
    labels = ["pos", "neg", "neu", "other"]
    p, r, f, n = skm.precision_recall_fscore_support(REF, PRED, labels=labels, zero_division=0)
    got = no_warnings(m.per_class_table, PRED, REF, labels)
    assert [row["label"] for row in got] == labels
    for row, *expected in zip(got, p, r, f, n):
        assert (row["precision"], row["recall"], row["f1"], row["support"]) == pytest.approx(tuple(expected))
    assert got[-1] == {"label": "other", "precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0}
    assert [row["label"] for row in m.per_class_table(PRED, REF)] == ["neg", "neu", "pos"]   # sorted by default
    assert type(m.per_class_table([2, 1], [1, 1])[0]["label"]) is int


# ------------------------------------------------------------------------------------ regression
SCORES_PRED = [0.5, 2.1, 3.9, 1.2, 4.8, 3.0, 2.2]
SCORES_REF = [0.0, 2.5, 3.5, 1.0, 5.0, 2.0, 2.4]


def test_regression_equals_scipy_and_scikit_learn():
    got = m.regression_metrics(SCORES_PRED, SCORES_REF)
    assert got == {
        "pearson": pytest.approx(stats.pearsonr(SCORES_PRED, SCORES_REF)[0]),
        "spearman": pytest.approx(stats.spearmanr(SCORES_PRED, SCORES_REF)[0]),
        "mse": pytest.approx(skm.mean_squared_error(SCORES_REF, SCORES_PRED)),
    }
    assert got["pearson"] != pytest.approx(got["spearman"])


def test_constant_or_single_scores_correlate_zero_where_scipy_says_nan():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert math.isnan(stats.pearsonr([2.0, 2.0, 2.0], [1.0, 2.0, 3.0])[0])
    got = no_warnings(m.regression_metrics, [2.0, 2.0, 2.0], [1.0, 2.0, 3.0])
    assert got == {"pearson": 0.0, "spearman": 0.0, "mse": pytest.approx(2 / 3)}
    assert no_warnings(m.regression_metrics, [1.0, 2.0], [3.0, 3.0])["pearson"] == 0.0
    assert no_warnings(m.regression_metrics, [1.5], [1.0]) == {"pearson": 0.0, "spearman": 0.0, "mse": 0.25}


def test_regression_refuses_values_that_are_not_finite_numbers():
    with pytest.raises(ValueError, match=r"predictions\[1\] is nan"):
        m.regression_metrics([1.0, float("nan")], [1.0, 2.0])
    with pytest.raises(ValueError, match=r"references\[0\] is 'high', not a number"):
        m.regression_metrics([1.0], ["high"])


# --------------------------------------------------------------------------- token classification
TAGS_REF = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O", "B-MISC", "I-MISC"]]
TAGS_PRED = [["B-PER", "I-PER", "O", "I-LOC"], ["B-ORG", "O", "O", "O"]]   # an I-LOC without its B-LOC


@pytest.mark.parametrize("strict", [False, True])
def test_entities_equal_seqeval(strict):
    options = {"mode": "strict", "scheme": IOB2} if strict else {}
    got = m.token_classification_metrics(TAGS_PRED, TAGS_REF, strict=strict)
    assert got == {
        "entity_precision": pytest.approx(seqeval_metrics.precision_score(TAGS_REF, TAGS_PRED, **options)),
        "entity_recall": pytest.approx(seqeval_metrics.recall_score(TAGS_REF, TAGS_PRED, **options)),
        "entity_f1": pytest.approx(seqeval_metrics.f1_score(TAGS_REF, TAGS_PRED, **options)),
    }


def test_default_mode_is_conlleval_and_strict_needs_the_b_tag():
    # by hand: default finds PER, LOC (the I-LOC starts it) and ORG, all right, of 4 true entities
    assert m.token_classification_metrics(TAGS_PRED, TAGS_REF) == pytest.approx(
        {"entity_precision": 1.0, "entity_recall": 0.75, "entity_f1": 6 / 7})
    # strict IOB2: the lone I-LOC is no entity, so 2 of 4
    assert m.token_classification_metrics(TAGS_PRED, TAGS_REF, strict=True) == pytest.approx(
        {"entity_precision": 1.0, "entity_recall": 0.5, "entity_f1": 2 / 3})


def test_no_entity_anywhere_scores_zero_without_a_warning():
    got = no_warnings(m.token_classification_metrics, [["O", "O"]], [["O", "O"]])
    assert got == {"entity_precision": 0.0, "entity_recall": 0.0, "entity_f1": 0.0}
    got = no_warnings(m.token_classification_metrics, [["O", "O"]], [["B-PER", "O"]], strict=True)
    assert got == {"entity_precision": 0.0, "entity_recall": 0.0, "entity_f1": 0.0}


def test_tags_must_be_bio_and_pair_up():
    with pytest.raises(ValueError, match=r"references\[0\] has the tag 'PER'"):
        m.token_classification_metrics([["O"]], [["PER"]])
    with pytest.raises(ValueError, match="sentence 1 has 1 predicted tags for 2 reference tags"):
        m.token_classification_metrics([["O"], ["O"]], [["O"], ["O", "O"]])
    with pytest.raises(ValueError, match="must be a list of tags"):
        m.token_classification_metrics(["B-PER"], [["B-PER"]])


# ------------------------------------------------------------------------------- extractive QA
@pytest.mark.parametrize("text, normalised", [
    ("The  Quick, Brown fox!", "quick brown fox"),
    ("An apple a day", "apple day"),
    ("don't", "dont"),                    # punctuation is deleted, not replaced by a space
    ("the-end", "theend"),                # punctuation goes before the articles: "the" is no longer a word
    ("theater", "theater"),               # articles are whole words only
    ("the.", ""),
    ("\u201cÜber\u201d café", "\u201cüber\u201d café"),   # only ASCII punctuation is removed
    ("  \t", ""),
])
def test_normalize_answer_follows_the_official_rules(text, normalised):
    assert m.normalize_answer(text) == normalised


def test_answer_f1_counts_shared_tokens_with_multiplicity():
    assert m.answer_f1("the cat sat", "a cat sat down") == pytest.approx(0.8)    # P 1, R 2/3
    assert m.answer_f1("x x y", "x y y") == pytest.approx(2 / 3)                # shared {x: 1, y: 1}
    assert m.answer_f1("x x x y", "x x y") == pytest.approx(6 / 7)              # shared {x: 2, y: 1}: P 3/4, R 1
    assert m.answer_f1("x x", "x") == pytest.approx(2 / 3)                      # shared {x: 1}: P 1/2, R 1
    assert m.answer_f1("dog", "cat") == 0.0
    assert m.answer_f1("", "cat") == 0.0 and m.answer_f1("cat", "", version_2=True) == 0.0
    assert m.answer_f1("the", "") == 0.0 and m.answer_f1("the", "", version_2=True) == 1.0
    assert m.answer_exact_match("The Broncos!", "broncos") == 1.0


def test_squad_v1_takes_the_best_gold_answer_and_averages_questions():
    predictions = ["Denver Broncos", "in Santa Clara, California", "February 7"]
    references = [["Broncos", "The Denver Broncos"], ["Levi's Stadium", "Santa Clara"], ["February 7, 2016"]]
    # by hand, each against its best gold (never the first): EM 1, 0, 0; F1 1, 2/3 (P 2/4, R 2/2 against
    # "santa clara"), 0.8 (P 1, R 2/3)
    assert m.extractive_qa_metrics(predictions, references) == {
        "exact_match": pytest.approx(1 / 3), "f1": pytest.approx((1 + 2 / 3 + 0.8) / 3)}


def test_squad_v1_and_v2_differ_on_answers_that_normalise_to_nothing():
    assert m.extractive_qa_metrics([""], [["The"]]) == {"exact_match": 1.0, "f1": 0.0}
    assert m.extractive_qa_metrics([""], [["The"]], version_2=True) == {
        "exact_match": 1.0, "f1": 1.0, "has_ans_exact_match": 1.0, "has_ans_f1": 1.0}


def test_squad_v2_scores_abstentions_and_splits_answerable_from_unanswerable():
    predictions = ["Broncos", "", "the", "Carolina", "", ""]
    references = [
        ["Denver Broncos"],        # F1 2/3 (P 1, R 1/2), EM 0
        [],                        # unanswerable, abstained: 1, 1
        [],                        # unanswerable, "the" normalises to nothing: 1, 1
        [],                        # unanswerable, answered: 0, 0
        ["a", "Panthers"],         # "a" is dropped, so only "Panthers" counts: 0, 0
        ["The"],                   # answerable, but its only gold is dropped: [""], so abstaining scores 1, 1
    ]
    got = m.extractive_qa_metrics(predictions, references, version_2=True)
    assert got == pytest.approx({
        "exact_match": 3 / 6, "f1": (2 / 3 + 1 + 1 + 0 + 0 + 1) / 6,
        "has_ans_exact_match": 1 / 3, "has_ans_f1": (2 / 3 + 0 + 1) / 3,
        "no_ans_exact_match": 2 / 3, "no_ans_f1": 2 / 3,
    })
    assert set(m.extractive_qa_metrics(["x"], [[]], version_2=True)) == {
        "exact_match", "f1", "no_ans_exact_match", "no_ans_f1"}


def test_squad_refuses_what_it_cannot_score():
    with pytest.raises(ValueError, match="question 1 has no gold answer; SQuAD v1.1 needs one"):
        m.extractive_qa_metrics(["a", "b"], [["a"], []])
    with pytest.raises(ValueError, match=r"references\[0\] must be a list of answer strings"):
        m.extractive_qa_metrics(["a"], ["a"])
    with pytest.raises(ValueError, match=r"predictions\[0\] must be a string"):
        m.extractive_qa_metrics([None], [["a"]], version_2=True)


# ---------------------------------------------------------------------------------- generation
SUMMARIES = ["the cats were sitting on the mat", "police arrested two men", "rain expected tomorrow"]
SUMMARY_REFS = ["a cat sat on the mat", ["two men were arrested by police", "police arrest two"], "sunny"]


@pytest.mark.parametrize("use_stemmer", [True, False])
def test_rouge_l_equals_rouge_score(use_stemmer):
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=use_stemmer)
    expected = [scorer.score("a cat sat on the mat", SUMMARIES[0])["rougeL"].fmeasure,
                max(scorer.score(ref, SUMMARIES[1])["rougeL"].fmeasure for ref in SUMMARY_REFS[1]),
                0.0]
    got = m.summarization_metrics(SUMMARIES, SUMMARY_REFS, use_stemmer=use_stemmer)
    assert got == {"rouge_l": pytest.approx(sum(expected) / 3)}


def test_rouge_l_stems_by_default():
    assert m.summarization_metrics(SUMMARIES, SUMMARY_REFS) == m.summarization_metrics(
        SUMMARIES, SUMMARY_REFS, use_stemmer=True)
    assert m.summarization_metrics(SUMMARIES, SUMMARY_REFS) != m.summarization_metrics(
        SUMMARIES, SUMMARY_REFS, use_stemmer=False)


TRANSLATIONS = ["the cat sat on the mat .", "there is a dog in the garden", "he reads a book every night"]


def test_bleu_equals_sacrebleu_with_one_reference_each():
    refs = ["the cat sat on a mat .", "a dog is in the garden", "every night he reads a book"]
    got = m.translation_metrics(TRANSLATIONS, refs)
    assert got == {"bleu": pytest.approx(sacrebleu.corpus_bleu(TRANSLATIONS, [refs]).score)}
    assert 0 < got["bleu"] < 100


def test_bleu_equals_sacrebleu_with_uneven_numbers_of_references():
    refs = [["the cat sat on a mat .", "a cat was on the mat ."], "a dog is in the garden",
            ["every night he reads a book", "he reads a book each night", "nightly he reads"]]
    streams = [["the cat sat on a mat .", "a dog is in the garden", "every night he reads a book"],
               ["a cat was on the mat .", None, "he reads a book each night"],
               [None, None, "nightly he reads"]]
    assert m.translation_metrics(TRANSLATIONS, refs) == {
        "bleu": pytest.approx(sacrebleu.corpus_bleu(TRANSLATIONS, streams).score)}


def test_bleu_passes_the_tokenizer_on():
    hyp, ref = ["猫坐在垫子上了"], ["猫坐在垫子上"]
    assert m.translation_metrics(hyp, ref, tokenize="zh") == {
        "bleu": pytest.approx(sacrebleu.corpus_bleu(hyp, [ref], tokenize="zh").score)}
    assert m.translation_metrics(hyp, ref, tokenize="zh")["bleu"] > m.translation_metrics(hyp, ref)["bleu"]


def test_generation_references_must_be_strings():
    with pytest.raises(ValueError, match=r"references\[0\] must be a string or a non-empty list"):
        m.translation_metrics(["a"], [[]])
    with pytest.raises(ValueError, match=r"predictions\[0\] must be a string"):
        m.summarization_metrics([["a"]], ["a"])
    assert no_warnings(m.translation_metrics, ["", ""], ["a b c", "d"]) == {"bleu": 0.0}


def test_text_to_text_scores_equal_rouge_score_and_sacrebleu():
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    refs = [[r] if isinstance(r, str) else r for r in SUMMARY_REFS]
    best = {key: sum(max(scorer.score(r, p)[key].fmeasure for r in rs) for p, rs in zip(SUMMARIES, refs)) / 3
            for key in ("rouge1", "rouge2", "rougeL")}
    streams = [[rs[k] if k < len(rs) else None for rs in refs] for k in range(2)]
    got = m.text_to_text_metrics(SUMMARIES, SUMMARY_REFS)
    assert got == {"rouge1": pytest.approx(best["rouge1"]), "rouge2": pytest.approx(best["rouge2"]),
                   "rouge_l": pytest.approx(best["rougeL"]),
                   "bleu": pytest.approx(sacrebleu.corpus_bleu(SUMMARIES, streams).score),
                   "exact_match": 0.0}
    # exact match after SQuAD's normalisation, against any reference; BLEU lowercased on request
    assert m.text_to_text_metrics(["The cat sat on the mat."], [["a dog", "cat sat on mat"]])["exact_match"] == 1.0
    upper = m.text_to_text_metrics(["the cat sat on the mat"], ["The Cat sat on the mat"], lowercase=True)["bleu"]
    cased = m.text_to_text_metrics(["the cat sat on the mat"], ["The Cat sat on the mat"])["bleu"]
    assert upper == pytest.approx(100.0) and cased < 100.0


# --------------------------------------------------------------------------------------- SFT
def test_perplexity_is_exp_of_the_mean_token_nll():
    assert m.sft_metrics([2.0, 4.0], [1, 3]) == {"perplexity": pytest.approx(math.exp(1.5))}   # 6 nats / 4 tokens
    assert m.sft_metrics([1.0, 2.0, 1.5]) == {"perplexity": pytest.approx(math.exp(1.5))}     # per-token NLLs
    assert m.sft_metrics([0.0], [5]) == {"perplexity": 1.0}
    assert m.sft_metrics([1e6], [1]) == {"perplexity": pytest.approx(math.exp(m.PERPLEXITY_CAP))}


def test_perplexity_refuses_what_is_no_likelihood():
    with pytest.raises(ValueError, match="no response token"):
        m.sft_metrics([0.0, 0.0], [0, 0])
    with pytest.raises(ValueError, match="cannot be negative"):
        m.sft_metrics([-1.0], [1])
    with pytest.raises(ValueError, match=r"nll_sums\[0\] is inf"):
        m.sft_metrics([float("inf")], [1])
    with pytest.raises(ValueError, match=r"token_counts\[0\] is 1.5"):
        m.sft_metrics([1.0], [1.5])
    with pytest.raises(ValueError, match="1 predictions for 2 references"):
        m.sft_metrics([1.0], [1, 2])


# ----------------------------------------------------------------------- every function, the table
# Per task type: good predictions, poor predictions, and the references (both kinds of question in v2).
FIXTURES = {
    "classification": (REF, ["neg"] * len(REF), REF),
    "multilabel_classification": ([["a", "b"], ["c"]], [["c"], ["a"]], [["a", "b"], ["c"]]),
    "regression": (SCORES_REF, list(reversed(SCORES_REF)), SCORES_REF),
    "token_classification": (TAGS_REF, [["O"] * 4, ["O"] * 4], TAGS_REF),
    "extractive_qa": (["Denver Broncos", "Santa Clara"], ["Carolina", "Miami"], [["Denver Broncos"], ["Santa Clara"]]),
    "extractive_qa_v2": (["Denver Broncos", ""], ["", "Carolina"], [["Denver Broncos"], []]),
    "summarization": (["a cat sat on the mat"], ["dogs bark"], ["a cat sat on the mat"]),
    "translation": (TRANSLATIONS, ["nothing alike here"] * 3, TRANSLATIONS),
    "sft": ([0.5, 0.5], [3.0, 3.0], [1, 1]),   # NLL sums and token counts
    "text_to_text": (SUMMARIES, ["dogs bark"] * 3, SUMMARY_REFS),
    "multiple_choice": ([2, 0, 1, 3], [0, 1, 2, 0], [2, 0, 1, 1]),  # the picked and the right choice's index
}


def test_multiple_choice_accuracy_is_the_share_of_right_choices():
    assert m.multiple_choice_metrics([2, 0, 1, 3], [2, 0, 1, 1]) == {"accuracy": 0.75}
    with pytest.raises(ValueError, match="multiple choice: there are no examples"):
        m.multiple_choice_metrics([], [])


def test_every_task_type_has_a_fixture():
    assert set(FIXTURES) == set(m.METRICS)


@pytest.mark.parametrize("task", list(FIXTURES))
def test_the_table_charts_every_key_its_function_returns(task):
    spec = m.METRICS[task]
    good, _, refs = FIXTURES[task]
    result = spec.compute(good, refs)
    assert spec.task == task
    assert set(result) == {metric.name for metric in spec.metrics}
    assert all(type(v) is float and math.isfinite(v) for v in result.values())
    assert json.loads(json.dumps(result)) == result
    drawn = charts_for(spec.metrics, m.FINETUNE_CHARTS)
    on_page = {s["metric"] for chart in drawn for s in chart["series"] if s["split"] == "valid"}
    assert set(result) <= on_page


@pytest.mark.parametrize("task", list(FIXTURES))
def test_the_primary_metric_prefers_good_predictions(task):
    spec = m.METRICS[task]
    good, poor, refs = FIXTURES[task]
    assert spec.primary in {metric.name for metric in spec.metrics}
    good_value, poor_value = spec.compute(good, refs)[spec.primary], spec.compute(poor, refs)[spec.primary]
    assert spec.better(good_value, poor_value) and not spec.better(poor_value, good_value)
    assert spec.better(poor_value, None)


def test_lower_is_better_only_for_perplexity():
    assert [t for t, spec in m.METRICS.items() if not spec.higher_is_better] == ["sft"]


@pytest.mark.parametrize("task", list(FIXTURES))
def test_the_primary_metric_is_a_headline_number(task):
    spec = m.METRICS[task]
    headline = stats_for(spec.stats)
    assert any(stat["metric"] == spec.primary and "valid" in stat["splits"] for stat in headline)
    assert not {s.id for s in spec.stats} & {s.id for s in COMMON_STATS}


def test_finetune_charts_are_new_and_drawn_by_some_task():
    ids = [c.id for c in m.FINETUNE_CHARTS]
    assert len(ids) == len(set(ids)) and not set(ids) & set(CHARTS)
    used = {metric.chart for spec in m.METRICS.values() for metric in spec.metrics}
    used |= {metric.chart for metric in m.mix_series(["a", "b"])}  # a multi-task run's per-task series
    assert set(ids) <= used and used <= set(ids) | set(CHARTS)


def test_series_sharing_a_chart_have_their_own_colours():
    for spec in m.METRICS.values():
        by_chart: dict[str, list[str]] = {}
        for metric in spec.metrics:
            by_chart.setdefault(metric.chart, []).append(metric.color)
        for chart, colours in by_chart.items():
            assert len(colours) == 1 or len(set(colours)) == len(colours), (spec.task, chart)


@pytest.mark.parametrize("task", list(FIXTURES))
def test_empty_or_unpaired_lists_are_refused(task):
    compute = m.METRICS[task].compute
    with pytest.raises(ValueError, match="there are no examples"):
        compute([], [])
    good, _, refs = FIXTURES[task]
    with pytest.raises(ValueError, match="must pair up one to one"):
        compute(good[:1], refs[:1] * 2)


@pytest.mark.parametrize("helper", [m.per_class_table, m.confusion_matrix])
def test_the_helpers_refuse_empty_lists(helper):
    with pytest.raises(ValueError, match="there are no examples"):
        helper([], [], ["a"])


def test_the_module_imports_no_torch_even_when_it_computes():
    code = (
        "import sys\n"
        "from trainer.finetune import metrics as m\n"
        "light = not {'sklearn', 'scipy', 'seqeval', 'sacrebleu', 'rouge_score'} & set(sys.modules)\n"
        f"fixtures = {FIXTURES!r}\n"
        "for task, (good, _, refs) in fixtures.items():\n"
        "    m.METRICS[task].compute(good, refs)\n"
        "m.per_class_table([0, 1], [1, 1]); m.confusion_matrix([0, 1], [1, 1], [0, 1])\n"
        "print(light, 'torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False"]   # the libraries load when used; torch never
