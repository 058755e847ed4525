"""Classification and regression as text to text on T5 (trainer/finetune/text_classify.py): the label
written as a word, read back (an output that is no label counted wrong), scored with the encoders'
metrics and test report, and asked in the explorer."""
from __future__ import annotations

import csv
import json
import math

import pytest
import torch
from sklearn import metrics as skm

from tests.trainer.conftest import T5_RECIPE
from trainer import finetune as tasks
from trainer.errors import ConfigError
from trainer.finetune import text_classify
from trainer.finetune.config import FinetuneConfig
from trainer.finetune.engine import finetune
from trainer.finetune.metrics import METRICS
from trainer.finetune.text_classify import INVALID, T5_CLASSIFICATION, T5_REGRESSION
from trainer.training.sinks import ListSink


@pytest.fixture(scope="module")
def t5_base(tmp_path_factory, sentinel_tokenizer_dir, make_family_config):
    """The checkpoint of a 30-step tiny T5 pre-training run."""
    from trainer.training.engine import train

    config = make_family_config("t5", max_steps=30, checkpoint_every=30, eval_every=30, **T5_RECIPE)
    return train(config, data_dir=sentinel_tokenizer_dir, out_dir=tmp_path_factory.mktemp("t5"),
                 sink=ListSink()).last_checkpoint


def demo(root, name: str):
    from trainer.prep.labelled import DEMOS, ingest, sniff, write_demo_dataset

    source = write_demo_dataset(name, root / DEMOS[name].filename)
    preview = sniff(source, source.name)
    ingest(source, root / "data", original_filename=source.name, task=preview.task, mapping=preview.mapping)
    return root / "data"


@pytest.fixture(scope="module")
def classification(tmp_path_factory):
    return demo(tmp_path_factory.mktemp("cls"), "classification")


def _tune(base, dataset, out_dir, **changes):
    settings = dict(max_steps=12, batch_size=16, max_length=48, max_target_length=6, lr=3e-3, eval_every=12,
                    checkpoint_every=12, log_every=6, device="cpu", num_threads=1, samples_shown=2,
                    source_prefix="classify: ")
    sink = ListSink()
    result = finetune(FinetuneConfig(checkpoint=str(base), dataset=str(dataset), **{**settings, **changes}),
                      out_dir=out_dir, sink=sink)
    return result, sink


# ---------------------------------------------------------------------------- reading outputs
def test_an_output_that_is_no_label_is_invalid_and_counted_wrong_outside_the_f1_average():
    forms = text_classify.label_forms(["Positive", "negative"], str.lower)  # a lowercasing tokenizer
    assert forms == {"positive": "Positive", "negative": "negative"}
    assert [text_classify.read_label(t, forms) for t in ("positive", " negative ", "Positive", "neutral", "")] == \
        ["Positive", "negative", INVALID, INVALID, INVALID]
    predictions = ["Positive", INVALID, "negative", "Positive", INVALID, "negative"]
    references = ["Positive", "negative", "negative", "negative", "Positive", "negative"]
    scores = text_classify.classification_scores(predictions, references)
    assert scores["accuracy"] == pytest.approx(3 / 6)  # both invalid outputs are wrong
    labels = ["Positive", "negative"]
    assert scores["f1_macro"] == pytest.approx(skm.f1_score(references, predictions, labels=labels, average="macro"))
    assert scores["f1_micro"] == pytest.approx(skm.f1_score(references, predictions, labels=labels, average="micro"))
    assert scores["mcc"] == pytest.approx(skm.matthews_corrcoef(references, predictions))
    # as a class of its own, INVALID (F1 0) would drag the macro average down
    assert scores["f1_macro"] > skm.f1_score(references, predictions, average="macro")
    assert set(scores) == {"accuracy", "f1_macro", "f1_micro", "mcc"}  # what an encoder's run reports
    with pytest.raises(ConfigError, match="The labels 'Yes' and 'yes' are both written 'yes' by this checkpoint's "
                                          "tokenizer"):
        text_classify.label_forms(["Yes", "yes"], str.lower)
    with pytest.raises(ConfigError, match="The labels 'xml' and 'asyncio' are both written as unknown tokens"):
        text_classify.label_forms(["xml", "asyncio"], lambda label: "")  # [UNK] decodes to nothing
    assert text_classify.read_score(" 3.8") == (3.8, True)
    assert text_classify.read_score("three") == (text_classify.INVALID_SCORE, False)
    assert text_classify.read_score("nan") == (text_classify.INVALID_SCORE, False)


def test_t5_is_offered_classification_and_regression_as_text_to_text_and_nothing_else_new(t5_base):
    assert tasks.check_checkpoint(t5_base, "classification") == "t5"
    assert tasks.check_checkpoint(t5_base, "regression") == "t5"
    assert tasks.for_family("classification", "t5") is T5_CLASSIFICATION
    assert tasks.for_family("regression", "t5") is T5_REGRESSION
    assert tasks.for_family("classification", "bert") is tasks.get("classification")
    with pytest.raises(ConfigError, match="A T5 checkpoint cannot be fine-tuned for token classification"):
        tasks.check_checkpoint(t5_base, "token_classification")


def test_examples_become_the_prefixed_text_and_the_label_word_or_the_rounded_score(t5_base):
    from trainer.prep.tokenization import load_tokenizer

    tok = load_tokenizer(t5_base)
    config = FinetuneConfig(checkpoint="x", dataset="y", family="t5", source_prefix="classify: ")
    batch = T5_CLASSIFICATION.build_collator(tok, [], 64, config)(
        [{"text": "Open a file.", "label": "io"}, {"sentence1": "A b.", "sentence2": "C d.", "label": "os"}])
    rows = [r[: int(n)].tolist() for r, n in zip(batch.input_ids, batch.attention_mask.sum(1))]
    write = tok.tok.encode
    assert rows[1] == write("classify: sentence1: A b. sentence2: C d.", add_special_tokens=False).ids + [tok.sep_id]
    assert batch.labels[0][: len(write("io", add_special_tokens=False).ids) + 1].tolist() == \
        write("io", add_special_tokens=False).ids + [tok.sep_id]
    assert batch.targets == ["io", "os"] and batch.gold == ["io", "os"]
    collate = T5_REGRESSION.build_collator(tok, [], 64, config)
    batch = collate([{"text": "x", "label": 0.37}, {"text": "y", "label": 4.75}])
    assert batch.targets == ["0.4", "4.8"] and batch.gold == [0.37, 4.75]  # T5's STS-B: the nearest 0.2


# ---------------------------------------------------------------------------- runs
def test_t5_classification_reports_the_encoders_metrics_test_report_and_predictions(t5_base, classification,
                                                                                     tmp_path):
    from trainer.inference import downstream
    from trainer.prep.labelled import read_meta

    labels = [str(x) for x in read_meta(classification)["labels"]]
    # 40 steps: at 12 the tiny model wrote no label at all once batches were length-grouped; at 20 and 30 it
    # wrote a label for all 101 test rows
    result, sink = _tune(t5_base, classification, tmp_path / "run", max_steps=40, eval_every=40, checkpoint_every=40)
    assert result.status == "succeeded", sink.lines
    (_, valid), = sink.split("valid")
    (_, test), = sink.split("test")
    keys = {m.name for m in METRICS["classification"].metrics}  # what a BERT run on the dataset charts
    assert keys == {"accuracy", "f1_macro", "f1_micro", "mcc"} and keys <= set(valid) and keys <= set(test)
    assert json.loads((tmp_path / "run" / "test_metrics.json").read_text())["accuracy"] == test["accuracy"]
    assert any(line.startswith("Sample 1: input «") for line in sink.lines)
    report = json.loads((tmp_path / "run" / "test_report.json").read_text())
    assert report["task"] == "classification" and report["confusion"]["labels"][: len(labels)] == labels
    assert set(report["confusion"]["labels"]) - set(labels) <= {INVALID}
    rows = [json.loads(line) for line in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    assert rows and {r["gold"] for r in rows} <= set(labels)
    assert all(r["predicted"] in (*labels, INVALID) and r["correct"] == (r["predicted"] == r["gold"]) for r in rows)
    assert sum(r["correct"] for r in rows) / len(rows) == pytest.approx(test["accuracy"])
    assert (tmp_path / "run" / "predictions.csv").is_file()
    # each score is the probability of the label written, as the explorer's classify gives it; none when no label
    assert all((r["score"] is None) == (r["predicted"] == INVALID) for r in rows)
    valid = [r for r in rows if r["predicted"] != INVALID]
    assert valid, "the tiny model wrote no label at all: the scores go untested"
    for row in valid[:3]:
        assert 0.0 < row["score"] <= 1.0
        shown = downstream.classify(result.last_checkpoint, row["input"], "")
        assert row["score"] == pytest.approx(
            next(x["probability"] for x in shown["labels"] if x["label"] == row["predicted"]), abs=1e-5)
    with open(tmp_path / "run" / "predictions.csv", newline="") as f:
        cells = {r["input"]: r["score"] for r in csv.DictReader(f)}
    assert all(cells[r["input"]] == ("" if r["score"] is None else str(r["score"])) for r in rows)
    # the checkpoint records what it writes, and the explorer asks it
    state = json.loads((result.last_checkpoint / "trainer_state.json").read_text())
    assert state["config"]["label_words"] == labels and state["config"]["task"] == "classification"
    answer = downstream.classify(result.last_checkpoint, "Return a new dictionary.", "")
    assert answer["problem_type"] == "single_label_classification" and isinstance(answer["generated"], str)
    assert sorted(r["label"] for r in answer["labels"]) == sorted(labels)
    assert sum(r["probability"] for r in answer["labels"]) == pytest.approx(1.0, abs=1e-5)
    assert answer["predicted"] == ([answer["generated"]] if answer["generated"] in labels else [])


def test_the_step_reads_generated_words_as_labels_and_the_explorer_scores_whole_labels(t5_base, tmp_path):
    from models_lib.checkpoint import load_model
    from trainer.finetune.text2text import T5Batch
    from trainer.prep.tokenization import load_tokenizer

    config = FinetuneConfig(checkpoint=str(t5_base), dataset="y", family="t5", task="classification")
    model = load_model(t5_base).eval()
    step = T5_CLASSIFICATION.step(config, model, "cpu", task=T5_CLASSIFICATION, labels=["json", "os"])
    sink = ListSink()
    step.sink = sink
    step.start_validation()
    empty = torch.zeros(4, 2, dtype=torch.long)
    batch = text_classify.LabelWordBatch(empty, empty, empty, ["a", "b", "c", "d"], ["json", "os", "os", "json"],
                                         ["", "", "", ""], gold=["json", "os", "os", "json"])
    assert isinstance(batch, T5Batch)
    json_word, os_word = step.written("json"), step.written("os")  # as the tokenizer gives them back
    step.gather([json_word, f" {os_word} ", "posix", os_word], batch)
    values = step.finish_validation()
    assert step.predictions == ["json", "os", INVALID, "os"]
    assert values["accuracy"] == 0.5
    assert "1 of 4 generated outputs were not one of the labels; they count as wrong." in sink.lines
    # the label probabilities: each whole "label </s>" by teacher forcing, renormalised
    tok = load_tokenizer(t5_base)
    ids = torch.tensor([tok.tok.encode("a text", add_special_tokens=False).ids + [tok.sep_id]])
    targets = [tok.tok.encode(w, add_special_tokens=False).ids + [tok.sep_id] for w in ("json", "os")]
    with torch.no_grad():
        probs = text_classify.label_probabilities(model, ids, torch.ones_like(ids), targets)
        logp = []
        for t in targets:
            decoder = torch.tensor([[model.config.decoder_start_token_id, *t[:-1]]])
            out = torch.log_softmax(model(ids, torch.ones_like(ids), decoder_input_ids=decoder).logits[0], -1)
            logp.append(float(sum(out[i, tok_id] for i, tok_id in enumerate(t))))
    assert probs == pytest.approx(torch.softmax(torch.tensor(logp), 0).tolist(), abs=1e-5)
    with pytest.raises(ConfigError, match="class_weights: balanced weighs a classifier head's classes"):
        T5_CLASSIFICATION.step(config.replace(class_weights="balanced"), model, "cpu", task=T5_CLASSIFICATION,
                               labels=["json", "os"])


def test_t5_regression_writes_the_rounded_score_and_is_scored_against_the_real_one(t5_base, tmp_path):
    from trainer.inference import downstream

    dataset = demo(tmp_path, "regression")
    result, sink = _tune(t5_base, dataset, tmp_path / "run", source_prefix="long words: ")
    assert result.status == "succeeded", sink.lines
    (_, test), = sink.split("test")
    assert {"pearson", "spearman", "mse"} <= set(test)
    assert not (tmp_path / "run" / "test_report.json").exists()  # no classes, as for an encoder's regression
    rows = [json.loads(line) for line in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    assert all(isinstance(r["predicted"], float) and isinstance(r["gold"], float) for r in rows)
    # the score: the probability of the whole generated output (the value's text and </s>)
    assert all(isinstance(r["score"], float) and 0.0 <= r["score"] <= 1.0 for r in rows)  # rounded to 6 places
    answer = downstream.classify(result.last_checkpoint, "Return the normalised absolute pathname.", "")
    assert answer["problem_type"] == "regression" and answer["labels"] == []
    value, ok = text_classify.read_score(answer["generated"])
    assert answer["value"] == (value if ok else None)


def test_the_step_scores_each_output_by_the_probability_of_what_it_wrote(t5_base):
    """The predictions file's score: the written label's renormalised probability (none for no label);
    for regression the whole generated output's probability, its tokens up to the first </s>."""
    from models_lib.checkpoint import load_model
    from trainer.prep.tokenization import load_tokenizer

    tok = load_tokenizer(t5_base)
    model = load_model(t5_base).eval()
    eos = tok.sep_id
    write = lambda text: tok.tok.encode(text, add_special_tokens=False).ids  # noqa: E731
    config = FinetuneConfig(checkpoint=str(t5_base), dataset="y", family="t5", task="classification")
    examples = [{"text": "Open a file.", "label": "json"}, {"text": "Join two paths.", "label": "os"}]

    def teacher_forced(text_ids, output):  # log p(output | input), one token at a time
        ids = torch.tensor([text_ids])
        decoder = torch.tensor([[model.config.decoder_start_token_id, *output[:-1]]])
        logp = torch.log_softmax(model(ids, torch.ones_like(ids), decoder_input_ids=decoder).logits[0].float(), -1)
        return float(sum(logp[i, t] for i, t in enumerate(output)))

    step = T5_CLASSIFICATION.step(config, model, "cpu", task=T5_CLASSIFICATION, labels=["json", "os"])
    batch = T5_CLASSIFICATION.build_collator(tok, [], 32, config)(examples)
    pad = model.config.pad_token_id
    json_ids, other = write("json") + [eos], write("posix")
    width = max(len(json_ids), len(other)) + 1
    generated = torch.tensor([json_ids + [pad] * (width - len(json_ids)), other + [eos] * (width - len(other))])
    step.start_validation()
    with torch.no_grad():
        step.gather_generated(generated, batch)
        sources = [write(ex["text"]) + [eos] for ex in examples]
        targets = [write(w) + [eos] for w in ("json", "os")]
        expected = torch.softmax(torch.tensor([teacher_forced(sources[0], t) for t in targets]), 0)[0]
    assert step.predictions == ["json", INVALID]
    assert step.scores == [pytest.approx(float(expected), abs=1e-5), None]

    regression = config.replace(task="regression")
    step = T5_REGRESSION.step(regression, model, "cpu", task=T5_REGRESSION, labels=[])
    batch = T5_REGRESSION.build_collator(tok, [], 32, regression)([{**ex, "label": 1.0} for ex in examples])
    three = write("3.8") + [eos]
    generated = torch.tensor([three + [pad, pad], write("x") + [eos] * (len(three) + 2 - len(write("x")))])
    step.start_validation()
    with torch.no_grad():
        step.gather_generated(generated, batch)
        expected = [teacher_forced(sources[0], three), teacher_forced(sources[1], write("x") + [eos])]
    assert all(0.0 < score <= 1.0 for score in step.scores)
    assert [math.log(score) for score in step.scores] == pytest.approx(expected, abs=1e-4)  # tiny: compare logs
