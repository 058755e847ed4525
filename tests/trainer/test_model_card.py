"""The model card of every export (trainer/model_card.py): the README of an hf export reads as a
Hugging Face ModelCard whose data has the license, pipeline tag, tags and a model-index of the
run's own held-out metrics, and whose sections hold the run's recorded corpus, tokenizer and
training values; a license the Hub does not take is refused with a sentence, and the CLI's
--license reaches the card."""
from __future__ import annotations

import hashlib
import json

import pytest
from huggingface_hub import ModelCard

from tests.trainer.finetune_helpers import fine_tuned, ingested_demo
from trainer.export import export_checkpoint
from trainer.model_card import RECORD_FILE, ModelCardError, write_model_card


def _results(card) -> dict[tuple[str, str], float]:
    return {(r.dataset_split, r.metric_type): r.metric_value for r in card.data.eval_results or []}


def _row(text: str, label: str) -> str:
    line = next(line for line in text.splitlines() if line.startswith(f"| {label} |"))
    return line.split("|")[2].strip()


@pytest.fixture(scope="module")
def pre_card(trained_run, tmp_path_factory):
    result = export_checkpoint(trained_run[0].last_checkpoint, tmp_path_factory.mktemp("card") / "hf",
                               name="tiny bert", license="apache-2.0")
    return trained_run[0].last_checkpoint, result


def test_a_pre_training_export_has_a_card_the_hub_reads_with_the_runs_metrics(pre_card):
    checkpoint, result = pre_card
    card = ModelCard.load(result.folder / "README.md")
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    assert card.data.license == "apache-2.0" and card.data.library_name == "transformers"
    assert card.data.pipeline_tag == "fill-mask"
    assert {"lm-workbench", "bert", "mlm", "nsp", "hf"} <= set(card.data.tags)
    valid = state["metrics"]["valid"]
    assert _results(card) == {("validation", "loss"): valid["loss"], ("validation", "perplexity"): valid["perplexity"]}
    assert card.data.eval_results[0].task_type == "fill-mask"


def test_the_card_sections_hold_the_recorded_corpus_tokenizer_and_training(pre_card, tokenizer_dir):
    checkpoint, result = pre_card
    text = ModelCard.load(result.folder / "README.md").text
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    stats = json.loads((tokenizer_dir.parent / "corpus" / "stats.json").read_text())["stats"]
    shards = {s: json.loads((tokenizer_dir / "shards" / s / "shard.json").read_text())["n_tokens"]
              for s in ("train", "valid")}
    sha = hashlib.sha256((result.folder / "tokenizer.json").read_bytes()).hexdigest()
    assert sha == state["tokenizer_sha256"]
    assert _row(text, "sha256 of tokenizer.json") == f"`{sha}`"
    assert _row(text, "Documents") == f"{stats['documents']:,}"
    assert _row(text, "Bytes after cleaning") == f"{stats['bytes']:,}"
    assert _row(text, "Tokens (train / validation)") == f"{shards['train']:,} / {shards['valid']:,}"
    assert _row(text, "Sources").startswith("demo.txt")
    assert _row(text, "Cleaning rules") == "none (the text as read)"
    assert _row(text, "Kind") == "wordpiece" and _row(text, "Vocabulary size") == "2,000"
    assert _row(text, "Steps") == f"{state['step']:,}" and _row(text, "Tokens seen") == f"{state['tokens_seen']:,}"
    assert _row(text, "Seed") == "0" and _row(text, "Precision") == "fp32"
    assert _row(text, "Hardware").endswith("(cpu) x 1")
    assert _row(text, "Layers") == "2" and _row(text, "Hidden size") == "64" and _row(text, "Preset") == "bert-tiny"
    assert _row(text, "Validation loss") == f"{state['metrics']['valid']['loss']:.4f}"
    assert "AutoModelForPreTraining.from_pretrained" in text and "mean pooling" in text.lower()
    assert "## Limitations" in text


def test_what_is_not_recorded_says_so(pre_card, tmp_path):
    """A checkpoint copied away from its run and data: no invented numbers."""
    import shutil

    checkpoint, _ = pre_card
    lone = tmp_path / "lone"
    shutil.copytree(checkpoint, lone)
    state = json.loads((lone / "trainer_state.json").read_text())
    state.pop("data_dir")
    (lone / "trainer_state.json").write_text(json.dumps(state))
    out = tmp_path / "out"
    out.mkdir()
    text = ModelCard.load(write_model_card(lone, out, fmt="onnx", architecture="BertModel", files=["model.onnx"])).text
    assert "pre-training corpus is not recorded" in text
    assert "onnxruntime" in text and "InferenceSession" in text and "model.onnx" in text


@pytest.fixture(scope="module")
def tuned(trained_run, tmp_path_factory):
    from trainer.finetune import baselines

    root = tmp_path_factory.mktemp("card-ft")
    data = ingested_demo("classification", root)
    checkpoint = fine_tuned(trained_run[0].last_checkpoint, data, root / "run", steps=10, batch_size=8)
    record = {"dataset": {"name": "python modules", "baselines": baselines.compute(data)}}
    (root / "run" / RECORD_FILE).write_text(json.dumps(record))
    return checkpoint, record


def test_a_fine_tuned_export_has_its_test_and_validation_metrics_beside_the_baselines(tuned, tmp_path):
    checkpoint, record = tuned
    result = export_checkpoint(checkpoint, tmp_path / "hf", license="cc-by-4.0")
    card = ModelCard.load(result.folder / "README.md")
    assert card.data.license == "cc-by-4.0" and card.data.pipeline_tag == "text-classification"
    assert "classification" in card.data.tags
    test = json.loads((checkpoint.parent.parent / "test_metrics.json").read_text())
    valid = json.loads((checkpoint / "trainer_state.json").read_text())["metrics"]["valid"]
    found = _results(card)
    assert found[("test", "accuracy")] == test["accuracy"] and found[("validation", "accuracy")] == valid["accuracy"]
    assert {k for s, k in found if s == "test"} == set(test)
    assert all(r.dataset_name == "python modules" for r in card.data.eval_results)
    text = card.text
    lexical = next(row for row in record["dataset"]["baselines"]["baselines"] if row["kind"] == "lexical")
    accuracy = next(line for line in text.splitlines() if line.startswith("| accuracy |"))
    assert f"{test['accuracy']:.4f}" in accuracy and f"{lexical['test']['accuracy']:.4f}" in accuracy
    assert lexical["label"] in text
    assert "Labels (id2label)" in text and "AutoModelForSequenceClassification" in text
    assert "Pre-training (the base checkpoint)" in text and "Documents" in text  # the base's corpus


def test_a_bad_license_is_refused_with_a_sentence_before_anything_is_loaded(tmp_path):
    (tmp_path / "broken").mkdir()  # not even a checkpoint: the license is checked first
    with pytest.raises(ModelCardError, match=r"'wtfpl-9' is not a license an export can name; choose one of apache-2.0"):
        export_checkpoint(tmp_path / "broken", tmp_path / "out", license="wtfpl-9")
    assert not (tmp_path / "out").exists()


def test_the_cli_license_reaches_the_card(trained_run, tmp_path, capsys):
    from trainer.cli import main

    out = tmp_path / "hf"
    assert main(["export", str(trained_run[2]), str(out), "--license", "MIT"]) == 0
    assert ModelCard.load(out / "README.md").data.license == "mit"
    assert main(["export", str(trained_run[2]), str(tmp_path / "other"), "--license", "nope"]) == 2
    assert "'nope' is not a license an export can name" in capsys.readouterr().err
    assert not (tmp_path / "other").exists()
