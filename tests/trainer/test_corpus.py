"""Corpus ingestion: validation of uploads, the C4 cleaning rules, splitting, statistics."""

import gzip
import json
import random

import pytest

from trainer.prep import corpus, reading
from trainer.prep.corpus import RULES, CleaningOptions, IngestResult, ingest, write_demo_corpus
from trainer.errors import CorpusError, UserError

WORDS = (
    "time people year way day man thing woman life child world school state family student "
    "group country problem hand part place case week company system program question work "
    "government number night point home water room mother area money story fact month lot "
    "right study book eye job word business issue side kind head house service friend father "
    "power hour game line end member law car city community name president team minute idea "
    "kid body information back parent face others level office door health person art war"
).split()


def sentence(rng: random.Random, n_words: int = 8) -> str:
    words = [rng.choice(WORDS) for _ in range(n_words)]
    return " ".join(words).capitalize() + "."


def make_docs(n_docs: int = 12, n_sentences: int = 4, seed: int = 0) -> list[list[str]]:
    """Documents of distinct sentences (each a list of sentences)."""
    rng = random.Random(seed)
    return [[sentence(rng) for _ in range(n_sentences)] for _ in range(n_docs)]


def as_txt(docs: list[list[str]], one_line_per_doc: bool = False) -> str:
    if one_line_per_doc:
        return "\n\n".join(" ".join(d) for d in docs) + "\n"
    return "\n\n".join("\n".join(d) for d in docs) + "\n"


def as_jsonl(docs: list[list[str]]) -> str:
    return "".join(json.dumps({"text": "\n".join(d), "id": i}) + "\n" for i, d in enumerate(docs))


def read_docs(path) -> list[list[str]]:
    text = path.read_text(encoding="utf-8")
    return [block.split("\n") for block in text.strip("\n").split("\n\n")] if text.strip() else []


def run(tmp_path, data, name="corpus.txt", options=None, **kw) -> IngestResult:
    raw = tmp_path / "upload.bin"
    raw.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return ingest(raw, tmp_path / "out", original_filename=name, options=options or CleaningOptions(), **kw)


def fails(tmp_path, data, name="corpus.txt", options=None) -> str:
    """Run ingest expecting a CorpusError; check that nothing was left behind; return the message."""
    with pytest.raises(CorpusError) as info:
        run(tmp_path, data, name, options)
    assert not (tmp_path / "out").exists()
    return str(info.value)


GOOD = as_txt(make_docs())


# --- bad uploads --------------------------------------------------------------------------


def test_errors_are_user_errors():
    assert issubclass(CorpusError, UserError)


def test_it_rejects_an_empty_file(tmp_path):
    assert "empty" in fails(tmp_path, b"")


def test_it_rejects_a_file_of_blank_lines(tmp_path):
    assert "no text" in fails(tmp_path, "\n \n\t\n\n")


def test_it_rejects_an_empty_gzip_file(tmp_path):
    assert "empty" in fails(tmp_path, gzip.compress(b""), "corpus.txt.gz")


def test_it_rejects_binary_data_with_the_offset_of_the_nul_byte(tmp_path):
    message = fails(tmp_path, b"hello\x00world")
    assert "NUL" in message and "byte offset 5" in message and "binary" in message


def test_it_finds_a_nul_byte_far_into_the_file(tmp_path, monkeypatch):
    monkeypatch.setattr(reading, "_CHUNK", 64)
    data = GOOD.encode() + b"x\x00"
    assert f"byte offset {len(data) - 1}" in fails(tmp_path, data)


def test_it_recognises_common_binary_formats(tmp_path):
    assert "PDF" in fails(tmp_path, b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj")


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be"])
def test_it_explains_utf16(tmp_path, encoding):
    message = fails(tmp_path, GOOD.encode(encoding))
    assert "UTF-16" in message and "UTF-8" in message


def test_it_gives_the_byte_offset_and_line_of_invalid_utf8(tmp_path):
    data = "First line is fine.\nSecond line too.\nCafé".encode("latin-1")
    message = fails(tmp_path, data)
    offset = data.index(b"\xe9")
    assert "not valid UTF-8" in message
    assert f"byte offset {offset}" in message and "0xE9" in message and "line 3" in message


def test_invalid_utf8_offsets_are_exact_across_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(reading, "_CHUNK", 7)
    data = ("Ünïcödé wörds ✓ here.\r\n" * 30).encode() + b"bad \xff byte"
    message = fails(tmp_path, data)
    bad = data.index(b"\xff")
    assert f"byte offset {bad}" in message and "line 31" in message


def test_a_truncated_utf8_sequence_at_the_end_is_reported(tmp_path):
    data = GOOD.encode() + "✓".encode()[:2]
    assert f"byte offset {len(data) - 2}" in fails(tmp_path, data)


def test_multibyte_characters_split_between_chunks_decode(tmp_path, monkeypatch):
    monkeypatch.setattr(reading, "_CHUNK", 3)
    docs = [[s.replace("e", "é") + " ✓ 中文." for s in d] for d in make_docs()]
    run(tmp_path, as_txt(docs))
    assert read_docs(tmp_path / "out" / "train.txt") + read_docs(tmp_path / "out" / "valid.txt")


@pytest.mark.parametrize(
    "lines, bad_line, expected",
    [
        (['{"text": "ok"}', "{not json"], 2, "not valid JSON"),
        (['{"text": "ok"}', "", '{"title": "no text"}'], 3, 'no "text" field'),
        (['{"text": 5}'], 1, "not a string"),
        (['{"text": "ok"}', '["a", "list"]'], 2, "JSON list, not an object"),
    ],
)
def test_it_reports_the_broken_jsonl_line(tmp_path, lines, bad_line, expected):
    message = fails(tmp_path, "\n".join(lines) + "\n", "corpus.jsonl")
    assert f"Line {bad_line} " in message and expected in message


def test_it_rejects_a_corpus_too_small_to_train_on(tmp_path):
    message = fails(tmp_path, "Just one short sentence.\n\nAnd another one here.\n")
    assert "too small" in message
    assert "2 sentences and 8 words remain" in message
    assert f"at least {corpus.MIN_SENTENCES} sentences and {corpus.MIN_WORDS} words" in message


def test_the_too_small_message_mentions_the_cleaning_rules(tmp_path):
    text = as_txt(make_docs(n_sentences=2))
    message = fails(tmp_path, text, options=CleaningOptions(min_sentences=True))
    assert "too small" in message and "switching some cleaning rules off" in message


def test_it_needs_two_documents(tmp_path):
    one_doc = "\n".join(sum(make_docs(), []))
    message = fails(tmp_path, one_doc)
    assert "only 1 document" in message and "blank line" in message


@pytest.mark.parametrize("name", ["corpus.csv", "corpus.pdf", "corpus", "corpus.docx", "notes.txt.zip"])
def test_it_rejects_unknown_file_types(tmp_path, name):
    message = fails(tmp_path, GOOD, name)
    assert ".txt" in message and ".jsonl" in message and ".gz" in message


def test_it_rejects_a_damaged_gzip_file(tmp_path):
    data = gzip.compress(GOOD.encode())
    assert "damaged" in fails(tmp_path, data[: len(data) // 2], "corpus.txt.gz")


def test_a_failed_ingest_leaves_an_existing_folder_as_it_was(tmp_path):
    out = tmp_path / "out"
    run(tmp_path, GOOD)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(CorpusError):
        run(tmp_path, b"\x00\x01")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_a_failed_ingest_leaves_an_empty_folder_empty(tmp_path):
    (tmp_path / "out").mkdir()
    with pytest.raises(CorpusError):
        run(tmp_path, b"")
    assert list((tmp_path / "out").iterdir()) == []


# --- formats ------------------------------------------------------------------------------


def all_docs(tmp_path) -> list[list[str]]:
    return read_docs(tmp_path / "out" / "train.txt") + read_docs(tmp_path / "out" / "valid.txt")


def test_txt_documents_are_separated_by_blank_lines(tmp_path):
    docs = make_docs()
    result = run(tmp_path, as_txt(docs, one_line_per_doc=True))
    assert sorted(all_docs(tmp_path)) == sorted(docs)
    assert result.stats["documents"] == len(docs) and result.stats["sentences"] == 4 * len(docs)


def test_output_has_one_sentence_per_line_and_a_blank_line_between_documents(tmp_path):
    run(tmp_path, as_txt(make_docs(n_docs=3, n_sentences=10)))
    text = (tmp_path / "out" / "train.txt").read_text()
    assert text.endswith(".\n") and "\n\n\n" not in text
    assert all(line == "" or line.endswith(".") for line in text.split("\n"))


def test_jsonl_with_blank_lines(tmp_path):
    docs = make_docs()
    run(tmp_path, as_jsonl(docs).replace("\n", "\n\n", 3), "data.JSONL")
    assert sorted(all_docs(tmp_path)) == sorted(docs)


@pytest.mark.parametrize("name, fmt", [("c.txt.gz", "txt"), ("c.jsonl.gz", "jsonl"), ("c.txt", "txt")])
def test_gzip_is_detected_from_the_content(tmp_path, name, fmt):
    docs = make_docs()
    text = as_txt(docs) if fmt == "txt" else as_jsonl(docs)
    result = run(tmp_path, gzip.compress(text.encode()), name)
    assert sorted(all_docs(tmp_path)) == sorted(docs)
    assert result.stats["input"]["compressed"] is True


def test_crlf_cr_and_byte_order_mark(tmp_path, monkeypatch):
    monkeypatch.setattr(reading, "_CHUNK", 5)  # a \r\n split between two chunks is one line end
    docs = make_docs()
    text = as_txt(docs).replace("\n", "\r\n")
    run(tmp_path, b"\xef\xbb\xbf" + text.encode())
    assert sorted(all_docs(tmp_path)) == sorted(docs)
    run(tmp_path, as_txt(docs).replace("\n", "\r"))
    assert sorted(all_docs(tmp_path)) == sorted(docs)


# --- cleaning rules -----------------------------------------------------------------------


def rule_case(docs, bad_doc_lines):
    """A corpus of good documents plus one document holding the lines under test."""
    return as_txt(docs) + "\n" + "\n".join(bad_doc_lines) + "\n"


GOOD_LINES = [
    "This line is a perfectly fine sentence.",
    "So is this one, which also ends properly!",
    "And a third one for good measure?",
]


@pytest.mark.parametrize(
    "rule, extra_lines, key, count, gone",
    [
        ("terminal_punct", ["A heading without a full stop", "Trailing off..."],
         "lines_without_terminal_punctuation", 2, "heading"),
        ("min_words", ["Too short.", "Also short, really."], "lines_under_5_words", 2, "Too short"),
        ("no_javascript", ["Please enable JavaScript to view this page."], "lines_with_javascript", 1, "JavaScript"),
        ("no_lorem_or_braces", ["Lorem ipsum dolor sit amet, consectetur adipiscing."],
         "pages_with_lorem_ipsum_or_braces", 1, "This line is"),
        ("no_lorem_or_braces", ["function f() { return 1; } is code."],
         "pages_with_lorem_ipsum_or_braces", 1, "This line is"),
        ("bad_words", ["Click here for free PORN videos now."], "pages_with_bad_words", 1, "This line is"),
    ],
)
def test_each_rule_removes_and_counts(tmp_path, rule, extra_lines, key, count, gone):
    text = rule_case(make_docs(), GOOD_LINES + extra_lines)
    result = run(tmp_path, text, options=CleaningOptions(**{rule: True}))
    assert result.removed[key] == count
    assert gone not in "\n".join(sum(all_docs(tmp_path), []))
    # with the rule off, the text stays
    result = run(tmp_path, text, options=CleaningOptions())
    assert key not in result.removed
    assert gone in "\n".join(sum(all_docs(tmp_path), []))


def test_min_sentences_drops_short_pages(tmp_path):
    docs = make_docs() + [["Only one sentence here."], ["Two sentences here.", "That is all."]]
    result = run(tmp_path, as_txt(docs), options=CleaningOptions(min_sentences=True))
    assert result.removed["pages_under_3_sentences"] == 2
    assert result.stats["documents"] == len(docs) - 2


def test_the_bad_word_rule_matches_whole_words_only(tmp_path):
    text = rule_case(make_docs(), GOOD_LINES + ["An xxxl shirt and pornographical-ish are not listed."])
    result = run(tmp_path, text, options=CleaningOptions(bad_words=True))
    assert result.removed["pages_with_bad_words"] == 0


def test_a_page_emptied_by_line_rules_is_counted(tmp_path):
    text = rule_case(make_docs(), ["no punctuation", "none here either"])
    result = run(tmp_path, text, options=CleaningOptions(terminal_punct=True))
    assert result.removed["pages_left_empty"] == 1


def test_identical_documents_are_always_removed(tmp_path):
    docs = make_docs()
    result = run(tmp_path, as_txt(docs + [docs[0], docs[3], docs[0]]))
    assert result.removed["duplicate_pages"] == 3
    assert result.stats["documents"] == len(docs)


def test_repeated_three_sentence_spans_are_removed_after_their_first_occurrence(tmp_path):
    docs = make_docs()
    a = docs[0]
    copy = ["A new opening sentence appears here.", *a[1:4], "A new closing sentence appears here."]
    two_only = ["Another fresh sentence is here.", a[0], a[1], "Final fresh sentence is here."]
    text = as_txt(docs + [copy, two_only])
    result = run(tmp_path, text, options=CleaningOptions(dedup_spans=True))
    assert result.removed["sentences_in_duplicate_spans"] == 3
    out = all_docs(tmp_path)
    assert a in out  # the first occurrence is untouched
    assert ["A new opening sentence appears here.", "A new closing sentence appears here."] in out
    assert two_only in out  # a repeated pair is not a three-sentence span
    assert run(tmp_path, text).removed.get("sentences_in_duplicate_spans") is None


def test_cleaning_options_round_trip_and_form_values():
    options = CleaningOptions(terminal_punct=True, dedup_spans=True)
    assert CleaningOptions.from_dict(options.to_dict()) == options
    form = {"min_words": "on", "bad_words": "false", "unknown": True}
    assert CleaningOptions.from_dict(form) == CleaningOptions(min_words=True)
    assert CleaningOptions.from_dict(None) == CleaningOptions()
    assert [name for name, _, _ in RULES] == list(CleaningOptions().to_dict())
    assert all(label and help_text for _, label, help_text in RULES)


# --- split, statistics, preview, progress --------------------------------------------------


def test_the_split_is_deterministic_by_document_and_seeded(tmp_path):
    docs = make_docs(n_docs=60)
    text = as_txt(docs)

    def valid_docs(seed):
        run(tmp_path, text, seed=seed, valid_fraction=0.1)
        return read_docs(tmp_path / "out" / "valid.txt"), read_docs(tmp_path / "out" / "train.txt")

    valid, train = valid_docs(0)
    assert len(valid) == 6 and len(train) == 54
    assert sorted(valid + train) == sorted(docs)
    assert valid_docs(0) == (valid, train)
    assert valid_docs(1)[0] != valid
    # documents keep their corpus order within each split
    order = {tuple(d): i for i, d in enumerate(docs)}
    assert [order[tuple(d)] for d in train] == sorted(order[tuple(d)] for d in train)


def test_there_is_always_a_validation_and_a_training_document(tmp_path):
    docs = make_docs(n_docs=2, n_sentences=15)
    result = run(tmp_path, as_txt(docs), valid_fraction=0.01)
    assert result.stats["valid"]["documents"] == 1 and result.stats["train"]["documents"] == 1
    result = run(tmp_path, as_txt(docs), valid_fraction=0.5)
    assert result.stats["valid"]["documents"] == 1 and result.stats["train"]["documents"] == 1


def test_statistics_of_a_hand_made_corpus(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus, "MIN_SENTENCES", 1)
    monkeypatch.setattr(corpus, "MIN_WORDS", 1)
    text = "One two three. Four five!\n\nCafé au lait.\n\n你好，世界。再见。\n"
    result = run(tmp_path, text, valid_fraction=0.34)
    s = result.stats
    assert {k: s[k] for k in ("documents", "sentences", "words", "characters", "bytes")} == {
        "documents": 3,
        "sentences": 5,  # "One two three." "Four five!" "Café au lait." "你好，世界。" "再见。"
        "words": 3 + 2 + 3 + 4 + 2,
        "characters": 14 + 10 + 13 + 6 + 3,
        "bytes": 14 + 10 + 14 + 18 + 9,
    }
    for key in ("documents", "sentences", "words", "characters", "bytes"):
        assert s["train"][key] + s["valid"][key] == s[key]
    assert s["valid"]["documents"] == 1
    assert {k: s["input"][k] for k in ("format", "compressed", "file_bytes", "documents", "files")} == {
        "format": "txt", "compressed": False, "file_bytes": len(text.encode()), "documents": 3, "files": 1
    }  # fmt: skip
    assert s["sample"]["share"] == 1.0 and set(s["stages"]) == {"read_clean", "dedup", "split"}
    assert result.preview == [["One two three.", "Four five!"], ["Café au lait."], ["你好，世界。", "再见。"]]
    saved = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert saved["stats"] == s and saved["removed"] == result.removed
    assert saved["options"] == CleaningOptions().to_dict()


def test_the_preview_shows_five_documents_shortened(tmp_path):
    docs = make_docs(n_docs=8, n_sentences=12)
    docs[0][0] = "Long " * 200 + "sentence."
    result = run(tmp_path, as_txt(docs))
    assert len(result.preview) == 5
    assert len(result.preview[0]) == corpus.PREVIEW_SENTENCES + 1 and result.preview[0][-1].startswith("…")
    assert len(result.preview[0][0]) == corpus.PREVIEW_CHARS and result.preview[0][0].endswith("…")
    assert result.preview[1][:3] == docs[1][:3]


def test_progress_is_reported_from_0_to_100_at_most_about_100_times(tmp_path, monkeypatch):
    monkeypatch.setattr(reading, "_CHUNK", 16)
    calls = []
    run(tmp_path, as_txt(make_docs(n_docs=30)), progress=calls.append)
    assert calls[0] == 0 and calls[-1] == 100
    assert calls == sorted(set(calls)) and len(calls) <= 101 and len(calls) > 20


def test_output_folder_holds_only_the_results(tmp_path):
    run(tmp_path, GOOD)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["stats.json", "train.txt", "valid.txt"]


# --- demo corpus --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return write_demo_corpus(tmp_path_factory.mktemp("demo") / "demo.txt")


def test_the_demo_corpus_is_deterministic_and_clean(demo, tmp_path):
    assert 200_000 < demo.stat().st_size < 3_000_000
    again = write_demo_corpus(tmp_path)  # a folder: the file goes inside
    assert again.parent == tmp_path and again.read_bytes() == demo.read_bytes()
    text = demo.read_text(encoding="utf-8")
    assert ">>>" not in text and "{" not in text and "\n\n\n" not in text


def test_the_demo_corpus_does_not_depend_on_what_this_process_imported_or_patched(demo, tmp_path, monkeypatch):
    """Packages patch the standard library (transformers adds logging.Logger.info_once, torch replaces
    inspect.getfile): the demo corpus and datasets read the docstrings as a fresh interpreter sees
    them, so a worker with torch loaded writes the same demo as a fresh web process."""
    import inspect
    import logging

    from trainer.prep import demo as demo_module

    def info_once(self, msg):
        """Log a message at the info level once, and never again for the same message in this process."""

    def getfile(obj):
        """Return the name of the file an object was defined in, looking through wrappers first."""
        return original(obj)

    original = inspect.getfile
    monkeypatch.setattr(logging.Logger, "info_once", info_once, raising=False)
    monkeypatch.setattr(inspect, "getfile", getfile)
    demo_module._stdlib_docstrings.cache_clear()
    try:
        assert write_demo_corpus(tmp_path).read_bytes() == demo.read_bytes()
    finally:
        demo_module._stdlib_docstrings.cache_clear()


def test_the_demo_corpus_passes_ingest(demo, tmp_path):
    result = ingest(demo, tmp_path / "out", original_filename=demo.name, options=CleaningOptions())
    assert result.stats["documents"] > 1000 and result.stats["sentences"] > 4000
    assert result.stats["valid"]["documents"] >= 50
    assert result.removed["duplicate_pages"] == 0
