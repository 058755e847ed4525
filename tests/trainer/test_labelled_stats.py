"""Labelled datasets: label counts for the bar chart and token-length histograms."""

import json

import pytest

from trainer.errors import DatasetError
from trainer.prep.labelled import SplitSpec, ingest, label_counts, length_histogram, model_input
from trainer.prep.labelled.stats import _round_width
from trainer.prep.tokenization import load_tokenizer

WORDS = "the module returns a list of strings for each file in the directory when it is called".split()


def dataset(tmp_path, name, rows, task, mapping, **kw):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "out"
    ingest(path, out, original_filename=name, task=task, mapping=mapping, **kw)
    return out


def text(i: int) -> str:
    return " ".join(WORDS[(i + k) % len(WORDS)] for k in range(1 + i % 40))  # 1 to 40 words


def test_label_counts_line_up_with_the_labels_per_split(tmp_path):
    rows = [{"text": f"t{i}", "label": "abc"[i % 3], "split": ["train", "dev", "test"][i % 2 * (1 + i % 4 // 2)]}
            for i in range(40)]
    out = dataset(tmp_path, "d.jsonl", rows, "classification", {"text": "text", "label": "label", "split": "split"})
    chart = label_counts(out)
    assert chart["kind"] == "classes" and chart["labels"] == ["a", "b", "c"]
    expected = {split: [sum(1 for r in rows if r["label"] == label and r["split"] == name) for label in "abc"]
                for split, name in (("train", "train"), ("validation", "dev"), ("test", "test"))}
    assert chart["counts"] == expected


def test_regression_scores_are_binned(tmp_path):
    rows = [{"text": f"t{i}", "score": i / 10} for i in range(31)]  # 0.0 .. 3.0
    out = dataset(tmp_path, "d.jsonl", rows, "regression", {"text": "text", "score": "label"})
    chart = label_counts(out)
    assert chart["kind"] == "bins" and len(chart["labels"]) == 10 and chart["labels"][0] == "0–0.3"
    assert sum(sum(c) for c in chart["counts"].values()) == 31
    totals = [sum(chart["counts"][s][i] for s in chart["counts"]) for i in range(10)]
    assert totals == [3] * 9 + [4]  # the top score goes to the last bin


def test_tasks_without_labels_have_an_empty_chart(tmp_path):
    out = dataset(tmp_path, "d.jsonl", [{"input": "a", "target": "b"}] * 3, "text_to_text",
                  {"input": "input", "target": "target"})
    assert label_counts(out) == {"kind": "none", "labels": [], "counts": {"train": [], "validation": [], "test": []}}


def test_the_length_histogram_counts_every_example_as_the_model_sees_it(tmp_path, tokenizer_dir):
    rows = [{"text": text(i), "label": i % 2} for i in range(60)]
    out = dataset(tmp_path, "d.jsonl", rows, "classification", {"text": "text", "label": "label"})
    tok = load_tokenizer(tokenizer_dir).tok
    lengths = [len(tok.encode(r["text"]).ids) for r in rows]  # [CLS] ... [SEP]
    assert min(lengths) >= 3
    max_length = sorted(lengths)[30]
    hist = length_histogram(out, tokenizer_dir, max_length)
    assert hist.examples == 60 and sum(hist.counts) == 60
    assert hist.truncated == sum(n > max_length for n in lengths) and hist.truncated_share == hist.truncated / 60
    assert hist.longest == max(lengths) and hist.mean == pytest.approx(sum(lengths) / 60)
    assert hist.median == sorted(lengths)[29] and hist.p95 == sorted(lengths)[56]
    width = hist.edges[1]
    assert width in (1, 2, 5, 10) and hist.edges == [i * width for i in range(len(hist.counts) + 1)]
    assert hist.edges[-1] > hist.longest
    for length in set(lengths):  # each length lands in its bin
        assert hist.counts[length // width] >= lengths.count(length)
    assert length_histogram(out, tokenizer_dir, 10_000).truncated == 0
    assert length_histogram(out, tokenizer_dir, max_length, splits=("train",)).examples == 48
    assert length_histogram(out, tokenizer_dir, max_length, max_examples=7).examples == 7


def test_pairs_questions_and_pre_split_tokens_are_measured_together(tmp_path, tokenizer_dir):
    tok = load_tokenizer(tokenizer_dir).tok
    rows = [{"s1": text(i), "s2": text(i + 7), "y": i % 2} for i in range(10)]
    out = dataset(tmp_path, "p.jsonl", rows, "classification", {"s1": "sentence1", "s2": "sentence2", "y": "label"},
                  split_spec=SplitSpec(train=1.0, validation=0.0, test=0.0))
    hist = length_histogram(out, tokenizer_dir, 8)
    assert hist.longest == max(len(tok.encode(r["s1"], r["s2"]).ids) for r in rows)
    assert model_input({"question": "q", "context": "c"}) == ("q", "c")
    assert model_input({"tokens": ["a", "b"], "tags": ["O", "O"]}) == ["a", "b"]
    assert model_input({"messages": [{"role": "user", "content": "a"},
                           {"role": "assistant", "content": "b"}]}) == "a\nb"
    (tmp_path / "t").mkdir()
    rows = [{"tokens": WORDS[: 3 + i], "tags": ["O"] * (2 + i) + ["B-X"]} for i in range(5)]
    out = dataset(tmp_path / "t", "t.jsonl", rows, "token_classification", {"tokens": "tokens", "tags": "tags"},
                  split_spec=SplitSpec(train=1.0, validation=0.0, test=0.0))
    expected = max(len(tok.encode(r["tokens"], is_pretokenized=True).ids) for r in rows)
    assert length_histogram(out, tokenizer_dir, 64).longest == expected


def test_length_histogram_refuses_a_zero_length(tmp_path, tokenizer_dir):
    with pytest.raises(DatasetError, match="at least 1 token"):
        length_histogram(tmp_path, tokenizer_dir, 0)


@pytest.mark.parametrize("raw,width", [(0.3, 1), (1, 1), (1.5, 2), (3, 5), (7, 10), (11, 20), (26, 50), (420, 500)])
def test_bin_widths_are_round_numbers(raw, width):
    assert _round_width(raw) == width
