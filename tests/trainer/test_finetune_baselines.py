"""Baselines of a labelled dataset (issue 21, point 3): each equals scikit-learn's (or the rule's)
computed directly on the same small fixture, scored with the fine-tune metrics; a run is judged
against the lexical one. And the readiness notes on a checkpoint's pre-training record (point 4)."""
from __future__ import annotations

import csv
import json
import random

import pytest

from trainer.finetune import baselines
from trainer.finetune.metrics import (classification_metrics, extractive_qa_metrics, regression_metrics,
                                      token_classification_metrics)
from trainer.inference.readiness import record_notes
from trainer.prep.labelled import ingest, iter_examples

WORDS = {"pos": ["good", "great", "fine", "lovely", "happy"], "neg": ["bad", "awful", "sad", "poor", "ugly"],
         "any": ["the", "film", "was", "a", "plot", "and", "really", "very"]}


def _texts(n: int, seed: int = 0) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        label = rng.choice(["pos", "pos", "neg"])  # pos the majority
        cue = WORDS[label] if rng.random() < 0.8 else WORDS["neg" if label == "pos" else "pos"]
        words = [rng.choice(WORDS["any"]) for _ in range(4)] + [rng.choice(cue)]
        rng.shuffle(words)
        rows.append((" ".join(words), label))
    return rows


def _csv(path, header, rows):
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    return path


@pytest.fixture(scope="module")
def classification(tmp_path_factory):
    base = tmp_path_factory.mktemp("bl-cls")
    raw = _csv(base / "raw.csv", ["text", "label"], _texts(200))
    ingest(raw, base / "data", original_filename="raw.csv", task="classification",
           mapping={"text": "text", "label": "label"})
    return base / "data"


def _split(data, split):
    return list(iter_examples(data, split))


def test_classification_baselines_are_sklearns(classification):
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    out = baselines.compute(classification)
    assert out["task"] == "classification" and out["metric"] == "accuracy" and out["higher_is_better"]
    rows = {row["name"]: row for row in out["baselines"]}
    assert [row["kind"] for row in out["baselines"]] == ["trivial", "lexical"]
    train = _split(classification, "train")
    vectorizer = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True)
    model = LogisticRegression(max_iter=1000).fit(vectorizer.fit_transform([ex["text"] for ex in train]),
                                                  [ex["label"] for ex in train])
    for split in ("validation", "test"):
        examples = _split(classification, split)
        gold = [ex["label"] for ex in examples]
        assert rows["majority"][split] == pytest.approx(classification_metrics(["pos"] * len(gold), gold))
        predicted = list(model.predict(vectorizer.transform([ex["text"] for ex in examples])))
        assert rows["bow_logistic"][split] == pytest.approx(classification_metrics(predicted, gold))
    # the fixture's words give the class away: the lexical baseline beats the majority class. scikit-learn
    # on a fixed fixture, so the same every run (2026-12-02, two processes): test accuracy 0.75 against
    # the majority's 0.65, a margin of 0.10.
    assert rows["bow_logistic"]["test"]["accuracy"] > rows["majority"]["test"]["accuracy"], rows
    json.dumps(out)  # stored as JSON on the dataset


def test_regression_baselines_are_the_train_mean_and_sklearns_ridge(tmp_path):
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import Ridge

    rows = [(text, f"{(1.0 if label == 'pos' else 0.0) + i % 3 * 0.1:.2f}") for i, (text, label) in
            enumerate(_texts(120, seed=1))]
    ingest(_csv(tmp_path / "r.csv", ["text", "score"], rows), tmp_path / "data", original_filename="r.csv",
           task="regression", mapping={"text": "text", "score": "label"})
    out = baselines.compute(tmp_path / "data")
    found = {row["name"]: row for row in out["baselines"]}
    train = _split(tmp_path / "data", "train")
    mean = sum(ex["label"] for ex in train) / len(train)
    vectorizer = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True)
    ridge = Ridge(alpha=1.0).fit(vectorizer.fit_transform([ex["text"] for ex in train]), [ex["label"] for ex in train])
    test = _split(tmp_path / "data", "test")
    gold = [ex["label"] for ex in test]
    assert found["train_mean"]["test"] == pytest.approx(regression_metrics([mean] * len(gold), gold))
    predicted = [float(p) for p in ridge.predict(vectorizer.transform([ex["text"] for ex in test]))]
    assert found["bow_ridge"]["test"] == pytest.approx(regression_metrics(predicted, gold))
    assert out["metric"] == "pearson"


def test_the_tagging_baseline_is_each_words_most_frequent_tag_scored_by_seqeval(tmp_path):
    lines = []
    for i in range(40):
        tokens = ["Alice", "met", "Bob", "in", "Paris"] if i % 2 else ["Paris", "is", "big", "said", "Carol"]
        tags = ["B-PER", "O", "B-PER", "O", "B-LOC"] if i % 2 else ["B-LOC", "O", "O", "O", "B-PER"]
        if i % 5 == 0:
            tags = ["O"] * 5  # "Paris" is mostly B-LOC, sometimes O
        lines += [f"{t} {g}" for t, g in zip(tokens, tags)] + [""]
    (tmp_path / "ner.conll").write_text("\n".join(lines), encoding="utf-8")
    ingest(tmp_path / "ner.conll", tmp_path / "data", original_filename="ner.conll", task="token_classification",
           mapping={"tokens": "tokens", "tags": "tags"})
    out = baselines.compute(tmp_path / "data")
    (row,) = out["baselines"]
    assert row["kind"] == "lexical" and out["metric"] == "entity_f1"
    train = _split(tmp_path / "data", "train")
    counts: dict[str, dict[str, int]] = {}
    for ex in train:
        for token, tag in zip(ex["tokens"], ex["tags"]):
            counts.setdefault(token, {}).setdefault(tag, 0)
            counts[token][tag] += 1
    best = {token: max(tags, key=tags.get) for token, tags in counts.items()}
    test = _split(tmp_path / "data", "test")
    predicted = [[best.get(t, "O") for t in ex["tokens"]] for ex in test]
    assert row["test"] == pytest.approx(token_classification_metrics(predicted, [ex["tags"] for ex in test]))


def test_the_qa_baseline_picks_the_sentence_sharing_most_words_with_the_question(tmp_path):
    articles = []
    for i in range(30):
        context = f"The sky is blue. Cats chase mice number {i}. Paris is the capital of France."
        question, answer = (("What do cats chase?", f"mice number {i}") if i % 2 else
                            ("What is the capital of France?", "Paris"))
        articles.append({"paragraphs": [{"context": context, "qas": [{"id": str(i), "question": question, "answers": [
            {"text": answer, "answer_start": context.index(answer)}]}]}]})
    (tmp_path / "qa.json").write_text(json.dumps({"version": "1.1", "data": articles}), encoding="utf-8")
    ingest(tmp_path / "qa.json", tmp_path / "data", original_filename="qa.json", task="extractive_qa",
           mapping={"question": "question", "context": "context", "answers": "answers"})
    out = baselines.compute(tmp_path / "data")
    rows = {row["name"]: row for row in out["baselines"]}
    test = _split(tmp_path / "data", "test")
    chosen = ["Cats chase mice number" if "cats" in ex["question"] else "Paris is the capital of France."
              for ex in test]
    chosen = [next(s for s in ex["context"].split(". ") if s.startswith(c[:10])) for c, ex in zip(chosen, test)]
    chosen = [c if c.endswith(".") else c + "." for c in chosen]
    gold = [[a["text"] for a in ex["answers"]] for ex in test]
    assert rows["overlap_sentence"]["test"] == pytest.approx(extractive_qa_metrics(chosen, gold))
    assert rows["first_sentence"]["test"] == pytest.approx(extractive_qa_metrics(["The sky is blue."] * len(gold),
                                                                                 gold))
    # deterministic (2026-12-02, two processes): F1 0.611 against the first sentence's 0.0, a margin of 0.61
    assert rows["overlap_sentence"]["test"]["f1"] > rows["first_sentence"]["test"]["f1"], rows


def test_sft_has_no_baseline_and_says_so(tmp_path):
    _csv(tmp_path / "s.csv", ["prompt", "response"], [(f"say {i}", f"{i}") for i in range(20)])
    ingest(tmp_path / "s.csv", tmp_path / "data", original_filename="s.csv", task="sft",
           mapping={"prompt": "prompt", "response": "response"})
    out = baselines.compute(tmp_path / "data")
    assert out["baselines"] == [] and "perplexity" in out["note"]


def test_a_run_is_judged_against_the_lexical_baseline_on_test_else_validation(classification):
    stored = baselines.compute(classification)
    lexical = baselines.lexical(stored)
    floor = lexical["test"]["accuracy"]
    below = baselines.compare(stored, test={"accuracy": floor - 0.1})
    assert below["beats"] is False and below["split"] == "test" and below["baseline_value"] == floor
    assert baselines.compare(stored, test={"accuracy": floor + 0.01})["beats"] is True
    assert baselines.compare(stored, test={"accuracy": floor})["beats"] is False  # a tie does not beat it
    on_valid = baselines.compare(stored, best_valid=1.0)
    assert on_valid["split"] == "validation" and on_valid["beats"] is True
    assert baselines.compare(stored) is None
    assert baselines.compare({"baselines": []}, test={"accuracy": 1.0}) is None


def test_the_record_notes_name_a_short_pre_training_and_a_loss_near_guessing():
    notes = record_notes(steps=79, tokens_seen=40_000, valid_loss=7.9, valid_accuracy=0.05, vocab_size=1000)
    assert "only 79 steps (40,000 tokens)" in notes[0]
    assert "close to guessing" in notes[1] and "5.0%" in notes[2]
    assert record_notes(steps=50_000, tokens_seen=10**9, valid_loss=2.1, valid_accuracy=0.55, vocab_size=30_000) == []
    assert record_notes() == []
