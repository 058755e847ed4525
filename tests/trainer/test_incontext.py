"""GPT-3's in-context evaluation: the prompt is exactly the template's output, each label's score
is its log-likelihood after the prompt (length-normalised or not), the prediction is the best
score, and accuracy is reported for every k on a tiny GPT and a tiny labelled dataset."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

from models_lib.checkpoint import save_model
from models_lib.families.gpt import GPTConfig, GPTLMHeadModel
from trainer.errors import InferenceError
from trainer.inference import incontext
from trainer.inference.loading import Loaded, clear_cache
from trainer.prep.tokenization import load_tokenizer
from trainer.training.checkpoints import TOKENIZER_FILES

TRAIN = [{"text": "open the file", "label": "io"}, {"text": "sort the list", "label": "data"},
         {"text": "read a line", "label": "io"}, {"text": "merge two dicts", "label": "data"},
         {"text": "write bytes", "label": "io"}]
HELD = [{"text": "append an item", "label": "data"}, {"text": "close the socket", "label": "io"},
        {"text": "count the keys", "label": "data"}]


@pytest.fixture(scope="module")
def gpt(bpe_tokenizer_dir):
    tokenizer = load_tokenizer(bpe_tokenizer_dir)
    torch.manual_seed(0)
    cfg = GPTConfig.from_preset("gpt-tiny", vocab_size=tokenizer.vocab_size, hidden_size=64,
                                pad_token_id=tokenizer.pad_id, eos_token_id=tokenizer.sep_id)
    return GPTLMHeadModel(cfg).eval(), tokenizer


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, gpt, bpe_tokenizer_dir):
    folder = tmp_path_factory.mktemp("gpt-checkpoint")
    save_model(gpt[0], folder)
    for name in TOKENIZER_FILES:
        shutil.copy(bpe_tokenizer_dir / name, folder / name)
    clear_cache()
    return folder


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dataset")
    (folder / "dataset.json").write_text(json.dumps({"task": "classification", "labels": ["data", "io"],
                                                      "sizes": {"train": 5, "validation": 3, "test": 0}}))
    for split, rows in (("train", TRAIN), ("validation", HELD), ("test", [])):
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_the_prompt_is_exactly_the_templates_output():
    prompt, gap = incontext.build_prompt(TRAIN[:2], HELD[0], template="Q: {text}\nA: {label}.", separator="\n---\n")
    assert prompt == "Q: open the file\nA: io.\n---\nQ: sort the list\nA: data.\n---\nQ: append an item\nA:"
    assert gap == " "
    zero, _ = incontext.build_prompt([], {"sentence1": "a {text} b", "sentence2": "c", "label": "x"},
                                     template="{sentence1} / {sentence2} => {label}")
    assert zero == "a {text} b / c =>"  # a text holding a placeholder is left as it is


@pytest.mark.parametrize("template", ["no label here {text}", "{label} {text}", "{text} {label} {label}", ""])
def test_templates_that_cannot_score_are_refused_with_a_sentence(template):
    with pytest.raises(InferenceError, match="template"):
        incontext.build_prompt([], HELD[0], template=template)


def test_demonstrations_are_seeded_and_nested():
    five = incontext.demonstrations(TRAIN, 5, seed=3, index=1)
    assert incontext.demonstrations(TRAIN, 2, seed=3, index=1) == five[:2]
    assert sorted(d["text"] for d in five) == sorted(d["text"] for d in TRAIN)
    assert incontext.demonstrations(TRAIN, 5, seed=4, index=1) != five


@pytest.mark.parametrize("normalise", [True, False])
def test_each_label_is_scored_by_its_likelihood_and_the_best_is_picked(gpt, normalise):
    model, tokenizer = gpt
    loaded = Loaded(model, tokenizer, {})
    prompt, gap = incontext.build_prompt(TRAIN[:2], HELD[0])
    labels = ["data", "io", "something longer"]
    scores = incontext.score_labels(loaded, prompt, gap, labels, normalise=normalise)
    context = tokenizer.encode(prompt)
    for label, s in zip(labels, scores):
        cont = tokenizer.encode(" " + label)
        ids = torch.tensor([context + cont])
        targets = torch.full_like(ids, -100)
        targets[0, len(context):] = ids[0, len(context):]
        with torch.no_grad():
            mean_nll = model(ids, labels=targets).loss.item()  # the mean over the label's tokens
        assert s["logprob"] == pytest.approx(-mean_nll * len(cont), rel=1e-4, abs=1e-4)
        assert s["score"] == pytest.approx(-mean_nll if normalise else -mean_nll * len(cont), rel=1e-4, abs=1e-4)
        assert len(s["tokens"]) == len(cont)
    best = max(range(3), key=lambda i: scores[i]["score"])
    assert incontext.predict(scores) == labels[best]


def test_accuracy_against_k_and_the_prompt_builder(checkpoint, dataset):
    out = incontext.evaluate(checkpoint, dataset, k_max=2, seed=1, n_queries=3)
    assert out["k"] == [0, 1, 2] and len(out["accuracy"]) == 3
    assert all(a in (0.0, 1 / 3, 2 / 3, 1.0) for a in out["accuracy"]) and out["n_queries"] == 3
    built = incontext.score_prompt(checkpoint, dataset, index=0, k=2, seed=1)
    assert built["prompt"] == out["first_prompt"]  # the builder shows what the evaluation sent
    assert built["prompt"].endswith("Text: append an item\nLabel:") and built["gold"] == "data"
    assert [s["label"] for s in built["scores"]] == ["data", "io"]
    assert built["predicted"] == max(built["scores"], key=lambda s: s["score"])["label"]


def test_an_encoder_checkpoint_or_a_non_classification_dataset_is_refused(checkpoint, dataset, trained_run, tmp_path):
    _, _, run_folder = trained_run
    bert = sorted((run_folder / "checkpoints").iterdir())[-1]
    with pytest.raises(InferenceError, match="causal language model"):
        incontext.score_prompt(bert, dataset)
    (tmp_path / "dataset.json").write_text(json.dumps({"task": "regression"}))
    with pytest.raises(InferenceError, match="classification dataset"):
        incontext.score_prompt(checkpoint, tmp_path)
    with pytest.raises(InferenceError, match="k must be a whole number"):
        incontext.score_prompt(checkpoint, dataset, k=99)


def test_the_cli_prints_accuracy_per_k_as_evaluate_gives_it(checkpoint, dataset, capsys):
    from trainer.cli import main

    code = main(["incontext", "--checkpoint", str(checkpoint), "--dataset", str(dataset), "--k-max", "2",
                 "--seed", "1", "--template", "Q: {text}\\nA: {label}"])
    out = capsys.readouterr().out
    assert code == 0, out
    direct = incontext.evaluate(checkpoint, dataset, k_max=2, seed=1, template="Q: {text}\nA: {label}")
    lines = [line.split() for line in out.splitlines() if line.strip().startswith("k=")]
    assert [line[0] for line in lines] == ["k=0", "k=1", "k=2"]
    assert [float(line[1].removeprefix("accuracy=")) for line in lines] == pytest.approx(direct["accuracy"], abs=1e-4)
    assert "3 held-out examples" in out and "seed 1" in out and "Best: k=" in out
    assert repr("Q: {text}\nA: {label}") in out  # the \n written on the command line is a new line


@pytest.mark.parametrize("args, message", [
    (["--k-max", "40"], "k_max must be a whole number from 0 to 32"),
    (["--k-max", "1", "--template", "{label} {text}"], "before {label}"),
    (["--k-max", "1", "--dataset", "/nonexistent"], "not a labelled dataset folder"),
])
def test_the_cli_says_what_is_wrong_in_one_line_and_exits_2(checkpoint, dataset, capsys, args, message):
    from trainer.cli import EXIT_USER_ERROR, main

    code = main(["incontext", "--checkpoint", str(checkpoint), "--dataset", str(dataset), *args])
    err = capsys.readouterr().err
    assert code == EXIT_USER_ERROR and message in err and err.startswith("error: ") and err.count("\n") == 1
