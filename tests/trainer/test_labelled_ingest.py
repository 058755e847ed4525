"""Labelled datasets: ingest (normalised examples per task, splits, bad data, atomic write, statistics)."""

import gzip
import json

import pytest

from trainer.errors import DatasetError
from trainer.prep.labelled import SplitSpec, ingest, iter_examples, read_meta
from trainer.prep.labelled import store

TEXT_LABEL = {"text": "text", "label": "label"}


def write(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return path


def csv_rows(n, labels=("pos", "neg", "neutral")):
    return "text,label\n" + "".join(f"example number {i},{labels[i % len(labels)]}\n" for i in range(n))


def run(tmp_path, name, data, task="classification", mapping=TEXT_LABEL, **kw):
    path = write(tmp_path, name, data)
    return ingest(path, tmp_path / "out", original_filename=name, task=task, mapping=mapping, **kw)


def fails(tmp_path, name, data, task="classification", mapping=TEXT_LABEL, **kw) -> str:
    """Ingest expecting a DatasetError; check that nothing was left behind; return the message."""
    with pytest.raises(DatasetError) as info:
        run(tmp_path, name, data, task, mapping, **kw)
    assert not (tmp_path / "out").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no temporary folder either
    return str(info.value)


def examples(tmp_path, split="train"):
    return list(iter_examples(tmp_path / "out", split))


def all_examples(tmp_path):
    return [e for split in ("train", "validation", "test") for e in examples(tmp_path, split)]


# --- one task at a time ----------------------------------------------------------------------


def test_classification_writes_normalised_splits_and_dataset_json(tmp_path):
    result = run(tmp_path, "reviews.csv", csv_rows(30))
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["dataset.json", "test.jsonl", "train.jsonl", "validation.jsonl"]
    assert result.sizes == {"train": 24, "validation": 3, "test": 3}
    assert result.labels == ["neg", "neutral", "pos"]
    assert sum(sum(c.values()) for c in result.label_counts.values()) == 30
    assert {e["label"] for e in all_examples(tmp_path)} == {"pos", "neg", "neutral"}
    assert set(examples(tmp_path)[0]) == {"text", "label"}
    meta = read_meta(out)
    assert meta["task"] == "classification" and meta["form"] == ["text", "label"]
    assert meta["mapping"] == TEXT_LABEL and meta["source"]["format"] == "csv"
    assert meta["source"]["files"]["all"]["rows"] == 30 and meta["split"]["strategy"] == "random"
    assert meta["label_counts"] == result.label_counts and meta["sizes"] == result.sizes


def test_label_counts_are_per_split(tmp_path):
    data = "text,label,split\n" + "".join(f"t{i},{'ab'[i % 2]},{['train', 'dev', 'test'][i % 3]}\n" for i in range(12))
    result = run(tmp_path, "d.csv", data, mapping={**TEXT_LABEL, "split": "split"})
    assert result.label_counts == {"train": {"a": 2, "b": 2}, "validation": {"a": 2, "b": 2},
                                   "test": {"a": 2, "b": 2}}


def test_pair_classification_with_numeric_labels_in_numeric_order(tmp_path):
    rows = [{"premise": f"p{i}", "hypothesis": f"h{i}", "label": i % 11} for i in range(22)]
    data = "".join(json.dumps(r) + "\n" for r in rows)
    result = run(tmp_path, "nli.jsonl", data, mapping={"premise": "sentence1", "hypothesis": "sentence2",
                                                       "label": "label"})
    assert result.labels == [str(i) for i in range(11)]
    assert set(examples(tmp_path)[0]) == {"sentence1", "sentence2", "label"}


def test_regression_labels_are_floats_with_statistics(tmp_path):
    data = "sentence1\tsentence2\tscore\n" + "".join(f"a{i}\tb{i}\t{i / 4}\n" for i in range(20))
    result = run(tmp_path, "sts.tsv", data, task="regression",
                 mapping={"sentence1": "sentence1", "sentence2": "sentence2", "score": "label"})
    assert sorted(e["label"] for e in all_examples(tmp_path)) == [i / 4 for i in range(20)]
    assert result.labels == [] and result.label_stats["train"]["count"] == result.sizes["train"]
    assert result.label_stats["train"]["min"] >= 0 and result.label_stats["train"]["max"] <= 4.75


def test_multilabel_from_joined_strings_and_lists(tmp_path):
    data = 'text,tags\nfirst,"sports|politics|sports"\nsecond,sports\nthird,"[""arts"", ""sports""]"\nfourth,\n'
    result = run(tmp_path, "m.csv", data, task="multilabel", mapping={"text": "text", "tags": "label"},
                 split_spec=SplitSpec(train=1.0, validation=0.0, test=0.0))
    assert [e["label"] for e in examples(tmp_path)] == [["sports", "politics"], ["sports"], ["arts", "sports"], []]
    assert result.label_counts["train"] == {"arts": 1, "politics": 1, "sports": 3}
    assert any("validation split is empty" in w for w in result.warnings)


def test_multilabel_separator_can_be_given(tmp_path):
    data = "text,tags\nfirst,a/b\nsecond,b\n"
    run(tmp_path, "m.csv", data, task="multilabel", mapping={"text": "text", "tags": "label"}, label_separator="/",
        split_spec=SplitSpec(train=1.0, validation=0.0, test=0.0))
    assert [e["label"] for e in examples(tmp_path)] == [["a", "b"], ["b"]]


def test_token_classification_from_conll_counts_tags(tmp_path):
    data = "".join(f"Word{i}\tB-X\nand\tO\nmore\tI-X\n\n" for i in range(10))
    result = run(tmp_path, "ner.conll", data, task="token_classification",
                 mapping={"tokens": "tokens", "tags": "tags"})
    assert result.labels == ["O", "B-X", "I-X"]
    assert sum(result.label_counts[s]["O"] for s in result.label_counts) == 10
    assert len(examples(tmp_path)[0]["tokens"]) == 3


def test_token_classification_from_jsonl_lists_and_spaced_strings(tmp_path):
    data = ('{"words": ["New", "York"], "ner": ["B-LOC", "I-LOC"]}\n'
            '{"words": "I like it", "ner": "O O O"}\n')
    run(tmp_path, "ner.jsonl", data, task="token_classification", mapping={"words": "tokens", "ner": "tags"},
        split_spec=SplitSpec(train=1.0, validation=0.0, test=0.0))
    assert examples(tmp_path) == [{"tokens": ["New", "York"], "tags": ["B-LOC", "I-LOC"]},
                                  {"tokens": ["I", "like", "it"], "tags": ["O", "O", "O"]}]


SQUAD = {"version": "v2.0", "data": [{"title": "t", "paragraphs": [
    {"context": "Denver won the game.", "qas": [
        {"id": "a", "question": "Who won?", "answers": [{"text": "Denver", "answer_start": 0}]},
        {"id": "b", "question": "Who lost?", "answers": [], "is_impossible": True}]}]}]}


def test_extractive_qa_from_squad_keeps_ids_and_counts_unanswerable(tmp_path):
    result = run(tmp_path, "dev.json", json.dumps(SQUAD), task="extractive_qa",
                 mapping={"question": "question", "context": "context", "answers": "answers"},
                 split_spec=SplitSpec(train=1.0, validation=0.0, test=0.0))
    assert examples(tmp_path) == [
        {"id": "a", "question": "Who won?", "context": "Denver won the game.",
         "answers": [{"text": "Denver", "answer_start": 0}]},
        {"id": "b", "question": "Who lost?", "context": "Denver won the game.", "answers": []}]
    assert result.unanswerable == {"train": 1, "validation": 0, "test": 0}


def test_extractive_qa_from_csv_with_answer_texts_or_hugging_face_answers(tmp_path):
    hf = json.dumps({"text": ["game"], "answer_start": [15]}).replace('"', '""')
    data = f'question,context,answer\nWhat?,Denver won the game.,the game\nWhat?,Denver won the game.,"{hf}"\n'
    run(tmp_path, "qa.csv", data, task="extractive_qa",
        mapping={"question": "question", "context": "context", "answer": "answers"},
        split_spec=SplitSpec(train=1.0, validation=0.0, test=0.0))
    assert [(e["id"], e["answers"]) for e in examples(tmp_path)] == [
        ("1", [{"text": "the game", "answer_start": 11}]), ("2", [{"text": "game", "answer_start": 15}])]


def test_text_to_text_and_sft_from_gzipped_jsonl(tmp_path):
    data = gzip.compress(b'{"source": "long text", "target": "short"}\n{"source": "more", "target": "less"}\n')
    run(tmp_path, "t.jsonl.gz", data, task="text_to_text", mapping={"source": "input", "target": "target"},
        split_spec=SplitSpec(train=1.0, validation=0.0, test=0.0))
    assert examples(tmp_path) == [{"input": "long text", "target": "short"}, {"input": "more", "target": "less"}]


def test_sft_messages_are_normalised(tmp_path):
    chat = [{"from": "human", "value": "Hi?"}, {"role": "Assistant", "content": "Hello.", "extra": 1}]
    share_gpt = [{"from": "human", "value": "Hi?"}, {"from": "gpt", "value": "Hello."}]
    data = json.dumps({"chat": chat}) + "\n" + json.dumps({"chat": json.dumps(share_gpt)}) + "\n"
    run(tmp_path, "c.jsonl", data, task="sft", mapping={"chat": "messages"},
        split_spec=SplitSpec(train=1.0, validation=0.0, test=0.0))
    expected = {"messages": [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Hello."}]}
    assert examples(tmp_path) == [expected, expected]


# --- splits ----------------------------------------------------------------------------------


def test_the_random_split_has_exact_sizes_and_depends_only_on_the_seed(tmp_path):
    data = csv_rows(101)
    result = run(tmp_path, "d.csv", data, split_spec=SplitSpec(train=0.7, validation=0.2, test=0.1), seed=3)
    assert result.sizes == {"train": 71, "validation": 20, "test": 10}  # round(20.2), round(10.1)
    first = {s: (tmp_path / "out" / f"{s}.jsonl").read_bytes() for s in ("train", "validation", "test")}
    run(tmp_path, "d.csv", data, split_spec=SplitSpec(train=0.7, validation=0.2, test=0.1), seed=3)
    assert first == {s: (tmp_path / "out" / f"{s}.jsonl").read_bytes() for s in first}
    run(tmp_path, "d.csv", data, split_spec=SplitSpec(train=0.7, validation=0.2, test=0.1), seed=4)
    assert first["validation"] != (tmp_path / "out" / "validation.jsonl").read_bytes()
    texts = sorted(e["text"] for e in all_examples(tmp_path))
    assert texts == sorted(f"example number {i}" for i in range(101))  # each example exactly once


def test_a_split_spec_may_come_as_form_data(tmp_path):
    result = run(tmp_path, "d.csv", csv_rows(20), split_spec={"strategy": "random", "train": "0.5",
                                                                "validation": "0.5", "test": "0"})
    assert result.sizes == {"train": 10, "validation": 10, "test": 0}


def test_the_default_split_is_80_10_10_and_keeps_file_order_within_a_split(tmp_path):
    result = run(tmp_path, "d.csv", csv_rows(50))
    assert result.sizes == {"train": 40, "validation": 5, "test": 5}
    numbers = [int(e["text"].split()[-1]) for e in examples(tmp_path)]
    assert numbers == sorted(numbers)


def test_a_small_dataset_still_gets_one_validation_and_one_test_example(tmp_path):
    result = run(tmp_path, "d.csv", csv_rows(5))  # 5 * 0.1 rounds to 0
    assert result.sizes == {"train": 3, "validation": 1, "test": 1}


def test_tiny_datasets_keep_one_training_example(tmp_path):
    result = run(tmp_path, "d.csv", "text,label\na,x\nb,y\n")
    assert result.sizes["train"] == 1 and sum(result.sizes.values()) == 2


def test_a_split_column_decides_the_split(tmp_path):
    data = "text,label,Set\na,x,train\nb,y,TRAIN\nc,x,dev\nd,y,valid\ne,x,Validation\nf,y,test\n"
    result = run(tmp_path, "d.csv", data, mapping={**TEXT_LABEL, "Set": "split"})
    assert result.sizes == {"train": 2, "validation": 3, "test": 1}
    assert [e["text"] for e in examples(tmp_path, "validation")] == ["c", "d", "e"]
    assert read_meta(tmp_path / "out")["split"]["strategy"] == "column"


def test_a_mapped_split_column_is_ignored_by_an_explicit_random_split(tmp_path):
    data = "text,label,split\n" + "".join(f"t{i},{'ab'[i % 2]},test\n" for i in range(10))
    result = run(tmp_path, "d.csv", data, mapping={**TEXT_LABEL, "split": "split"}, split_spec=SplitSpec())
    assert result.sizes == {"train": 8, "validation": 1, "test": 1}


def test_separate_files_are_the_splits(tmp_path):
    train = write(tmp_path, "train.bin", csv_rows(6))
    valid = write(tmp_path, "valid.bin", csv_rows(3))
    test = write(tmp_path, "test.bin", csv_rows(2))
    result = ingest(train, tmp_path / "out", original_filename="train.csv", task="classification", mapping=TEXT_LABEL,
                    validation_path=valid, test_path=test)
    assert result.sizes == {"train": 6, "validation": 3, "test": 2}
    again = ingest({"train": train, "dev": valid}, tmp_path / "out2", original_filename="train.csv",
                   task="classification", mapping=TEXT_LABEL)
    assert again.sizes == {"train": 6, "validation": 3, "test": 0}
    meta = read_meta(tmp_path / "out2")
    assert meta["split"]["strategy"] == "files" and meta["source"]["files"]["validation"]["rows"] == 3


def test_errors_in_a_split_file_name_the_file(tmp_path):
    train = write(tmp_path, "train.bin", csv_rows(6))
    valid = write(tmp_path, "valid.bin", "text,label\nfine,pos\n,neg\n")
    with pytest.raises(DatasetError, match=r"Row 2 \(line 3\) of the validation file has an empty text"):
        ingest(train, tmp_path / "out", original_filename="train.csv", task="classification", mapping=TEXT_LABEL,
               validation_path=valid)


def test_a_label_only_in_validation_is_a_warning(tmp_path):
    data = "text,label,split\na,x,train\nb,y,train\nc,z,validation\n"
    result = run(tmp_path, "d.csv", data, mapping={**TEXT_LABEL, "split": "split"})
    assert result.warnings == ["The validation split has label that train never shows: z."]


@pytest.mark.parametrize("spec,message", [
    (dict(strategy="shuffle"), '"shuffle" is not a way to split'),
    (dict(train=0.5, validation=0.1, test=0.1), "must add up to 1"),
    (dict(train=0.0, validation=0.5, test=0.5), "must add up to 1 with some left for training"),
    (dict(train=1.5, validation=-0.5, test=0.0), "numbers from 0 to 1"),
])
def test_split_specs_are_checked(spec, message):
    with pytest.raises(DatasetError, match=message):
        SplitSpec(**spec)


def test_split_spec_from_form_data():
    assert SplitSpec.from_dict({"strategy": "random", "train": "0.9", "validation": "0.1", "test": "0"}) == SplitSpec(
        train=0.9, validation=0.1, test=0.0)
    assert SplitSpec.from_dict(None) == SplitSpec()
    with pytest.raises(DatasetError, match='The train fraction "most" is not a number'):
        SplitSpec.from_dict({"train": "most"})


@pytest.mark.parametrize("kwargs,message", [
    (dict(split_spec=SplitSpec("column")), "needs a column mapped to the role split"),
    (dict(split_spec=SplitSpec("files")), "needs a validation or test file"),
])
def test_a_split_strategy_needs_its_data(tmp_path, kwargs, message):
    assert message in fails(tmp_path, "d.csv", csv_rows(10), **kwargs)


def test_a_split_column_without_train_rows_is_refused(tmp_path):
    data = "text,label,split\na,x,test\nb,y,dev\n"
    message = fails(tmp_path, "d.csv", data, mapping={**TEXT_LABEL, "split": "split"})
    assert "None of the 2 examples is in the train split" in message


# --- bad data: one sentence, with the row ------------------------------------------------------


@pytest.mark.parametrize("name,data,task,mapping,kwargs,message", [
    ("d.jsonl", '{"text": "a", "label": 1}\n{"txt": "b", "label": 0}\n', "classification", TEXT_LABEL, {},
     'Line 2 has no "text" field (mapped to text).'),
    ("d.csv", "review,label\na,1\n", "classification", TEXT_LABEL, {},
     'The column "text" (mapped to text) is not in the header (line 1); its columns are "review", "label".'),
    ("d.csv", "text,label\nfine,1\n   ,0\n", "classification", TEXT_LABEL, {},
     'Row 2 (line 3) has an empty text (column "text").'),
    ("d.csv", "text,label\na,pos\nb,neg\nc,neutral\n", "classification", TEXT_LABEL, {"labels": ["pos", "neg"]},
     'Row 3 (line 4) has the label "neutral", which is not one of the labels given (pos, neg).'),
    ("d.csv", "text,label\na,pos\nb,pos\nc,pos\n", "classification", TEXT_LABEL, {},
     'Every one of the 3 examples has the label "pos" and no other; classification needs at least two classes.'),
    ("d.jsonl", '{"tokens": ["a", "b"], "tags": ["O", "B-X"]}\n{"tokens": ["a", "b"], "tags": ["O"]}\n',
     "token_classification", {"tokens": "tokens", "tags": "tags"}, {},
     "Line 2 has 2 tokens but 1 tags; give each token one tag."),
    ("d.jsonl", '{"q": "Who?", "c": "Denver won.", "a": [{"text": "Denver", "answer_start": 2}]}\n',
     "extractive_qa", {"q": "question", "c": "context", "a": "answers"}, {},
     'Line 1: the answer "Denver" is not at answer_start 2 of the context, which has "nver w" there; it occurs at 0.'),
    ("d.csv", 'text,label\n"fine",1\n"broken"quote,0\n', "classification", TEXT_LABEL, {},
     "The CSV file does not parse at line 3: ',' expected after '\"'; check the delimiter and that every quote is "
     "closed."),
    ("d.csv", 'text,label\nfine,1\n"never closed,0\nmore,1\n', "classification", TEXT_LABEL, {},
     "The CSV file does not parse at line 4 (in the row that starts on line 3): unexpected end of data"),
    ("d.csv", "text,label\nfine,1\nthis, that,0\n", "classification", TEXT_LABEL, {},
     "Row 2 (line 3) has 3 fields but the header has 2; check the delimiter and that fields holding ',' are quoted."),
    ("d.csv", "text,score\na,0.5\nb,high\n".encode(), "regression", {"text": "text", "score": "label"}, {},
     'Row 2 (line 3) has the label "high", which is not a number; regression needs a number in every row.'),
    ("d.jsonl", '{"text": "a", "score": 1}\n{"text": "b", "score": "NaN"}\n', "regression",
     {"text": "text", "score": "label"}, {}, 'Line 2 has the label "NaN", which is not a number'),
    ("d.csv", "text,label\nok,1\ncaf\xe9,0\n".encode("latin-1"), "classification", TEXT_LABEL, {},
     "The file is not valid UTF-8: the byte 0xE9 at byte offset 19 (line 3) cannot be decoded."),
    ("d.csv", b"", "classification", TEXT_LABEL, {}, "The file is empty (0 bytes)."),
    ("d.csv", "text,label\n\n\n", "classification", TEXT_LABEL, {}, "The file has a header (line 1) but no rows."),
    ("d.jsonl", '{"text": "a", "label": 1}\n[1, 2]\n', "classification", TEXT_LABEL, {},
     "Line 2 holds a JSON list, not an object"),
    ("d.jsonl", '{"text": "a", "label": 1}\n{"text": "b", "label": \n', "classification", TEXT_LABEL, {},
     "Line 2 is not valid JSON (Expecting value at column 24)"),
    ("d.conll", "EU\tB-ORG\nrejects\n", "token_classification", {"tokens": "tokens", "tags": "tags"}, {},
     "Line 2 does not hold a token and a tag"),
    ("d.conll", "EU\tO\nrejects\tO\n", "token_classification", {"tokens": "tokens", "tags": "tags"}, {},
     'Every token of the 1 sentences is tagged "O"; token classification needs at least two tags.'),
    ("d.jsonl", '{"p": "Hi", "r": "Hello"}\n{"p": "Bye", "r": null}\n', "sft", {"p": "prompt", "r": "response"}, {},
     'Line 2 has no response: "r" is null.'),
    ("d.jsonl", '{"m": [{"role": "user", "content": "Hi"}]}\n', "sft", {"m": "messages"}, {},
     "Line 1 has no assistant message"),
    ("d.csv", "text,label,split\na,1,train\nb,0,holdout\n", "classification", {**TEXT_LABEL, "split": "split"}, {},
     'Row 2 (line 3) has the split "holdout"; use train, validation (or valid, dev) or test.'),
])
def test_bad_data_is_refused_in_one_sentence_naming_the_row(tmp_path, name, data, task, mapping, kwargs, message):
    assert message in fails(tmp_path, name, data, task, mapping, **kwargs)


def test_a_label_set_needs_two_labels_and_a_task_with_labels(tmp_path):
    assert "needs at least two labels" in fails(tmp_path, "d.csv", csv_rows(4), labels=["pos"])
    assert "has no set of labels to check" in fails(tmp_path, "d.csv", "text,score\na,1\n", task="regression",
                                                    mapping={"text": "text", "score": "label"}, labels=["a", "b"])


def test_a_given_label_set_orders_the_labels(tmp_path):
    result = run(tmp_path, "d.csv", csv_rows(6, labels=("neg", "pos")), labels=["pos", "neg", "unused"])
    assert result.labels == ["pos", "neg", "unused"] and result.label_counts["train"]["unused"] == 0


# --- atomic write ------------------------------------------------------------------------------


def test_a_failed_ingest_leaves_an_existing_dataset_as_it_was(tmp_path):
    run(tmp_path, "d.csv", csv_rows(10))
    before = {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}
    with pytest.raises(DatasetError):
        run(tmp_path, "d.csv", csv_rows(10) + "bad,row,here\n")
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.csv", "out"]


def test_an_error_while_writing_the_splits_removes_everything(tmp_path, monkeypatch):
    def broken(*args):
        raise OSError("disk full")

    monkeypatch.setattr(store, "_write_splits", broken)
    with pytest.raises(OSError):
        run(tmp_path, "d.csv", csv_rows(10))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.csv"]


def test_ingest_into_an_existing_folder_replaces_the_dataset_files_only(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "upload.csv").write_text("kept")
    run(tmp_path, "d.csv", csv_rows(10))
    assert sorted(p.name for p in out.iterdir()) == ["dataset.json", "test.jsonl", "train.jsonl", "upload.csv",
                                                      "validation.jsonl"]
    assert (out / "upload.csv").read_text() == "kept"


def test_an_interrupted_install_leaves_no_dataset_json(tmp_path, monkeypatch):
    """dataset.json marks a complete dataset: it goes first and comes back last."""
    run(tmp_path, "d.csv", csv_rows(10))
    real_replace = store.os.replace

    def replace_once_then_fail(src, dst):
        if dst.name != "train.jsonl":
            raise OSError("power cut")
        real_replace(src, dst)

    monkeypatch.setattr(store.os, "replace", replace_once_then_fail)
    with pytest.raises(OSError):
        run(tmp_path, "d.csv", csv_rows(12))
    assert not (tmp_path / "out" / "dataset.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.csv", "out"]


def test_progress_goes_from_0_to_100(tmp_path):
    seen = []
    run(tmp_path, "d.csv", csv_rows(50), progress=seen.append)
    assert seen[0] == 0 and seen[-1] == 100 and seen == sorted(seen) and len(seen) == len(set(seen))


def test_reading_back_a_missing_dataset_or_split_says_so(tmp_path):
    with pytest.raises(DatasetError, match="holds no prepared dataset"):
        read_meta(tmp_path)
    run(tmp_path, "d.csv", csv_rows(10))
    with pytest.raises(DatasetError, match='"dev" is not a split'):
        list(iter_examples(tmp_path / "out", "dev"))
