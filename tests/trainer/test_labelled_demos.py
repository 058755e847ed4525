"""Labelled datasets: the demo datasets made from the standard library's docstrings."""

import json
import re

import pytest

from trainer.errors import DatasetError
from trainer.prep.labelled import DEMOS, TASK_TYPES, TASKS, ingest, iter_examples, sniff, write_demo_dataset
from trainer.prep.labelled.demos import LONG_WORD


@pytest.fixture(scope="module")
def demo_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("demos")
    return {name: write_demo_dataset(name, folder) for name in DEMOS}


def test_there_is_a_demo_for_every_task_type():
    assert {demo.task for demo in DEMOS.values()} == set(TASK_TYPES)
    assert all(demo.how and demo.rows >= 300 for demo in DEMOS.values())


@pytest.mark.parametrize("name", list(DEMOS))
def test_each_demo_ingests_cleanly_with_the_suggested_mapping(demo_files, tmp_path, name):
    demo, path = DEMOS[name], demo_files[name]
    assert path.name == demo.filename
    preview = sniff(path, path.name)
    assert preview.task == demo.task and preview.mapping
    result = ingest(path, tmp_path / "out", original_filename=path.name, task=demo.task, mapping=preview.mapping)
    total = sum(result.sizes.values())
    assert 0.75 * demo.rows <= total <= 1.25 * demo.rows  # DEMOS gives the size on Python 3.11
    assert result.warnings == [] and min(result.sizes.values()) > 0
    if TASKS[demo.task].labels in ("classes", "multi", "tags"):
        assert len(result.labels) >= 2
        assert all(sum(1 for n in counts.values() if n) >= 2 for counts in result.label_counts.values())


def test_the_demos_are_deterministic(demo_files, tmp_path):
    for name, path in demo_files.items():
        assert write_demo_dataset(name, tmp_path / "again" / path.name).read_bytes() == path.read_bytes(), name


def test_classification_labels_are_packages(demo_files):
    lines = demo_files["classification"].read_text(encoding="utf-8").splitlines()
    assert lines[0] == "text,label"
    labels = {line.rsplit(",", 1)[1] for line in lines[1:]}
    assert labels == {"asyncio", "email", "http", "logging", "xml"}


def test_regression_scores_are_the_share_of_long_words(demo_files):
    for line in demo_files["regression"].read_text(encoding="utf-8").splitlines()[:50]:
        row = json.loads(line)
        words = re.findall(r"[A-Za-z]+", row["text"])
        assert row["score"] == round(sum(len(w) >= LONG_WORD for w in words) / len(words), 4)


def test_the_pairs_are_a_docstrings_first_two_paragraphs_in_order_or_swapped(demo_files, tmp_path):
    """Sentence-order prediction: each pair is a docstring's summary and second paragraph, as they
    come or swapped, about half of each split swapped, and every pair of one summary in one split (a
    summary in training with one follower and in test with another would teach its text's place)."""
    from trainer.prep.demo import demo_docstrings

    path = demo_files["pair_classification"]
    preview = sniff(path, path.name)
    assert preview.mapping["split"] == "split"
    ingest(path, tmp_path / "pairs", original_filename=path.name, task="classification", mapping=preview.mapping)
    order = {(d.paragraphs[0], d.paragraphs[1]) for d in demo_docstrings() if len(d.paragraphs) >= 2}
    summaries = {}
    for split in ("train", "validation", "test"):
        examples = list(iter_examples(tmp_path / "pairs", split))
        labels = [e["label"] for e in examples]
        assert 0.4 <= labels.count("swapped") / len(labels) <= 0.6, split
        pairs = [(e["sentence1"], e["sentence2"]) if e["label"] == "in_order" else (e["sentence2"], e["sentence1"])
                 for e in examples]
        assert set(pairs) <= order and len(set(pairs)) == len(pairs)
        summaries[split] = {first for first, _ in pairs}
    assert not summaries["train"] & (summaries["validation"] | summaries["test"])
    assert not summaries["validation"] & summaries["test"]
    total = sum(len(s) for s in summaries.values())
    assert all(0.07 * total <= len(summaries[split]) <= 0.13 * total for split in ("validation", "test"))


def test_token_classification_tags_modules_exceptions_and_code(demo_files, tmp_path):
    path = demo_files["token_classification"]
    result = ingest(path, tmp_path / "out", original_filename=path.name, task="token_classification",
                    mapping={"tokens": "tokens", "tags": "tags"})
    assert {"O", "B-MOD", "B-EXC", "B-CODE", "I-CODE"} <= set(result.labels)
    spans = {}
    for example in iter_examples(tmp_path / "out", "train"):
        for token, tag in zip(example["tokens"], example["tags"]):
            spans.setdefault(tag, set()).add(token)
    assert "ValueError" in spans["B-EXC"] and "string" not in spans.get("B-MOD", set())
    assert all(tag == "O" or tag[:2] in ("B-", "I-") for tag in result.labels)


def test_qa_answers_sit_in_their_context_and_some_questions_have_none(demo_files):
    data = json.loads(demo_files["extractive_qa"].read_text(encoding="utf-8"))
    qas = [(p["context"], qa) for article in data["data"] for p in article["paragraphs"] for qa in p["qas"]]
    assert any(qa["is_impossible"] for _, qa in qas) and any(qa["question"].endswith("raise?") and qa["answers"]
                                                            for _, qa in qas)
    for context, qa in qas:
        for answer in qa["answers"]:
            assert context[answer["answer_start"]:][: len(answer["text"])] == answer["text"]


def test_an_unknown_demo_is_refused(tmp_path):
    with pytest.raises(DatasetError, match='"ner" is not a demo dataset; choose one of classification'):
        write_demo_dataset("ner", tmp_path)
