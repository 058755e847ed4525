"""Labelled datasets: the readers (CSV, TSV, JSONL, CoNLL, SQuAD), sniff, and the mapping suggestions."""

import gzip
import json

import pytest

from trainer.errors import CorpusError, DatasetError, UserError
from trainer.prep import reading
from trainer.prep.labelled import (DatasetReader, check_mapping, detect_format, sniff, suggest, suggest_mapping,
                                   suggest_task)


def write(tmp_path, name, data, compress=False):
    raw = data if isinstance(data, bytes) else data.encode("utf-8")
    path = tmp_path / name
    path.write_bytes(gzip.compress(raw) if compress else raw)
    return path


def rows(path, fmt):
    return [(row.where, row.values) for row in DatasetReader(path, fmt)]


SQUAD_V2 = {
    "version": "v2.0",
    "data": [
        {"title": "Denver", "paragraphs": [
            {"context": "Denver won the game 24-10. The crowd cheered.",
             "qas": [
                 {"id": "q1", "question": "Who won?", "answers": [{"text": "Denver", "answer_start": 0}],
                  "is_impossible": False},
                 {"id": "q2", "question": "Who lost?", "answers": [], "is_impossible": True,
                  "plausible_answers": [{"text": "crowd", "answer_start": 32}]},
             ]},
        ]},
        {"title": "Score", "paragraphs": [
            {"context": "The score was 24-10.",
             "qas": [{"id": "q3", "question": "What was the score?",
                      "answers": [{"text": "24-10", "answer_start": 14}]}]},
        ]},
    ],
}


# --- readers -------------------------------------------------------------------------------


def test_csv_rows_keep_quoted_commas_and_line_breaks_and_name_their_first_line(tmp_path):
    path = write(tmp_path, "d.csv", 'text,label\n"Hello, world",pos\n\n"two\nlines",neg\nplain,pos\n')
    assert rows(path, "csv") == [
        ("Row 1 (line 2)", {"text": "Hello, world", "label": "pos"}),
        ("Row 2 (line 4)", {"text": "two\nlines", "label": "neg"}),
        ("Row 3 (line 6)", {"text": "plain", "label": "pos"}),
    ]


def test_csv_delimiter_is_taken_from_the_header(tmp_path):
    path = write(tmp_path, "d.csv", "text;label\nsemi, colon;a\n")
    reader = DatasetReader(path, "csv")
    assert [row.values for row in reader] == [{"text": "semi, colon", "label": "a"}]
    assert reader.details["delimiter"] == ";"


def test_tsv_keeps_quotes_as_text_and_tolerates_trailing_empty_fields(tmp_path):
    path = write(tmp_path, "d.tsv", 'sentence\tlabel\n"quoted" start\t1\nend "open\t0\t\n')
    assert [values for _, values in rows(path, "tsv")] == [
        {"sentence": '"quoted" start', "label": "1"}, {"sentence": 'end "open', "label": "0"}]


def test_jsonl_rows_skip_blank_lines_and_name_their_line(tmp_path):
    path = write(tmp_path, "d.jsonl", '{"text": "a", "label": 1}\n\n{"text": "b", "label": 0}\n')
    assert rows(path, "jsonl") == [("Line 1", {"text": "a", "label": 1}), ("Line 3", {"text": "b", "label": 0})]


def test_gzip_is_recognised_from_the_content(tmp_path):
    path = write(tmp_path, "upload.bin", '{"text": "a", "label": 1}\n', compress=True)
    reader = DatasetReader(path, "jsonl")
    assert [row.values for row in reader] == [{"text": "a", "label": 1}]
    assert reader.details["compressed"] is True


def test_conll_takes_the_first_and_last_column_split_by_tabs_or_spaces(tmp_path):
    text = "-DOCSTART- -X- O O\n\nEU\tB-ORG\nrejects\tO\n\n\nPeter NNP B-NP B-PER\nBlackburn NNP I-NP I-PER\n"
    path = write(tmp_path, "d.conll", text)
    assert rows(path, "conll") == [
        ("Sentence 1 (line 3)", {"tokens": ["EU", "rejects"], "tags": ["B-ORG", "O"]}),
        ("Sentence 2 (line 7)", {"tokens": ["Peter", "Blackburn"], "tags": ["B-PER", "I-PER"]}),
    ]


def test_squad_v2_rows_and_unanswerable_questions(tmp_path):
    path = write(tmp_path, "d.json", json.dumps(SQUAD_V2))
    reader = DatasetReader(path, "squad")
    got = [(row.where, row.values["id"], row.values["answers"]) for row in reader]
    assert got == [('Question 1 (id "q1")', "q1", [{"text": "Denver", "answer_start": 0}]),
                   ('Question 2 (id "q2")', "q2", []),  # plausible_answers are not answers
                   ('Question 3 (id "q3")', "q3", [{"text": "24-10", "answer_start": 14}])]
    assert reader.details["squad_version"] == "v2.0"


def test_squad_v1_pretty_printed_with_several_answers(tmp_path):
    v1 = {"data": [{"title": "t", "paragraphs": [{"context": "Paris is in France.", "qas": [
        {"id": "a", "question": "Where is Paris?", "answers": [{"text": "France", "answer_start": 12},
                                                               {"text": "in France", "answer_start": 9}]}]}]}],
          "version": "1.1"}
    path = write(tmp_path, "d.json", json.dumps(v1, indent=4))
    [(where, values)] = rows(path, "squad")
    assert values["question"] == "Where is Paris?" and len(values["answers"]) == 2


def test_squad_is_parsed_one_piece_at_a_time(tmp_path, monkeypatch):
    monkeypatch.setattr(reading, "_CHUNK", 7)  # every value, number and literal is cut between pieces
    long = {"title": "long", "paragraphs": [{"context": "word " * 100 + "end.", "qas": [
        {"id": "q4", "question": "Which word ends it?", "answers": [{"text": "end", "answer_start": 500}]}]}]}
    data = {"version": "v2.0", "data": SQUAD_V2["data"] * 2 + [long], "n": 123456789, "ok": True, "none": None}
    path = write(tmp_path, "d.json", json.dumps(data))
    assert [values["id"] for _, values in rows(path, "squad")] == ["q1", "q2", "q3"] * 2 + ["q4"]


def test_squad_questions_need_answers_unless_impossible(tmp_path):
    data = {"data": [{"paragraphs": [{"context": "c", "qas": [{"id": "x", "question": "q?", "answers": []}]}]}]}
    with pytest.raises(DatasetError, match='Question 1 .id "x". has no answers and is not marked "is_impossible"'):
        rows(write(tmp_path, "d.json", json.dumps(data)), "squad")


def test_a_json_file_of_json_lines_is_read_as_jsonl(tmp_path):
    lines = write(tmp_path, "a.json", '{"text": "a", "label": 1}\n{"text": "b", "label": 0}\n')
    squad = write(tmp_path, "b.json", json.dumps(SQUAD_V2))
    assert detect_format(lines, "export.json") == "jsonl"
    assert detect_format(squad, "train-v2.0.json.gz") == "squad"
    assert detect_format(squad, "ner.txt") == "conll"


@pytest.mark.parametrize("name", ["data.xlsx", "data", "notes.pdf"])
def test_it_rejects_unknown_file_types(tmp_path, name):
    path = write(tmp_path, "upload.bin", "text,label\n")
    with pytest.raises(DatasetError, match="not a supported file type.*csv"):
        detect_format(path, name)


def test_a_json_list_is_refused_with_what_to_upload_instead(tmp_path):
    path = write(tmp_path, "d.json", '[{"text": "a"}]')
    with pytest.raises(DatasetError, match="holds a list.*jsonl"):
        detect_format(path, "d.json")


def test_encoding_problems_are_dataset_errors_naming_the_dataset_formats(tmp_path):
    utf16 = write(tmp_path, "a.csv", "text,label\nx,1\n".encode("utf-16"))
    nul = write(tmp_path, "b.csv", b"text,label\nx\x00,1\n")
    for path in (utf16, nul):
        with pytest.raises(DatasetError) as info:
            list(DatasetReader(path, "csv"))
        assert not isinstance(info.value, CorpusError) and isinstance(info.value, UserError)
    assert ".csv" in str(info.value) and "byte offset 12" in str(info.value)


# --- sniff ---------------------------------------------------------------------------------


def test_sniff_previews_the_first_rows_and_suggests_mapping_and_task(tmp_path):
    body = "".join(f'"review number {i}{"!" * 400 if i == 0 else ""}",{i % 2}\n' for i in range(30))
    path = write(tmp_path, "reviews.csv", "Review,Label\n" + body + "bad,row,here\n")  # after the preview
    preview = sniff(path, "reviews.csv")
    assert preview.format == "csv" and preview.columns == ["Review", "Label"]
    assert len(preview.rows) == 10 and preview.rows[1] == {"Review": "review number 1", "Label": "1"}
    assert len(preview.rows[0]["Review"]) == 300 and preview.rows[0]["Review"].endswith("…")
    assert preview.mapping == {"Review": "text", "Label": "label"} and preview.task == "classification"
    assert preview.details["delimiter"] == "," and preview.to_dict()["format"] == "csv"


def test_sniff_jsonl_columns_are_the_keys_in_order_of_appearance(tmp_path):
    path = write(tmp_path, "d.jsonl", '{"text": "a", "score": 0.5}\n{"text": "b", "score": 1.25, "id": 7}\n')
    preview = sniff(path, "d.jsonl")
    assert preview.columns == ["text", "score", "id"]
    assert preview.mapping == {"text": "text", "score": "label"} and preview.task == "regression"


@pytest.mark.parametrize("name,data,fmt,columns,task", [
    ("ner.conll", "EU\tB-ORG\nsays\tO\n", "conll", ["tokens", "tags"], "token_classification"),
    ("dev.json", json.dumps(SQUAD_V2), "squad", ["id", "question", "context", "answers"], "extractive_qa"),
])
def test_sniff_fixed_columns_of_conll_and_squad(tmp_path, name, data, fmt, columns, task):
    preview = sniff(write(tmp_path, name, data), name)
    assert (preview.format, preview.columns, preview.task) == (fmt, columns, task)
    assert set(preview.mapping.values()) == set(columns) - {"id"}


# --- mapping suggestions -----------------------------------------------------------------


@pytest.mark.parametrize("columns,expected", [
    (["sentence", "label"], {"sentence": "text", "label": "label"}),
    (["Text", "Sentiment", "SPLIT"], {"Text": "text", "Sentiment": "label", "SPLIT": "split"}),
    (["premise", "hypothesis", "label"], {"premise": "sentence1", "hypothesis": "sentence2", "label": "label"}),
    (["question1", "question2", "is_duplicate"], {"question1": "sentence1", "question2": "sentence2",
                                                  "is_duplicate": "label"}),
    (["id", "tokens", "pos_tags", "ner_tags"], {"tokens": "tokens", "ner_tags": "tags"}),
    (["id", "title", "context", "question", "answers"], {"context": "context", "question": "question",
                                                          "answers": "answers"}),
    (["instruction", "input", "output"], {"instruction": "prompt", "output": "response"}),
    (["article", "highlights"], {"article": "input", "highlights": "target"}),
    (["messages"], {"messages": "messages"}),
    (["a", "b"], {}),
])
def test_mapping_is_suggested_from_header_names(columns, expected):
    assert suggest_mapping(columns) == expected


@pytest.mark.parametrize("labels,task", [
    (["pos", "neg"], "classification"),
    (["1", "0", "2"], "classification"),
    (["3.8", "1", "4.25"], "regression"),
    ([0.5, 2], "regression"),
    (["sports|politics", "sports"], "multilabel"),
    ([["a", "b"], ["c"]], "multilabel"),
])
def test_the_label_values_tell_classes_scores_and_label_lists_apart(labels, task):
    rows = [{"text": "x", "label": label} for label in labels]
    assert suggest(["text", "label"], rows) == ({"text": "text", "label": "label"}, task)


def test_a_pair_with_joined_labels_stays_classification():
    mapping = {"s1": "sentence1", "s2": "sentence2", "y": "label"}
    assert suggest_task(mapping, [{"y": "a,b"}]) == "classification"


def test_the_mapping_suggests_each_task():
    assert suggest_task({"q": "question", "c": "context", "a": "answers"}) == "extractive_qa"
    assert suggest_task({"t": "tokens", "g": "tags"}) == "token_classification"
    assert suggest_task({"p": "prompt", "r": "response"}) == "sft"
    assert suggest_task({"m": "messages", "s": "split"}) == "sft"
    assert suggest_task({"i": "input", "o": "target"}) == "text_to_text"
    assert suggest_task({"t": "text"}) is None


# --- mapping checks --------------------------------------------------------------------------


@pytest.mark.parametrize("task,mapping,columns,message", [
    ("sorting", {"t": "text"}, None, '"sorting" is not a task type; choose one of classification'),
    ("classification", {"t": "txt"}, None, 'The column "t" is mapped to "txt", which is not a role'),
    ("classification", {"a": "text", "b": "text", "l": "label"}, None, 'The role text is given to two columns, "a"'),
    ("classification", {"t": "text"}, None, "needs columns mapped to text and label, or sentence1, sentence2 and "
                                            "label; the mapping gives text."),
    ("classification", {"t": "text", "l": "label", "g": "tags"}, None, 'does not use the role tags; unmap the column'),
    ("classification", {"t": "text", "l": "label"}, ["t", "y"], 'The column "l" (mapped to label) is not in the file'),
])
def test_check_mapping_says_what_is_wrong(task, mapping, columns, message):
    with pytest.raises(DatasetError) as info:
        check_mapping(task, mapping, columns)
    assert message in str(info.value)


def test_check_mapping_returns_the_form_and_allows_a_split_column():
    assert check_mapping("classification", {"a": "sentence1", "b": "sentence2", "y": "label", "s": "split"}) == (
        "sentence1", "sentence2", "label")
    assert check_mapping("sft", {"chat": "messages"}) == ("messages",)


GOOD_SQUAD = json.dumps({"version": "v2.0", "data": [{"title": "t", "paragraphs": [{"context": "abc", "qas": [
    {"id": "1", "question": "q", "answers": [{"text": "a", "answer_start": 0}]}]}]}]}, indent=2)


@pytest.mark.parametrize("text,message", [
    (GOOD_SQUAD.replace('"question": "q",', '"question": "q",,'),
     "The JSON file is not valid at line 12 (Expecting property name enclosed in double quotes)"),
    ('{"version": 1}', 'The JSON file has no "data" list, so it is not a SQuAD file'),
    ('{"data": [{"title": "x"}]}', 'Article 1 has no "paragraphs" list'),
    ('{"data": [{"paragraphs": [{"context": 5, "qas": []}]}]}', 'Paragraph 1 of article 1 needs a "context" string'),
    ('{"data": []}', "The SQuAD file holds no questions."),
])
def test_squad_structure_errors_name_the_place(tmp_path, monkeypatch, text, message):
    monkeypatch.setattr(reading, "_CHUNK", 5)  # line numbers count the text already dropped from the buffer
    with pytest.raises(DatasetError) as info:
        rows(write(tmp_path, "d.json", text), "squad")
    assert message in str(info.value)
