"""Readers for uploaded labelled data: CSV, TSV, JSONL, CoNLL and SQuAD JSON, streaming.

Every reader turns one file into :class:`Row` objects: the row's values by column name, and
``where``, the words that name the row in an error message ("Row 12 (line 13)", "Line 7",
"Sentence 3 (line 40)", 'Question 5 (id "56be4db0")'). Bytes are checked and decoded by
:class:`trainer.prep.corpus.UploadReader` (gzip, UTF-16, binary files, invalid UTF-8 with its
byte offset), so every format gets the same messages for the same problems.

Memory stays bounded: CSV, TSV, JSONL and CoNLL are read line by line (a CoNLL sentence may
hold at most MAX_SENTENCE_TOKENS tokens); a SQuAD file is parsed one article at a time.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from trainer import jsonio
from trainer.jsonio import json_type  # noqa: F401  (re-exported: examples.py takes it from here)
from trainer.errors import DatasetError
from trainer.prep.corpus import UploadReader
from trainer.prep.labelled.tasks import suggest_mapping, suggest_task

FORMATS: dict[str, str] = {
    "csv": "comma-separated values with a header row (the delimiter may also be ; | or a tab)",
    "tsv": "tab-separated values with a header row; quotes are part of the text",
    "jsonl": "one JSON object per line",
    "conll": "CoNLL: a token and its tag on each line, separated by a tab or spaces; a blank line "
             "between sentences",
    "squad": "SQuAD JSON, v1.1 or v2.0: data -> paragraphs -> qas",
}
ACCEPTED = ".csv, .tsv, .jsonl, .conll or SQuAD .json"
_EXTENSIONS = {"csv": "csv", "tsv": "tsv", "tab": "tsv", "jsonl": "jsonl", "ndjson": "jsonl", "json": "json",
               "conll": "conll", "iob": "conll", "bio": "conll", "txt": "conll"}
CONLL_COLUMNS = ["tokens", "tags"]
SQUAD_COLUMNS = ["id", "question", "context", "answers"]
PREVIEW_ROWS = 10
PREVIEW_CHARS = 300
MAX_SENTENCE_TOKENS = 10_000
_DELIMITERS = (",", ";", "\t", "|")


@dataclass
class Row:
    """One example as read: ``values`` by column name, ``where`` names it in messages."""

    values: dict[str, Any]
    where: str


@dataclass
class Preview:
    """What :func:`sniff` found in an upload."""

    format: str  # a key of FORMATS
    columns: list[str]  # CoNLL: tokens, tags; SQuAD: id, question, context, answers
    rows: list[dict[str, Any]]  # the first rows, long strings shortened
    mapping: dict[str, str]  # suggested {column: role}; {} when no header name is recognised
    task: str | None  # suggested task type, or None
    details: dict[str, Any] = field(default_factory=dict)  # "compressed"; "delimiter" (CSV); "squad_version"

    def to_dict(self) -> dict:
        return asdict(self)


def detect_format(path: Path, original_filename: str) -> str:
    """The format of an upload from its name (``.gz`` allowed); a ``.json`` file is SQuAD unless its
    first line is a whole JSON object without "data" (JSON Lines under a .json name)."""
    fmt = extension_format(original_filename)
    return _json_kind(path) if fmt == "json" else fmt


def extension_format(original_filename: str) -> str:
    """The format a file's extension names (``.gz`` allowed): a key of FORMATS, or "json" (SQuAD or
    JSON Lines, which only the content tells); DatasetError for another extension."""
    name = (original_filename or "").strip().lower()
    if name.endswith(".gz"):
        name = name[:-3]
    ext = name.rsplit(".", 1)[-1] if "." in name else ""
    fmt = _EXTENSIONS.get(ext)
    if fmt is None:
        shown = Path(original_filename or "").name or "(no name)"
        raise DatasetError(f'"{shown}" is not a supported file type; upload a labelled dataset as {ACCEPTED} '
                           "(any of them may be gzip-compressed as .gz).")
    return fmt


def _json_kind(path: Path) -> str:
    pieces = _upload(path).texts()
    try:
        head = next(pieces, "")
    finally:
        pieces.close()
    stripped = head.lstrip()
    if stripped.startswith("["):
        raise DatasetError("The JSON file holds a list; upload one JSON object per line as .jsonl, or a SQuAD "
                           'file (an object with a "data" list).')
    first_line = stripped.split("\n", 1)[0].strip()
    try:
        first = jsonio.loads(first_line, subject="The JSON file")
    except jsonio.JsonNestingError as e:
        raise DatasetError(str(e)) from None
    except json.JSONDecodeError:
        return "squad"
    return "jsonl" if isinstance(first, dict) and "data" not in first else "squad"


def _upload(path: Path, on_progress: Callable[[float], None] | None = None) -> UploadReader:
    return UploadReader(Path(path), on_progress or (lambda fraction: None), error=DatasetError, formats=ACCEPTED,
                        long_line_hint="Put each row on its own line.")


class DatasetReader:
    """The rows of one uploaded file: ``for row in DatasetReader(path, "csv")``.

    ``columns`` is known from the start for CoNLL and SQuAD, after the header row for CSV and
    TSV, and stays None for JSONL (each line has its own keys). ``file_label`` ("validation")
    is added to every ``where`` when a dataset comes in several files. ``on_progress`` is
    called with the fraction of the file read.
    """

    def __init__(self, path: Path, fmt: str, *, file_label: str = "",
                 on_progress: Callable[[float], None] | None = None):
        if fmt not in FORMATS:
            raise ValueError(f"unknown format {fmt!r}")
        self.fmt = fmt
        self.upload = _upload(path, on_progress)
        self.suffix = f" of the {file_label} file" if file_label else ""
        self.columns: list[str] | None = {"conll": CONLL_COLUMNS, "squad": SQUAD_COLUMNS}.get(fmt)
        self.details: dict[str, Any] = {}
        self.rows = 0

    def __iter__(self) -> Iterator[Row]:
        rows = {"csv": self._csv_rows, "tsv": self._csv_rows, "jsonl": self._jsonl_rows,
                "conll": self._conll_rows, "squad": self._squad_rows}[self.fmt]()
        for row in rows:
            self.rows += 1
            yield row
        self.details["compressed"] = self.upload.compressed

    # --- CSV and TSV -----------------------------------------------------------------------

    def _csv_rows(self) -> Iterator[Row]:
        lines = iter(self.upload)
        header_line, header_text = next(((n, t) for n, t in lines if t.strip()), (0, ""))
        if not header_line:
            raise DatasetError("The file holds only blank lines.")
        tsv = self.fmt == "tsv"
        delimiter = "\t" if tsv else max(_DELIMITERS, key=lambda d: (header_text.count(d), -_DELIMITERS.index(d)))
        self.details["compressed"] = self.upload.compressed
        self.details["delimiter"] = delimiter
        at = {"line": header_line}  # the last line handed to the csv module

        def feed() -> Iterator[str]:
            yield header_text + "\n"
            for n, text in lines:
                at["line"] = n
                yield text + "\n"

        # TSV has no quoting (tabs cannot occur inside a field), so quotes in text stay text.
        reader = csv.reader(feed(), delimiter=delimiter, quoting=csv.QUOTE_NONE if tsv else csv.QUOTE_MINIMAL,
                            strict=True)
        header = self._next_record(reader, at, header_line)
        columns = [name.strip() or f"column_{i + 1}" for i, name in enumerate(header or [])]
        for i, name in enumerate(columns):
            if name in columns[:i]:
                raise DatasetError(f'The header (line {header_line}){self.suffix} names the column "{name}" twice; '
                                   "give each column its own name.")
        self.columns = columns
        self.details["header_line"] = header_line
        count = 0
        while True:
            start = at["line"] + 1
            record = self._next_record(reader, at, start)
            if record is None:
                break
            if not record or (len(columns) > 1 and len(record) == 1 and not record[0].strip()):
                continue  # a blank line
            count += 1
            where = f"Row {count} (line {start}){self.suffix}"
            if len(record) > len(columns) and not any(f.strip() for f in record[len(columns):]):
                record = record[: len(columns)]  # trailing empty fields (some spreadsheets write them)
            if len(record) != len(columns):
                raise DatasetError(f"{where} has {len(record)} field{'s' * (len(record) != 1)} but the header has "
                                   f"{len(columns)}; check the delimiter and that fields holding "
                                   f"{'tabs' if tsv else repr(delimiter)} are quoted.")
            yield Row(dict(zip(columns, record)), where)
        if count == 0:
            raise DatasetError(f"The file{self.suffix} has a header (line {header_line}) but no rows.")

    def _next_record(self, reader, at: dict, start: int) -> list[str] | None:
        try:
            return next(reader)
        except StopIteration:
            return None
        except csv.Error as e:
            kind = self.fmt.upper()
            began = f" (in the row that starts on line {start})" if start < at["line"] else ""
            raise DatasetError(f"The {kind} file{self.suffix} does not parse at line {at['line']}{began}: {e}; "
                               "check the delimiter and that every quote is closed.") from None

    # --- JSONL -----------------------------------------------------------------------------

    def _jsonl_rows(self) -> Iterator[Row]:
        count = 0
        for line_no, line in self.upload:
            if not line.strip():
                continue
            where = f"Line {line_no}{self.suffix}"
            try:
                obj = jsonio.loads(line, subject=where)
            except jsonio.JsonNestingError as e:
                raise DatasetError(str(e)) from None
            except json.JSONDecodeError as e:
                raise DatasetError(f"{where} is not valid JSON ({e.msg} at column {e.colno}); each line must "
                                   "hold one JSON object.") from None
            if not isinstance(obj, dict):
                raise DatasetError(f"{where} holds a JSON {json_type(obj)}, not an object; each line must hold "
                                   'one object such as {"text": "...", "label": "..."}.')
            count += 1
            yield Row(obj, where)
        if count == 0:
            raise DatasetError(f"The file{self.suffix} holds only blank lines.")

    # --- CoNLL -----------------------------------------------------------------------------

    def _conll_rows(self) -> Iterator[Row]:
        tokens: list[str] = []
        tags: list[str] = []
        start = count = 0
        for line_no, line in self.upload:
            if not line.strip() or line.startswith("-DOCSTART-"):
                if tokens:
                    count += 1
                    yield Row({"tokens": tokens, "tags": tags}, f"Sentence {count} (line {start}){self.suffix}")
                    tokens, tags = [], []
                continue
            parts = [p.strip() for p in line.split("\t")] if "\t" in line else line.split()
            if len(parts) < 2 or not parts[0] or not parts[-1]:
                raise DatasetError(f"Line {line_no}{self.suffix} does not hold a token and a tag; each line of a "
                                   "CoNLL file holds a token and its tag, separated by a tab or a space.")
            if not tokens:
                start = line_no
            tokens.append(parts[0])
            tags.append(parts[-1])
            if len(tokens) > MAX_SENTENCE_TOKENS:
                raise DatasetError(f"Sentence {count + 1} (line {start}){self.suffix} has more than "
                                   f"{MAX_SENTENCE_TOKENS:,} tokens; put a blank line between sentences.")
        if tokens:
            count += 1
            yield Row({"tokens": tokens, "tags": tags}, f"Sentence {count} (line {start}){self.suffix}")
        if count == 0:
            raise DatasetError(f"The file{self.suffix} holds only blank lines.")

    # --- SQuAD -----------------------------------------------------------------------------

    def _squad_rows(self) -> Iterator[Row]:
        stream = _JsonStream(self.upload.texts(), self.suffix)
        stream.take("{", "at the start of a SQuAD file")
        counter = [0]
        saw_data = False
        while stream.peek() != "}":
            key = stream.value()
            if not isinstance(key, str):
                stream.fail("expected a key (a string)")
            stream.take(":", "after a key")
            if key == "data":
                saw_data = True
                stream.take("[", 'after "data" (a list of articles)')
                article_no = 0
                while stream.peek() != "]":
                    article_no += 1
                    yield from self._article_rows(stream.value(), article_no, counter)
                    if stream.peek() == ",":
                        stream.pos += 1
                    elif stream.peek() != "]":
                        stream.fail("expected , or ] between articles")
                stream.pos += 1
            else:
                value = stream.value()
                if key == "version":
                    self.details["squad_version"] = str(value)
            if stream.peek() == ",":
                stream.pos += 1
            elif stream.peek() != "}":
                stream.fail("expected , or } in the top-level object")
        if not saw_data:
            raise DatasetError(f'The JSON file{self.suffix} has no "data" list, so it is not a SQuAD file (data -> '
                               "paragraphs -> qas).")
        if counter[0] == 0:
            raise DatasetError(f"The SQuAD file{self.suffix} holds no questions.")

    def _article_rows(self, article, article_no: int, counter: list[int]) -> Iterator[Row]:
        place = f"Article {article_no}{self.suffix}"
        paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
        if not isinstance(paragraphs, list):
            raise DatasetError(f'{place} has no "paragraphs" list; SQuAD articles hold data -> paragraphs -> qas.')
        for p_no, paragraph in enumerate(paragraphs, 1):
            place = f"Paragraph {p_no} of article {article_no}{self.suffix}"
            context = paragraph.get("context") if isinstance(paragraph, dict) else None
            qas = paragraph.get("qas") if isinstance(paragraph, dict) else None
            if not isinstance(context, str) or not isinstance(qas, list):
                raise DatasetError(f'{place} needs a "context" string and a "qas" list.')
            for qa in qas:
                counter[0] += 1
                qid = qa.get("id") if isinstance(qa, dict) else None
                where = (f'Question {counter[0]} (id "{qid}"){self.suffix}' if qid not in (None, "")
                         else f"Question {counter[0]} (paragraph {p_no} of article {article_no}){self.suffix}")
                if not isinstance(qa, dict):
                    raise DatasetError(f"{where} is a JSON {json_type(qa)}, not an object.")
                answers = qa.get("answers", [])
                if qa.get("is_impossible") is True:
                    answers = []  # SQuAD 2.0: unanswerable; its "plausible_answers" are not answers
                elif not answers:
                    raise DatasetError(f'{where} has no answers and is not marked "is_impossible": true.')
                values = {"id": "" if qid is None else str(qid), "question": qa.get("question"),
                          "context": context, "answers": answers}
                yield Row(values, where)


class _JsonStream:
    """Pulls JSON values one at a time out of text pieces: memory holds one value (a SQuAD
    article), not the file. ``pos`` indexes ``buf``; callers step over single characters."""

    _DECODER = json.JSONDecoder()
    _NON_BLANK = re.compile(r"\S")
    _MARGIN = 64  # an error this close to the end of the buffer may only mean "read more"

    def __init__(self, pieces: Iterator[str], suffix: str):
        self.pieces = pieces
        self.suffix = suffix
        self.buf = ""
        self.pos = 0
        self.eof = False
        self.lines_before = 0  # line breaks in the text already dropped from buf

    def _more(self) -> bool:
        if self.eof:
            return False
        piece = next(self.pieces, None)
        if piece is None:
            self.eof = True
            return False
        self.lines_before += self.buf.count("\n", 0, self.pos)
        self.buf = self.buf[self.pos :] + piece
        self.pos = 0
        return True

    def peek(self) -> str:
        """The next non-blank character ("" at the end), with ``pos`` moved onto it."""
        while True:
            m = self._NON_BLANK.search(self.buf, self.pos)
            if m:
                self.pos = m.start()
                return self.buf[self.pos]
            self.pos = len(self.buf)
            if not self._more():
                return ""

    def take(self, char: str, context: str) -> None:
        if self.peek() != char:
            self.fail(f"expected {char} {context}")
        self.pos += 1

    def value(self) -> Any:
        """The next JSON value. Its text so far is measured for depth before each decode, so a
        value nested deeper than jsonio.MAX_DEPTH is refused before ``json`` recurses into it."""
        self.peek()
        while True:
            try:
                jsonio.check_depth(self.buf, self.pos, subject=f"The JSON file{self.suffix}")
            except jsonio.JsonNestingError as e:
                raise DatasetError(str(e)) from None
            try:
                value, end = self._DECODER.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as e:
                maybe_cut = e.pos >= len(self.buf) - self._MARGIN or e.msg.startswith("Unterminated string")
                if maybe_cut and self._more():
                    continue
                self.fail(e.msg, e.pos)
            if end == len(self.buf) and not isinstance(value, (dict, list, str)) and self._more():
                continue  # a number or literal at the end of the buffer may go on in the next piece
            self.pos = end
            return value

    def fail(self, problem: str, pos: int | None = None) -> NoReturn:
        pos = self.pos if pos is None else pos
        line = self.lines_before + self.buf.count("\n", 0, pos) + 1
        raise DatasetError(f"The JSON file{self.suffix} is not valid at line {line} ({problem}); a SQuAD file is "
                           "one JSON object with a data -> paragraphs -> qas structure.")


def sniff(path: Path, original_filename: str, *, rows: int = PREVIEW_ROWS) -> Preview:
    """Detect the format, read the first ``rows`` rows, and suggest a mapping and a task.

    Reads only as far as those rows (a SQuAD file: its first article). Raises DatasetError
    when the file cannot be read or one of those rows is malformed.
    """
    fmt = detect_format(path, original_filename)
    reader = DatasetReader(path, fmt)
    first: list[dict] = []
    iterator = iter(reader)
    try:
        for row in iterator:
            first.append(row.values)
            if len(first) >= rows:
                break
    finally:
        iterator.close()
    columns = reader.columns
    if columns is None:  # JSONL: the keys of the rows read, in order of appearance
        columns = list(dict.fromkeys(key for values in first for key in values))
    mapping = suggest_mapping(columns)
    details = {"compressed": reader.upload.compressed, **reader.details}
    return Preview(format=fmt, columns=columns, rows=[_shorten(values) for values in first], mapping=mapping,
                   task=suggest_task(mapping, first), details=details)


def sniff_files(files: Mapping[str, tuple[Path, str]]) -> Preview:
    """:func:`sniff` for a dataset in one file per split, ``{split: (path, original filename)}``
    with a train file: the first rows of every file are read (a file that does not read is
    refused at once, named by its split), and all must be in one format. Returns the train
    file's preview: its columns are the ones the mapping names."""
    if "train" not in files:
        raise DatasetError("A dataset in separate files needs a train file.")
    previews = {}
    for split, (path, name) in files.items():
        try:
            previews[split] = sniff(path, name)
        except DatasetError as error:
            raise DatasetError(f"The {split} file {name}: {error}") from None
    train = previews["train"]
    for split, preview in previews.items():
        if preview.format != train.format:
            raise DatasetError(f"The {split} file {files[split][1]} is {preview.format.upper()} but the train file "
                               f"{files['train'][1]} is {train.format.upper()}; give every split in one format.")
    return train


def _shorten(value: Any) -> Any:
    if isinstance(value, str) and len(value) > PREVIEW_CHARS:
        return value[: PREVIEW_CHARS - 1].rstrip() + "…"
    if isinstance(value, dict):
        return {k: _shorten(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shorten(v) for v in value[:50]] + (["…"] if len(value) > 50 else [])
    return value
