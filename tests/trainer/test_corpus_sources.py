"""Corpus sources (trainer.prep.sources, trainer.prep.reading): every format and compression reads
the same documents, pieces concatenate to the whole file, discover finds files in a stable order,
and every problem is a sentence naming the file. Path and archive checks: test_corpus_import_paths."""

import bz2
import gzip
import json
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from trainer.errors import CorpusError
from trainer.prep import reading, sources
from trainer.prep.reading import UploadReader
from trainer.prep.sources import (
    ACCEPTED_DESCRIPTION,
    UPLOAD_SUFFIXES,
    Piece,
    SourceFile,
    describe,
    discover,
    plan_pieces,
    read_piece,
)

DOCS = [
    [f"Document {i} says hello, wörld ✓.", f"Its second line is number {i}."][: 1 + i % 2] for i in range(14)
] + [["Ein letztes Dokument.", "  indented line", "Dernière ligne."]]

COMPRESS = {
    "none": lambda b: b,
    "gzip": gzip.compress,
    "zstd": lambda b: zstandard.ZstdCompressor().compress(b),
    "bz2": bz2.compress,
}
SUFFIX = {"none": "", "gzip": ".gz", "zstd": ".zst", "bz2": ".bz2"}


def txt_bytes(docs) -> bytes:
    return "\n\n".join("\n".join(d) for d in docs).encode() + b"\n"


def jsonl_bytes(docs, field="text") -> bytes:
    return "".join(json.dumps({"id": i, field: "\n".join(d)}) + "\n" for i, d in enumerate(docs)).encode()


def write_parquet(path, docs, field="text", row_group_size=3):
    pq.write_table(pa.table({"id": list(range(len(docs))), field: ["\n".join(d) for d in docs]}), path,
                   row_group_size=row_group_size)
    return path


def write_arrow(path, docs, field="text", per_batch=2, stream=True):
    schema = pa.schema([("id", pa.int64()), (field, pa.large_string())])
    with pa.OSFile(str(path), "wb") as sink:
        writer = pa.ipc.new_stream(sink, schema) if stream else pa.ipc.new_file(sink, schema)
        with writer:
            for i in range(0, len(docs), per_batch):
                part = docs[i : i + per_batch]
                writer.write_batch(pa.record_batch([pa.array(range(i, i + len(part)), pa.int64()),
                                                    pa.array(["\n".join(d) for d in part], pa.large_string())],
                                                   schema=schema))
    return path


def write(tmp_path, kind, docs=DOCS, compression="none", name=None, field="text"):
    """A corpus file of ``kind`` (txt, jsonl, json, parquet, arrow, arrow-file) holding ``docs``."""
    if kind == "parquet":
        return write_parquet(tmp_path / (name or "c.parquet"), docs, field)
    if kind in ("arrow", "arrow-file"):
        return write_arrow(tmp_path / (name or "c.arrow"), docs, field, stream=kind == "arrow")
    data = txt_bytes(docs) if kind == "txt" else jsonl_bytes(docs, field)
    path = tmp_path / (name or f"c.{kind}{SUFFIX[compression]}")
    path.write_bytes(COMPRESS[compression](data))
    return path


def read_all(found, piece_bytes=64 << 20, text_field="text"):
    return [doc for piece in plan_pieces(found, piece_bytes=piece_bytes)
            for doc in read_piece(piece, text_field=text_field)]


def fails(found, text_field="text", piece_bytes=64 << 20) -> str:
    with pytest.raises(CorpusError) as info:
        read_all(found, piece_bytes, text_field)
    return str(info.value)


# --- formats and compressions ----------------------------------------------------------------

MATRIX = [(kind, c) for kind in ("txt", "jsonl", "json") for c in COMPRESS] + [
    ("parquet", "none"), ("arrow", "none"), ("arrow-file", "none")]


@pytest.mark.parametrize("kind, compression", MATRIX)
def test_every_format_and_compression_reads_the_same_documents(tmp_path, kind, compression):
    found = discover([write(tmp_path, kind, compression=compression)])
    assert [(s.format, s.compression) for s in found] == [
        ({"json": "jsonl", "arrow-file": "arrow"}.get(kind, kind), compression)]
    assert read_all(found) == DOCS


def test_compression_is_read_from_the_bytes_not_the_name(tmp_path):
    path = tmp_path / "c.txt"
    path.write_bytes(zstandard.ZstdCompressor().compress(txt_bytes(DOCS)))
    assert discover([path])[0].compression == "zstd"
    assert read_all(discover([path])) == DOCS
    plain = tmp_path / "p.txt"
    plain.write_bytes(b"BZh5 is how this text starts.\n")  # "BZh" without a bzip2 block after it
    assert discover([plain])[0].compression == "none" and read_all(discover([plain])) == [
        ["BZh5 is how this text starts."]]


def test_multi_frame_zstd_and_multi_member_gzip_are_read_whole(tmp_path):
    half = len(DOCS) // 2
    first, second = txt_bytes(DOCS[:half]), txt_bytes(DOCS[half:])
    z = zstandard.ZstdCompressor()
    (tmp_path / "a.txt.zst").write_bytes(z.compress(first + b"\n") + z.compress(second))
    (tmp_path / "b.txt.gz").write_bytes(gzip.compress(first + b"\n") + gzip.compress(second))
    assert read_all(discover([tmp_path / "a.txt.zst"])) == DOCS
    assert read_all(discover([tmp_path / "b.txt.gz"])) == DOCS


def test_text_field_chooses_the_field_or_column(tmp_path):
    for kind in ("jsonl", "parquet", "arrow"):
        found = discover([write(tmp_path, kind, field="content", name=f"c.{kind}")])
        assert read_all(found, text_field="content") == DOCS
        message = fails(found)  # the default "text" is missing
        assert f'"c.{kind}"' in message and '"text"' in message and '"content"' in message
        assert "text field" in message


def test_null_texts_are_skipped(tmp_path):
    (tmp_path / "n.jsonl").write_text('{"text": null}\n{"text": "kept"}\n\n{"text": null, "id": 2}\n')
    pq.write_table(pa.table({"text": [None, "kept too", None]}), tmp_path / "n.parquet")
    assert read_all(discover([tmp_path / "n.jsonl", tmp_path / "n.parquet"])) == [["kept"], ["kept too"]]


def test_a_column_that_is_not_text_is_refused(tmp_path):
    pq.write_table(pa.table({"text": [1, 2]}), tmp_path / "ints.parquet")
    message = fails(discover([tmp_path / "ints.parquet"]))
    assert '"ints.parquet"' in message and "int64" in message and "not text" in message


@pytest.mark.parametrize("line, expected", [
    ('["a list"]', "is a JSON list, not an object"),
    ('{"text": 5}', 'has a "text" field that is a JSON number, not a string'),
    ('{"body": "x", "id": 1}', 'has no "text" field; its fields are "body", "id"'),
    ('{"text": "unclosed', "is not valid JSON"),
])
def test_jsonl_line_errors_name_the_file_and_line(tmp_path, line, expected):
    (tmp_path / "bad.jsonl").write_text('{"text": "fine"}\n' + line + "\n")
    message = fails(discover([tmp_path / "bad.jsonl"]))
    assert expected in message and 'Line 2 of "bad.jsonl"' in message


def test_a_long_txt_document_is_cut_between_lines(tmp_path, monkeypatch):
    monkeypatch.setattr(reading, "MAX_DOCUMENT_CHARS", 50)
    lines = [f"line {i} of one long document" for i in range(10)]
    (tmp_path / "long.txt").write_text("\n".join(lines))
    docs = read_all(discover([tmp_path / "long.txt"]))
    assert len(docs) > 1 and sum(docs, []) == lines


# --- pieces ------------------------------------------------------------------------------------

MANY = [[f"Document {i}, line one.", f"Line two of {i}: ünïcode ✓."] for i in range(60)]


@pytest.mark.parametrize("kind", ["txt", "jsonl", "parquet", "arrow"])
def test_small_pieces_concatenate_to_the_whole(tmp_path, kind):
    found = discover([write(tmp_path, kind, MANY)])
    pieces = plan_pieces(found, piece_bytes=200)
    assert len(pieces) > 3 and [p.index for p in pieces] == list(range(len(pieces)))
    assert [doc for p in pieces for doc in read_piece(p)] == read_all(found) == MANY


def test_txt_pieces_start_after_a_blank_line(tmp_path):
    # blank lines holding spaces, \r\n line ends and long runs without a blank line
    text = "".join(f"Doc {i} first line.\r\nDoc {i} second line.\r\n{' ' * (i % 3)}\r\n" for i in range(40))
    text += "A last document\nwithout any blank line " + "and on " * 200 + "\n"
    path = tmp_path / "c.txt"
    path.write_bytes(text.encode())
    found = discover([path])
    pieces = plan_pieces(found, piece_bytes=150)
    data = path.read_bytes()
    assert len(pieces) > 5 and pieces[-1].stop == len(data)
    for before, after in zip(pieces, pieces[1:]):
        assert before.stop == after.start
        assert re.search(rb"\n[ \r]*\n\Z", data[: after.start])  # just after a whitespace-only line
    whole = read_all(found)
    assert [doc for p in pieces for doc in read_piece(p)] == whole and len(whole) == 41


def test_a_txt_file_without_blank_lines_is_one_piece(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("\n".join(f"line {i}" for i in range(200)))
    assert len(plan_pieces(discover([path]), piece_bytes=100)) == 1


def test_jsonl_pieces_start_at_line_starts_and_compressed_files_are_one_piece(tmp_path):
    plain = write(tmp_path, "jsonl", MANY)
    packed = write(tmp_path, "jsonl", MANY, compression="zstd")
    pieces = plan_pieces(discover([plain, packed]), piece_bytes=300)
    data = plain.read_bytes()
    text_pieces = [p for p in pieces if p.source.compression == "none"]
    assert len(text_pieces) > 3 and all(data[p.start - 1 : p.start] == b"\n" for p in text_pieces[1:])
    assert [(p.start, p.stop) for p in pieces if p.source.compression == "zstd"] == [(0, -1)]


def test_pieces_are_deterministic_and_survive_json(tmp_path):
    found = discover([write(tmp_path, "txt", MANY), write(tmp_path, "parquet", MANY)])
    pieces = plan_pieces(found, piece_bytes=250)
    again = [Piece.from_dict(json.loads(json.dumps(p.to_dict()))) for p in plan_pieces(found, piece_bytes=250)]
    assert again == pieces
    assert SourceFile.from_dict(found[0].to_dict()) == found[0]


def test_parquet_pieces_are_row_group_ranges(tmp_path):
    found = discover([write(tmp_path, "parquet", MANY)])  # 20 row groups of 3 rows
    pieces = plan_pieces(found, piece_bytes=1)
    assert [(p.start, p.stop) for p in pieces] == [(i, i + 1) for i in range(20)]
    assert list(read_piece(pieces[4])) == MANY[12:15]


def test_on_bytes_reports_progress_within_the_piece(tmp_path):
    path = write(tmp_path, "txt", MANY)
    seen = []
    piece = plan_pieces(discover([path]), piece_bytes=300)[1]
    list(read_piece(piece, on_bytes=seen.append))
    assert seen and seen[-1] == piece.stop - piece.start


@pytest.mark.parametrize("chunk", [1 << 20, 2])
def test_a_byte_range_runs_to_the_end_of_the_line_that_crosses_stop(tmp_path, monkeypatch, chunk):
    monkeypatch.setattr(reading, "_CHUNK", chunk)  # 2: the rest of the line comes in several reads
    path = tmp_path / "r.txt"
    path.write_bytes(b"one\ntwo\nthree\nfour\n")
    lines = lambda start, stop: [line for _, line in UploadReader(path, lambda f: None, start=start, stop=stop)]  # noqa: E731
    assert lines(4, 8) == ["two"]
    assert lines(4, 9) == ["two", "three"]  # stop inside "three": the whole line
    assert lines(0, 4) == ["one"] and lines(14, 19) == ["four"]


# --- reading errors name the file -------------------------------------------------------------


def test_utf16_is_a_sentence_naming_the_file(tmp_path):
    (tmp_path / "wide.txt").write_bytes(txt_bytes(DOCS).decode().encode("utf-16"))
    message = fails(discover([tmp_path / "wide.txt"]))
    assert 'The file "wide.txt" is encoded as UTF-16' in message


def test_utf16_is_reported_by_every_piece(tmp_path):
    (tmp_path / "wide.jsonl").write_bytes(jsonl_bytes(MANY).decode().encode("utf-16-le"))
    pieces = plan_pieces(discover([tmp_path / "wide.jsonl"]), piece_bytes=500)
    assert len(pieces) > 1
    with pytest.raises(CorpusError, match="UTF-16"):
        list(read_piece(pieces[-1]))


def test_a_nul_byte_gives_its_offset_in_the_file(tmp_path):
    data = txt_bytes(MANY)
    path = tmp_path / "bin.txt"
    path.write_bytes(data + b"x\x00y\n")
    pieces = plan_pieces(discover([path]), piece_bytes=300)
    with pytest.raises(CorpusError) as info:
        list(read_piece(pieces[-1]))
    assert '"bin.txt"' in str(info.value) and f"byte offset {len(data) + 1}" in str(info.value)


def test_invalid_utf8_in_a_later_piece_says_after_which_offset(tmp_path):
    data = txt_bytes(MANY)
    path = tmp_path / "latin.txt"
    path.write_bytes(data + "Café\n".encode("latin-1"))
    pieces = plan_pieces(discover([path]), piece_bytes=300)
    with pytest.raises(CorpusError) as info:
        list(read_piece(pieces[-1]))
    message = str(info.value)
    assert '"latin.txt" is not valid UTF-8' in message and f"byte offset {len(data) + 3}" in message
    assert f"after byte offset {pieces[-1].start}" in message


@pytest.mark.parametrize("compression", ["zstd", "bz2", "gzip"])
def test_truncated_compressed_data_is_damaged_naming_file_and_compression(tmp_path, compression):
    data = COMPRESS[compression](txt_bytes(MANY * 20))
    path = tmp_path / f"cut.txt{SUFFIX[compression]}"
    path.write_bytes(data[: len(data) * 2 // 3])
    message = fails(discover([path]))
    name = {"zstd": "zstd", "bz2": "bzip2", "gzip": "gzip"}[compression]
    assert f'"cut.txt{SUFFIX[compression]}" looks {name}-compressed but is damaged' in message


def test_garbage_inside_zstd_data_is_damaged(tmp_path):
    data = bytearray(zstandard.ZstdCompressor().compress(txt_bytes(MANY * 20)))
    data[40:60] = b"\xff" * 20
    (tmp_path / "bad.jsonl.zst").write_bytes(bytes(data))
    assert "damaged" in fails(discover([tmp_path / "bad.jsonl.zst"]))


def test_data_compressed_twice_is_explained(tmp_path):
    (tmp_path / "twice.txt.gz").write_bytes(gzip.compress(bz2.compress(txt_bytes(DOCS))))
    assert "compressed twice" in fails(discover([tmp_path / "twice.txt.gz"]))


def test_other_binaries_are_still_refused(tmp_path):
    (tmp_path / "x.txt").write_bytes(b"\xfd7zXZ\x00\x00rest")
    assert "xz-compressed" in fails(discover([tmp_path / "x.txt"]))


def test_zstd_decompression_is_bounded_while_reading(tmp_path, monkeypatch):
    monkeypatch.setattr(reading, "UPLOAD_MAX_DECOMPRESSED_BYTES", 3_000_000)
    monkeypatch.setattr(reading, "_CHUNK", 1 << 18)
    path = tmp_path / "bomb.txt.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress((b"a" * 999 + b"\n") * 50_000))  # 50 MB
    reads = []
    original = UploadReader._read
    monkeypatch.setattr(UploadReader, "_read", lambda self, stream: reads.append(1) or original(self, stream))
    message = fails(discover([path]))
    assert '"bomb.txt.zst" decompresses to more than' in message and "UPLOAD_MAX_DECOMPRESSED_BYTES" in message
    assert len(reads) < 20  # stopped near 3 MB, not after 50


def test_damaged_parquet_and_arrow_are_sentences(tmp_path):
    (tmp_path / "x.parquet").write_bytes(b"not parquet at all")
    (tmp_path / "x.arrow").write_bytes(b"not arrow at all either")
    assert '"x.parquet" is not a readable Parquet file' in fails(discover([tmp_path / "x.parquet"]))
    assert '"x.arrow" is not a readable Arrow file' in fails(discover([tmp_path / "x.arrow"]))


# --- discover ----------------------------------------------------------------------------------


def test_discover_orders_specs_then_relative_paths(tmp_path):
    shards = tmp_path / "shards"
    (shards / "b").mkdir(parents=True)
    for name in ("shard-00010.jsonl", "shard-00002.jsonl", "b/inner.txt", "a.txt.gz"):
        write(tmp_path, "txt" if name.endswith((".txt", ".gz")) else "jsonl", name=f"shards/{name}",
              compression="gzip" if name.endswith(".gz") else "none")
    single = write(tmp_path, "txt", name="single.txt")
    found = discover([single, shards])
    assert [s.name for s in found] == ["single.txt", "a.txt.gz", "b/inner.txt", "shard-00002.jsonl",
                                      "shard-00010.jsonl"]
    assert all(s.bytes > 0 and s.path.startswith("/") for s in found)


def test_discover_globs_relative_to_base_and_drops_repeats(tmp_path):
    for i in (3, 1, 2):
        write(tmp_path, "jsonl", name=f"part-{i:05d}.jsonl")
    (tmp_path / "sub").mkdir()
    write(tmp_path, "jsonl", name="sub/part-00009.jsonl")
    found = discover(["part-*.jsonl", "**/*.jsonl"], base=tmp_path)
    assert [s.name for s in found] == ["part-00001.jsonl", "part-00002.jsonl", "part-00003.jsonl",
                                      "sub/part-00009.jsonl"]


def test_discover_skips_hidden_files_and_markers_but_refuses_unknown_types(tmp_path):
    write(tmp_path, "txt", name="data.txt")
    for junk in (".DS_Store", ".gitattributes", "_SUCCESS", ".data.txt.crc", "part.crc"):
        (tmp_path / junk).write_bytes(b"junk")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config.txt").write_text("hidden folder")
    assert [s.name for s in discover([tmp_path])] == ["data.txt"]
    (tmp_path / "README.md").write_text("# about")
    with pytest.raises(CorpusError) as info:
        discover([tmp_path])
    assert '"README.md"' in str(info.value) and ACCEPTED_DESCRIPTION in str(info.value)


def touch(path, data: bytes):
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("make, expected", [
    (lambda p: p / "missing.txt", "does not exist"),
    (lambda p: touch(p / "empty.txt", b""), '"empty.txt" is empty \\(0 bytes\\)'),
    (lambda p: (p / "nothing").mkdir() or p / "nothing", "No corpus files were found"),
    (lambda p: p / "*.nomatch", "Nothing matches"),
    (lambda p: touch(p / "c.parquet.gz", b"x"), "not a type of file"),
])
def test_discover_problems_are_sentences(tmp_path, make, expected):
    with pytest.raises(CorpusError, match=expected):
        discover([make(tmp_path)])


def test_save_to_disk_folder_gives_its_arrow_files_in_state_order(tmp_path):
    ds = tmp_path / "ds"
    ds.mkdir()
    write_arrow(ds / "data-00000-of-00002.arrow", DOCS[:5])
    write_arrow(ds / "data-00001-of-00002.arrow", DOCS[5:])
    # state.json's order wins over the names' order, and its json files are metadata
    (ds / "state.json").write_text(json.dumps({"_data_files": [{"filename": "data-00001-of-00002.arrow"},
                                                               {"filename": "data-00000-of-00002.arrow"}],
                                               "_fingerprint": "abc", "_split": "train"}))
    (ds / "dataset_info.json").write_text(json.dumps({"features": {"text": {"dtype": "string"}}}))
    found = discover([ds])
    assert [s.name for s in found] == ["data-00001-of-00002.arrow", "data-00000-of-00002.arrow"]
    assert read_all(found) == DOCS[5:] + DOCS[:5]
    # a DatasetDict: its dataset_dict.json is metadata too
    (tmp_path / "dataset_dict.json").write_text(json.dumps({"splits": ["ds"]}))
    assert [s.name for s in discover([tmp_path])] == ["ds/data-00001-of-00002.arrow", "ds/data-00000-of-00002.arrow"]
    assert len(discover([str(ds / "*")])) == 2


def test_save_to_disk_state_must_name_files_inside_its_folder(tmp_path):
    ds = tmp_path / "ds"
    ds.mkdir()
    write_arrow(tmp_path / "outside.arrow", DOCS)
    (ds / "state.json").write_text(json.dumps({"_data_files": [{"filename": "../outside.arrow"}]}))
    with pytest.raises(CorpusError, match="not a plain file name"):
        discover([ds])


def test_describe_counts_formats_and_compressions(tmp_path):
    found = discover([write(tmp_path, "parquet"), write(tmp_path, "jsonl", compression="gzip"),
                      write(tmp_path, "jsonl")])
    summary = describe(found)
    assert summary == {"files": 3, "bytes": sum(s.bytes for s in found), "formats": {"jsonl": 2, "parquet": 1},
                       "compressions": {"none": 2, "gzip": 1}}


def test_upload_suffixes_are_longest_first():
    assert list(UPLOAD_SUFFIXES) == sorted(UPLOAD_SUFFIXES, key=len, reverse=True)
    for suffix in (".jsonl.zst", ".json.gz", ".txt.bz2", ".parquet", ".arrow", ".zip", ".tar", ".tar.gz", ".tgz"):
        assert suffix in UPLOAD_SUFFIXES
    assert ".parquet.gz" not in UPLOAD_SUFFIXES and sources.format_of("a.parquet.gz") is None


def test_upload_reader_keeps_its_old_call(tmp_path):
    path = tmp_path / "u.txt"
    path.write_bytes(gzip.compress(b"a\r\nb\n"))
    fractions = []
    reader = UploadReader(path, fractions.append, error=CorpusError, formats=".txt", long_line_hint="Hint.")
    assert list(reader) == [(1, "a"), (2, "b")] and reader.compressed and fractions[-1] == 1.0
