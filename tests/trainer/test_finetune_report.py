"""What a fine-tuning run leaves about its test split (trainer/finetune/report.py): the
predictions (JSONL and CSV, errors first) and the confusion matrix / per-class table, for
classification (per label) and NER (per tag and per entity type, entity-level by seqeval)."""
from __future__ import annotations

import csv
import json

import pytest

from tests.trainer.finetune_helpers import ingested_demo
from trainer.finetune import report
from trainer.finetune.config import FinetuneConfig
from trainer.finetune.metrics import METRICS
from trainer.finetune.engine import finetune
from trainer.training.sinks import ListSink


# ------------------------------------------------------------------------------ units
def test_rows_put_the_errors_first_and_keep_the_split_order_within():
    examples = [{"text": "a"}, {"text": "b"}, {"text": "c"}, {"text": "d"}]
    rows = report.prediction_records(examples, ["x", "y", "x", "y"], ["x", "x", "x", "x"], [0.9, 0.6, 0.8, 0.7])
    assert [r["input"] for r in rows] == ["b", "d", "a", "c"]
    assert [r["correct"] for r in rows] == [False, False, True, True]
    assert rows[0] == {"input": "b", "gold": "x", "predicted": "y", "score": 0.6, "correct": False}


def test_rows_of_each_task_shape():
    pair = report.prediction_records([{"sentence1": "p", "sentence2": "q"}], [{"b", "a"}], [{"a", "b"}], [])
    assert pair == [{"input": "p ||| q", "gold": ["a", "b"], "predicted": ["a", "b"], "score": None, "correct": True}]
    qa = report.prediction_records([{"question": "who", "context": "The cat"}, {"question": "?", "context": "x"}],
                                   ["the Cat.", ""], [["cat"], []], [3.5, None])
    assert [r["correct"] for r in qa] == [True, True]  # SQuAD's normalisation; "" for no answer is right
    ner = report.prediction_records([{"tokens": ["New", "York"], "tags": ["B-LOC", "I-LOC"]}],
                                    [["B-LOC", "O"]], [["B-LOC", "I-LOC"]], [0.5])
    assert ner[0]["input"] == "New York" and ner[0]["correct"] is False
    scores = report.prediction_records([{"text": t} for t in "abc"], [1.0, 5.0, 2.5], [1.0, 1.0, 2.0], [])
    assert [r["input"] for r in scores] == ["b", "c", "a"]  # regression: the largest error first
    with pytest.raises(ValueError, match="pair up one to one"):
        report.prediction_records([{"text": "a"}], ["x", "y"], ["x", "y"], [])


def test_the_classification_report_is_sklearns():
    from sklearn.metrics import confusion_matrix, precision_recall_fscore_support

    pred, ref = ["a", "b", "b", "c", "a"], ["a", "b", "c", "c", "b"]
    out = report.test_report(METRICS["classification"], pred, ref, ["c", "b", "a"])
    assert out["confusion"]["labels"] == ["c", "b", "a"]
    assert out["confusion"]["matrix"] == confusion_matrix(ref, pred, labels=["c", "b", "a"]).tolist()
    p, r, f, n = precision_recall_fscore_support(ref, pred, labels=["c", "b", "a"], zero_division=0)
    assert [row["f1"] for row in out["per_class"]] == pytest.approx(list(f))
    assert [row["support"] for row in out["per_class"]] == list(n) == [2, 2, 1]
    assert report.test_report(METRICS["regression"], [1.0], [1.0], []) is None


def test_the_ner_report_is_entity_level_by_seqeval():
    from seqeval.metrics import classification_report

    ref = [["B-PER", "I-PER", "O", "B-LOC"], ["B-LOC", "O"]]
    pred = [["B-PER", "O", "O", "B-LOC"], ["B-LOC", "B-PER"]]
    out = report.test_report(METRICS["token_classification"], pred, ref, ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"])
    expected = classification_report(ref, pred, output_dict=True, zero_division=0)
    assert out["level"] == "entity" and [row["label"] for row in out["per_class"]] == ["LOC", "PER"]
    for row in out["per_class"]:
        assert row["f1"] == pytest.approx(expected[row["label"]]["f1-score"])
        assert row["support"] == expected[row["label"]]["support"]
    per = next(row for row in out["per_class"] if row["label"] == "PER")
    assert per["precision"] == 0.0 and per["support"] == 1  # the cut-short PER is no entity
    labels, matrix = out["confusion"]["labels"], out["confusion"]["matrix"]
    assert sum(map(sum, matrix)) == 6 and matrix[labels.index("I-PER")][labels.index("O")] == 1


# ------------------------------------------------------------------------------ written by the engine
@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    root = tmp_path_factory.mktemp("labelled")

    def make(name):
        return ingested_demo(name, root)
    return make


@pytest.mark.parametrize("name", ["classification", "token_classification"])
def test_the_engine_writes_predictions_that_agree_with_the_test_metrics(trained_run, demo, tmp_path, name):
    from trainer.prep.labelled import iter_examples

    dataset = demo(name)
    sink = ListSink()
    config = FinetuneConfig(checkpoint=str(trained_run[0].last_checkpoint), dataset=str(dataset), max_steps=20,
                            batch_size=16, max_length=64, lr=2e-3, eval_every=20, checkpoint_every=20, device="cpu")
    assert finetune(config, out_dir=tmp_path, sink=sink).status == "succeeded"
    (_, _, test), = [e for e in sink.events if e[1] == "test"]
    rows = [json.loads(line) for line in (tmp_path / report.PREDICTIONS_JSONL).read_text().splitlines()]
    examples = list(iter_examples(dataset, "test"))
    assert len(rows) == len(examples) and sorted(r["input"] for r in rows) == sorted(
        report.input_text(ex) for ex in examples)
    correct = [r["correct"] for r in rows]
    assert correct == sorted(correct)  # the errors first
    assert all(r["score"] is None or 0.0 <= r["score"] <= 1.0 for r in rows)
    with (tmp_path / report.PREDICTIONS_CSV).open(newline="", encoding="utf-8") as f:
        table = list(csv.DictReader(f))
    assert [t["input"] for t in table] == [r["input"] for r in rows] and set(table[0]) == set(report.CSV_FIELDS)
    out = json.loads((tmp_path / report.REPORT_FILE).read_text())
    if name == "classification":
        assert sum(correct) / len(rows) == pytest.approx(test["accuracy"])
        matrix = out["confusion"]["matrix"]
        assert sum(matrix[i][i] for i in range(len(matrix))) == sum(correct)
        assert sum(row["support"] for row in out["per_class"]) == len(rows)
    else:
        from seqeval.metrics import f1_score

        assert f1_score([r["gold"] for r in rows], [r["predicted"] for r in rows]) == pytest.approx(test["entity_f1"])
        assert out["level"] == "entity" and out["per_class"]
    assert any("Test predictions written" in line for line in sink.lines)


def test_samples_json_keeps_each_validation_once_and_only_the_newest(tmp_path, monkeypatch):
    from trainer.finetune import report

    monkeypatch.setattr(report, "SAMPLES_KEPT", 3)
    assert report.read_samples(tmp_path) == []
    long = "x" * (report.SAMPLE_MAX_CHARS + 10)
    for step in (10, 20, 30, 40):
        report.write_samples(tmp_path, step, report.sample_rows([(f"in {step}", long, "ref")]))
    report.write_samples(tmp_path, 30, report.sample_rows([("again", "out", "ref")]))  # a resumed run's 30
    kept = report.read_samples(tmp_path)
    assert [v["step"] for v in kept] == [20, 30, 40]
    assert kept[1]["samples"] == [{"input": "again", "generated": "out", "reference": "ref"}]
    assert len(kept[0]["samples"][0]["generated"]) == report.SAMPLE_MAX_CHARS
    assert kept[0]["samples"][0]["generated"].endswith("…")
