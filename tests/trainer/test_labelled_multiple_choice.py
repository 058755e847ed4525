"""Labelled datasets for multiple choice (GPT-1's RACE / Story Cloze layout): the column mapping
suggested from the headers (choice0..choiceN columns, or one column holding a list), the normalised
examples, a sentence with the row number for each kind of bad data, and the demo dataset."""

import csv
import io
import json

import pytest

from trainer.errors import DatasetError
from trainer.prep.labelled import DEMOS, check_mapping, ingest, iter_examples, label_counts, sniff, suggest
from trainer.prep.labelled import write_demo_dataset
from trainer.prep.demo import demo_docstrings
from trainer.prep.labelled.stats import model_input

CHOICE_COLUMNS = {"context": "context", "choice0": "choices", "choice1": "choices", "choice2": "choices",
                  "label": "label"}


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def csv_text(rows, header=("context", "choice0", "choice1", "choice2", "label")):
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


def good_rows(n=20):
    return [[f"question number {i}", f"right {i}", f"wrong {i}", f"other {i}", str(i % 3)] for i in range(n)]


def ingest_csv(tmp_path, rows, mapping=CHOICE_COLUMNS, header=None, **kw):
    path = write(tmp_path, "mc.csv", csv_text(rows, header) if header else csv_text(rows))
    return ingest(path, tmp_path / "out", original_filename="mc.csv", task="multiple_choice", mapping=mapping, **kw)


def fails(tmp_path, rows, **kw) -> str:
    with pytest.raises(DatasetError) as info:
        ingest_csv(tmp_path, rows, **kw)
    assert not (tmp_path / "out").exists()  # nothing half-stored
    return str(info.value)


# --- the mapping ------------------------------------------------------------------------------


def test_the_mapping_is_suggested_from_numbered_choice_columns_or_a_list_column():
    mapping, task = suggest(["id", "article", "question", "option_a", "option_b", "option_c", "option_d", "answer_key"])
    assert task == "multiple_choice"  # RACE's layout
    assert mapping == {"article": "context", "question": "question", "option_a": "choices", "option_b": "choices",
                       "option_c": "choices", "option_d": "choices", "answer_key": "label"}
    mapping, task = suggest(["sentence", "ending0", "ending1", "label"])
    assert task == "classification" and mapping == {"sentence": "text", "label": "label"}  # no context, question
    mapping, task = suggest(["question", "choices", "label", "split"])
    assert task == "multiple_choice" and mapping == {"question": "question", "choices": "choices", "label": "label",
                                                     "split": "split"}
    assert suggest(["text", "label"])[1] == "classification"  # the other tasks are suggested as before
    assert check_mapping("multiple_choice", CHOICE_COLUMNS) == ("context", "choices", "label")
    with pytest.raises(DatasetError, match="The role label is given to two columns"):
        check_mapping("multiple_choice", {**CHOICE_COLUMNS, "choice2": "label"})
    with pytest.raises(DatasetError, match="Multiple choice needs columns mapped to context, question, choices and "
                                           "label, or context, choices and label"):
        check_mapping("multiple_choice", {"context": "context", "label": "label"})


def test_choice_columns_become_a_list_in_column_order_and_the_label_an_index(tmp_path):
    rows = [["Which opens a file?", "close", "open", "seek", "1"], ["Which closes it?", "close", "open", "seek", "close"],
            ["Which moves?", "close", "open", "seek", "C"]] * 4
    result = ingest_csv(tmp_path, rows, split_spec={"strategy": "random", "train": 1.0, "validation": 0.0,
                                                    "test": 0.0})
    examples = list(iter_examples(tmp_path / "out", "train"))
    assert examples[:3] == [{"context": "Which opens a file?", "choices": ["close", "open", "seek"], "label": 1},
                            {"context": "Which closes it?", "choices": ["close", "open", "seek"], "label": 0},
                            {"context": "Which moves?", "choices": ["close", "open", "seek"], "label": 2}]
    assert result.labels == [] and result.label_counts["train"] == {"0": 4, "1": 4, "2": 4}
    chart = label_counts(tmp_path / "out")
    assert chart["labels"] == ["choice 0", "choice 1", "choice 2"] and chart["counts"]["train"] == [4, 4, 4]
    assert model_input(examples[0]) == ("Which opens a file?", "close")


def test_a_jsonl_list_of_choices_with_a_question_and_context(tmp_path):
    lines = [{"context": f"passage {i}", "question": f"q {i}?", "choices": [f"a{i}", f"b{i}", f"c{i}", f"d{i}"],
              "answer": i % 4} for i in range(12)]
    path = write(tmp_path, "race.jsonl", "".join(json.dumps(line) + "\n" for line in lines))
    mapping = {"context": "context", "question": "question", "choices": "choices", "answer": "label"}
    ingest(path, tmp_path / "out", original_filename=path.name, task="multiple_choice", mapping=mapping)
    examples = [e for split in ("train", "validation", "test") for e in iter_examples(tmp_path / "out", split)]
    assert sorted(e["label"] for e in examples) == sorted(i % 4 for i in range(12))
    assert all(len(e["choices"]) == 4 and e["question"].startswith("q ") for e in examples)


def test_one_choice_is_only_a_label_when_the_right_one_is_always_in_one_place(tmp_path):
    rows = [[f"question {i}", f"right {i}", f"wrong {i}", f"other {i}", "0"] for i in range(10)]
    result = ingest_csv(tmp_path, rows)
    assert any("The right choice is choice 0 in every one of the 10 examples" in w for w in result.warnings)


# --- bad data, each with its row ----------------------------------------------------------------


@pytest.mark.parametrize("bad, message", [
    (["q", "only", "", "", "0"], "Row 4 (line 5): choice 1 is empty or not a text."),
    (["q", "same", "same", "x", "0"], 'Row 4 (line 5) has the choice "same" twice (choices 0 and 1)'),
    (["q", "a", "b", "c", "3"], "Row 4 (line 5) has the label 3, but its 3 choices are numbered 0 to 2"),
    (["q", "a", "b", "c", "-1"], "Row 4 (line 5) has the label -1, but its 3 choices are numbered 0 to 2"),
    (["q", "a", "b", "c", "maybe"], 'Row 4 (line 5) has the label "maybe", which is neither the index of a choice '
                                    "(0 to 2), a letter (A to C) nor the text of one of its 3 choices."),
    (["q", "a", "b", "c", "D"], "Row 4 (line 5) has the label 3, but its 3 choices are numbered 0 to 2"),
    (["", "a", "b", "c", "0"], 'Row 4 (line 5) has an empty context (column "context").'),
])
def test_bad_rows_are_refused_with_their_row_number(tmp_path, bad, message):
    assert message in fails(tmp_path, [*good_rows(3), bad, *good_rows(2)])


def test_fewer_than_two_choices_and_differing_numbers_of_choices_are_refused(tmp_path):
    lines = [{"question": "q1", "choices": ["a", "b", "c"], "label": 0},
             {"question": "q2", "choices": ["a", "b"], "label": 1}]
    path = write(tmp_path, "mc.jsonl", "".join(json.dumps(line) + "\n" for line in lines))
    mapping = {"question": "question", "choices": "choices", "label": "label"}
    with pytest.raises(DatasetError, match=r"Line 2 has 2 choices but line 1 has 3; give every example as many "
                                           r"choices\."):
        ingest(path, tmp_path / "out", original_filename=path.name, task="multiple_choice", mapping=mapping)
    path = write(tmp_path, "one.jsonl", json.dumps({"question": "q", "choices": ["only"], "label": 0}) + "\n")
    with pytest.raises(DatasetError, match="Line 1 has 1 choice; multiple choice needs at least two per example."):
        ingest(path, tmp_path / "out", original_filename=path.name, task="multiple_choice", mapping=mapping)
    path = write(tmp_path, "str.jsonl", json.dumps({"question": "q", "choices": {"a": 1}, "label": 0}) + "\n")
    with pytest.raises(DatasetError, match="Line 1: the choices are a JSON object; give a list of texts"):
        ingest(path, tmp_path / "out", original_filename=path.name, task="multiple_choice", mapping=mapping)
    assert not (tmp_path / "out").exists()


# --- the demo ---------------------------------------------------------------------------------


def test_the_demo_asks_which_object_a_docstring_paragraph_documents(tmp_path):
    demo = DEMOS["multiple_choice"]
    path = write_demo_dataset("multiple_choice", tmp_path)
    rows = list(csv.DictReader(path.open(encoding="utf-8")))
    # DEMOS gives the size on Python 3.11 in a fresh process; the modules imported before (other
    # tests') can add or hide a few documented objects.
    assert 0.75 * demo.rows <= len(rows) <= 1.25 * demo.rows and demo.filename == path.name
    assert list(rows[0]) == ["context", "choice0", "choice1", "choice2", "choice3", "label"]
    assert {row["label"] for row in rows} == {"0", "1", "2", "3"}  # shuffled: the position tells nothing
    # The right choice is the object whose docstring holds the paragraph; the four choices are
    # objects of four different packages of the five.
    paragraphs = {}
    for doc in demo_docstrings():
        paragraphs.setdefault(doc.name, set()).update(doc.paragraphs)
    for row in rows:
        choices = [row[f"choice{i}"] for i in range(4)]
        assert row["context"] in paragraphs[choices[int(row["label"])]]
        packages = {choice.split(".")[0] for choice in choices}
        assert len(packages) == 4 and packages <= {"asyncio", "email", "http", "logging", "xml"}
    assert sniff(path, path.name).task == "multiple_choice"
