"""One bounded JSON reader (issue 22, point 3): text nested deeper than jsonio.MAX_DEPTH is refused
with a sentence naming the nesting limit before Python's json recurses into it (a RecursionError
was a 500), in uploads, dataset rows and imported configs alike."""
from __future__ import annotations

import json

import pytest

from trainer import jsonio
from trainer.errors import CorpusError, DatasetError, UserError
from trainer.inference.importing import ModelImportError, check_hf_directory
from trainer.prep.labelled import DatasetReader, sniff
from trainer.prep.sources import discover, plan_pieces, read_piece

LIMIT = f"{jsonio.MAX_DEPTH} levels is the nesting limit"


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_the_depth_skips_strings_and_escapes_and_reads_a_cut_prefix():
    assert jsonio.depth('{"a": [1, {"b": "[[[ \\" [[{"}]}') == 3
    assert jsonio.depth('"[[["') == 0 and jsonio.depth("7") == 0
    assert jsonio.depth('[["ab\\"[[[') == 2  # cut inside a string: its brackets are text
    assert jsonio.depth(nested(40), 10) == 30


def test_loads_takes_the_limit_and_refuses_one_more_before_json_recurses(monkeypatch):
    assert jsonio.loads(nested(jsonio.MAX_DEPTH)) == json.loads(nested(jsonio.MAX_DEPTH))
    assert jsonio.loads(b'{"a": [1, "]]]]"]}') == {"a": [1, "]]]]"]}
    monkeypatch.setattr(json, "loads", lambda *a, **kw: pytest.fail("json.loads was reached"))
    with pytest.raises(jsonio.JsonNestingError, match=f"^The body is nested more than {jsonio.MAX_DEPTH} levels deep "
                                                      rf"\(lists or objects inside one another\); {LIMIT}\.$"):
        jsonio.loads(nested(jsonio.MAX_DEPTH + 1), subject="The body")
    with pytest.raises(UserError, match=LIMIT):  # 50,000 deep: a sentence, not a RecursionError
        jsonio.loads('{"a": ' + nested(50_000) + "}")


SQUAD_HEAD = '{"version": "v2.0", "data": ['


@pytest.mark.parametrize("text", [
    SQUAD_HEAD + nested(10_000) + "]}",                                   # one line: the format sniffing reads it
    SQUAD_HEAD.replace('"data"', '\n"data"') + "\n" + nested(10_000) + "]}",  # several: the article stream does
], ids=["one-line", "multi-line"])
def test_a_squad_file_nested_10000_deep_is_refused_naming_the_limit(tmp_path, text):
    path = tmp_path / "deep.json"
    path.write_text(text)
    with pytest.raises(DatasetError, match=f"^The JSON file is nested more than .*{LIMIT}"):
        sniff(path, "deep.json")


def test_the_article_stream_bounds_each_value_even_across_pieces(tmp_path, monkeypatch):
    from trainer.prep import reading as corpus_module

    monkeypatch.setattr(corpus_module, "_CHUNK", 1000)  # the deep article spans many pieces
    path = tmp_path / "deep.json"
    path.write_text(SQUAD_HEAD + '\n{"title": "x", "paragraphs": ' + nested(5000) + "}]}")
    with pytest.raises(DatasetError, match=LIMIT):
        list(DatasetReader(path, "squad"))


def test_a_jsonl_row_or_corpus_line_nested_too_deep_names_its_line(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"text": "fine", "label": "a"}\n{"text": ' + nested(3000) + "}\n")
    with pytest.raises(DatasetError, match=f"^Line 2 is nested more than .*{LIMIT}"):
        list(DatasetReader(path, "jsonl"))
    corpus_file = tmp_path / "deep.jsonl"
    corpus_file.write_text("\n" * 6 + '{"text": ' + nested(3000) + "}\n")
    with pytest.raises(CorpusError, match=f'^Line 7 of "deep.jsonl" is nested more than .*{LIMIT}'):
        [list(read_piece(piece)) for piece in plan_pieces(discover([corpus_file]))]


def test_an_imported_config_nested_too_deep_is_refused_before_anything_reads_it(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "bert", "x": ' + nested(20_000) + "}")
    with pytest.raises(ModelImportError, match=f"^config.json is nested more than .*{LIMIT}"):
        check_hf_directory(tmp_path)


def test_an_imported_yaml_config_nested_too_deep_is_a_sentence_not_a_recursion_error():
    from trainer.config import RunConfig
    from trainer.errors import ConfigError

    with pytest.raises(ConfigError, match="^The YAML is nested too deeply to read"):
        RunConfig.from_yaml("max_steps: " + nested(5000))


def test_a_json_cell_nested_too_deep_names_its_row_and_column():
    from trainer.prep.labelled.examples import ExampleBuilder
    from trainer.prep.labelled.readers import Row

    builder = ExampleBuilder("multilabel", {"text": "text", "tags": "label"})
    row = Row({"text": "a sentence", "tags": nested(1000)}, "Row 3 (line 4)")
    with pytest.raises(DatasetError, match=f'^Row 3 \\(line 4\\): the label \\(column "tags"\\) is nested more than '
                                           f".*{LIMIT}"):
        builder(row)
