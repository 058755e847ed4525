"""Corpus preparation: check an upload, clean it with the C4 rules, split it for training.

``ingest`` turns one uploaded file (``.txt``/``.jsonl``, optionally gzip-compressed) into

    out_dir/train.txt, out_dir/valid.txt   one sentence per line, a blank line between documents
    out_dir/stats.json                     statistics, what each rule removed, a preview

in two streaming passes over the data, so a file far larger than memory is fine:

1. read the upload line by line (gunzip and UTF-8 decoding incrementally), group lines into
   documents, clean each document and write it to a temporary ``all.txt``;
2. pick the validation documents (seeded, exactly ``round(D * valid_fraction)`` of them,
   at least one) and copy every document of ``all.txt`` to its split.

Everything is written inside a temporary folder in ``out_dir`` and renamed into place at the
end; on any error the temporary folder is removed, so a failed ingest leaves nothing behind.
Problems the user can fix raise :class:`~trainer.errors.CorpusError` with a plain message.
"""

from __future__ import annotations

import array
import gzip
import hashlib
import json
import os
import random
import re
import shutil
import tempfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from trainer.prep.demo import write_demo_corpus  # noqa: F401  (re-exported: part of this module's API)
from trainer import jsonio
from trainer.errors import CorpusError, UserError
from trainer.prep.sentences import count_words, split_sentences
from trainer.progress import PercentProgress

__all__ = [
    "BAD_WORDS",
    "RULES",
    "CleaningOptions",
    "IngestResult",
    "UploadReader",
    "ingest",
    "write_demo_corpus",
]

# --- what "big enough to train on" means (after cleaning) ---------------------------------
MIN_DOCUMENTS = 2  # one is held out for validation
MIN_SENTENCES = 20
MIN_WORDS = 200

# --- the C4 rules --------------------------------------------------------------------------
C4_MIN_WORDS_PER_LINE = 5
C4_MIN_SENTENCES_PER_PAGE = 3
C4_SPAN_SENTENCES = 3
# A line "ends in terminal punctuation" (C4: . ? ! "), plus closing curly quotes and the CJK
# enders so that non-English text is not wiped out; a line ending in an ellipsis does not count.
TERMINAL_MARKS = (".", "?", "!", '"', "”", "’", "'", "。", "！", "？")
ELLIPSES = ("...", "…")

# A deliberately short, mild stand-in for C4's "List of Dirty, Naughty, Obscene or Otherwise
# Bad Words": terms that mark adult or spam pages. Matched as whole words, ignoring case.
BAD_WORDS: tuple[str, ...] = (
    "porn",
    "porno",
    "pornographic",
    "pornography",
    "xxx",
    "nsfw",
    "hentai",
    "camgirl",
    "camgirls",
    "webcam sex",
    "escort service",
    "viagra",
    "cialis",
)
_BAD_WORDS_RE = re.compile(r"\b(?:" + "|".join(re.escape(w) for w in BAD_WORDS) + r")\b")

RULES: list[tuple[str, str, str]] = [
    (
        "terminal_punct",
        "Keep only lines that end in terminal punctuation",
        "Drops every line that does not end in . ! ? or a closing quote (or 。！？), and lines "
        "ending in an ellipsis. Removes menus, headings and boilerplate; also removes the "
        "continuation lines of hard-wrapped text.",
    ),
    (
        "min_words",
        f"Drop lines with fewer than {C4_MIN_WORDS_PER_LINE} words",
        "Short lines are mostly navigation, captions and buttons.",
    ),
    (
        "min_sentences",
        f"Drop documents with fewer than {C4_MIN_SENTENCES_PER_PAGE} sentences",
        "Applied after the line rules (and again after span de-duplication).",
    ),
    (
        "no_javascript",
        'Drop lines that mention "javascript"',
        'Removes "please enable JavaScript" warnings scraped from web pages.',
    ),
    (
        "no_lorem_or_braces",
        'Drop documents containing "lorem ipsum" or a curly brace',
        "Removes placeholder text and pages that contain program code.",
    ),
    (
        "dedup_spans",
        f"Remove repeated {C4_SPAN_SENTENCES}-sentence spans",
        "Keeps the first occurrence of any three consecutive sentences and removes the "
        "sentences of every later copy, across the whole corpus. Identical documents are "
        "always removed.",
    ),
    (
        "bad_words",
        "Drop documents containing words from a bad-word list",
        "Uses a short built-in list of adult and spam terms, matched as whole words.",
    ),
]

# Keys of IngestResult.removed: what was removed and whether it counts lines, pages or sentences.
REMOVED_KEYS = {
    "terminal_punct": "lines_without_terminal_punctuation",
    "min_words": f"lines_under_{C4_MIN_WORDS_PER_LINE}_words",
    "no_javascript": "lines_with_javascript",
    "no_lorem_or_braces": "pages_with_lorem_ipsum_or_braces",
    "bad_words": "pages_with_bad_words",
    "min_sentences": f"pages_under_{C4_MIN_SENTENCES_PER_PAGE}_sentences",
    "dedup_spans": "sentences_in_duplicate_spans",
}
ALWAYS_REMOVED_KEYS = ("duplicate_pages", "pages_left_empty")

ACCEPTED_FORMATS = ".txt, .jsonl, .txt.gz or .jsonl.gz"
PREVIEW_DOCUMENTS = 5
PREVIEW_SENTENCES = 8
PREVIEW_CHARS = 300

_CHUNK = 1 << 20
_MAX_LINE_CHARS = 64 << 20
# A gzip-compressed upload may expand to at most this many bytes (a small .gz can hold
# gigabytes); the environment variable of the same name sets it.
UPLOAD_MAX_DECOMPRESSED_BYTES = int(os.environ.get("UPLOAD_MAX_DECOMPRESSED_BYTES", str(16 * 1024**3)))
# A .txt "document" (lines up to a blank one) is cut into pieces of at most this many characters,
# so a file with no blank lines is not held in memory whole.
MAX_DOCUMENT_CHARS = 4 << 20
_UTF8_BOM = b"\xef\xbb\xbf"
_GZIP_MAGIC = b"\x1f\x8b"
# Files people upload by mistake, recognised by their first bytes.
_KNOWN_BINARIES = (
    (rb"%PDF-\d", "a PDF document"),
    (rb"PK\x03\x04", "a ZIP archive (or a .docx/.xlsx/.odt document, which are ZIP archives)"),
    (rb"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "an old Microsoft Office document"),
    (rb"\{\\rtf1", "an RTF document"),
    (rb"\x89PNG\r\n", "a PNG image"),
    (rb"\xff\xd8\xff", "a JPEG image"),
    (rb"BZh[1-9]1AY&SY", "a bzip2-compressed file"),
    (rb"\xfd7zXZ\x00", "an xz-compressed file"),
    (rb"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
)


@dataclass
class CleaningOptions:
    """The C4 cleaning rules, each switched on or off (all off: keep the text as it is)."""

    terminal_punct: bool = False
    min_words: bool = False
    min_sentences: bool = False
    no_javascript: bool = False
    no_lorem_or_braces: bool = False
    dedup_spans: bool = False
    bad_words: bool = False

    @classmethod
    def from_dict(cls, data: dict | None) -> CleaningOptions:
        """Build from JSON or form data; accepts booleans and "on"/"true"/"1"/"yes"; ignores unknown keys."""
        data = data or {}
        values = {}
        for f in fields(cls):
            if f.name in data:
                value = data[f.name]
                if isinstance(value, str):
                    value = value.strip().lower() in ("1", "true", "on", "yes")
                values[f.name] = bool(value)
        return cls(**values)

    def to_dict(self) -> dict[str, bool]:
        return asdict(self)

    @classmethod
    def all_on(cls) -> CleaningOptions:
        return cls(**{f.name: True for f in fields(cls)})


@dataclass
class IngestResult:
    """What ``ingest`` produced (also stored in ``out_dir/stats.json``)."""

    stats: dict  # documents, sentences, words, characters, bytes; "train"/"valid": the same; "input"
    removed: dict[str, int]  # e.g. {"lines_without_terminal_punctuation": 12, "duplicate_pages": 1}
    preview: list[list[str]] = field(default_factory=list)  # first documents, as sentence lists

    def to_dict(self) -> dict:
        return asdict(self)


# ---------------------------------------------------------------------------------------------
# Reading: bytes -> checked, decoded lines
# ---------------------------------------------------------------------------------------------


def _format_from_name(original_filename: str) -> str:
    name = (original_filename or "").strip().lower()
    if name.endswith(".gz"):
        name = name[:-3]
    for ext in ("txt", "jsonl"):
        if name.endswith("." + ext):
            return ext
    shown = Path(original_filename or "").name or "(no name)"
    raise CorpusError(
        f'"{shown}" is not a supported file type. Upload plain text as {ACCEPTED_FORMATS}: '
        'a .txt file with a blank line between documents, or a .jsonl file with one '
        '{"text": "..."} object per line.'
    )


def _check_start(head: bytes, where: str, error: type[UserError] = CorpusError,
                 formats: str = ".txt or .jsonl") -> None:
    """Reject UTF-16/32 and binary files from their first bytes, before decoding anything."""
    if head.startswith((b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff")):
        raise error(
            "The file is encoded as UTF-32. Re-save it as UTF-8 (in most editors: "
            '"Save as" and choose the UTF-8 encoding) and upload it again.'
        )
    if head.startswith((b"\xff\xfe", b"\xfe\xff")) or _looks_like_utf16(head):
        raise error(
            "The file is encoded as UTF-16 (a common default of Windows editors). Re-save it "
            'as UTF-8 (in most editors: "Save as" and choose the UTF-8 encoding) and upload it again.'
        )
    for magic, what in _KNOWN_BINARIES:
        if re.match(magic, head):
            raise error(
                f"The file is {what}, not plain text. Convert it to UTF-8 text first: a {formats} "
                "file, which may be gzip-compressed (.gz)."
            )
    nul = head.find(b"\x00")
    if nul >= 0:
        raise error(
            f"The file contains a NUL byte at byte offset {nul}{where}, so it is a binary file "
            "(an image, a word-processor document, an archive...), not plain text. "
            f"Upload UTF-8 text as {formats}."
        )


def _looks_like_utf16(head: bytes) -> bool:
    """UTF-16 without a byte-order mark: ASCII text with a NUL in every other byte."""
    sample = head[:4096]
    if len(sample) < 4 or b"\x00" not in sample:
        return False
    even, odd = sample[0::2], sample[1::2]
    for zeros, other in ((odd, even), (even, odd)):  # little-endian, big-endian
        if zeros.count(0) >= 0.9 * len(zeros) and other.count(0) <= 0.1 * len(other):
            return True
    return False


def _count_line_breaks(text: str) -> int:
    return text.count("\n") + text.count("\r") - text.count("\r\n")


class UploadReader:
    """Reads an uploaded text file, streaming: iterating gives ``(line_number, line)``.

    Gunzips when the file starts with the gzip magic bytes, checks for UTF-16 and binary
    data, decodes UTF-8 chunk by chunk while keeping track of byte offsets (for the error
    message), strips a UTF-8 byte-order mark, and treats \\r\\n, \\r and \\n as line ends.
    :meth:`texts` gives the same checked text in pieces instead of lines, for formats where
    a line may be as long as the file (one JSON document). Problems raise ``error`` (by
    default CorpusError); ``formats`` names the accepted file types in its messages, and
    ``long_line_hint`` ends the message about a line too long to hold.
    Shared by corpus ingest and labelled datasets (``trainer.prep.labelled``).
    """

    def __init__(self, path: Path, on_progress: Callable[[float], None], *,
                 error: type[UserError] = CorpusError, formats: str = ".txt or .jsonl",
                 long_line_hint: str = "Put line breaks between documents (and between paragraphs)."):
        self.path = Path(path)
        self.on_progress = on_progress  # called with the fraction (0..1) of the file read
        self.error = error
        self.formats = formats
        self.long_line_hint = long_line_hint
        self.compressed = False
        self.max_decompressed = UPLOAD_MAX_DECOMPRESSED_BYTES
        self.file_bytes = 0
        self.lines = 0

    def __iter__(self) -> Iterator[tuple[int, str]]:
        carry = ""  # the incomplete last line of the previous piece
        line_no = 1
        for text in self.texts():
            lines = (carry + text).replace("\r\n", "\n").replace("\r", "\n").split("\n")
            carry = lines.pop()
            for line in lines:
                yield line_no, line
                line_no += 1
            if len(carry) > _MAX_LINE_CHARS:
                raise self.error(
                    f"Line {line_no} is longer than {_MAX_LINE_CHARS >> 20} million characters. "
                    + self.long_line_hint
                )
            self.lines = line_no - 1
        if carry:
            yield line_no, carry
            self.lines = line_no

    def texts(self) -> Iterator[str]:
        """The decoded text in pieces of up to about a megabyte; a \\r\\n is never split."""
        try:
            raw = open(self.path, "rb")
        except OSError as e:
            raise self.error(f"The uploaded file cannot be read ({e.strerror}).") from e
        with raw:
            self.file_bytes = os.fstat(raw.fileno()).st_size
            if self.file_bytes == 0:
                raise self.error("The file is empty (0 bytes).")
            self.compressed = raw.read(2) == _GZIP_MAGIC
            raw.seek(0)
            stream = gzip.GzipFile(fileobj=raw, mode="rb") if self.compressed else raw
            yield from self._pieces(stream, raw)

    def _read(self, stream) -> bytes:
        try:
            return stream.read(_CHUNK)
        except (OSError, EOFError, zlib.error) as e:
            raise self.error(
                "The file looks gzip-compressed but is damaged or incomplete "
                f"({e}). Compress it again, or upload it uncompressed."
            ) from e

    def _pieces(self, stream, raw) -> Iterator[str]:
        where = " of the decompressed data" if self.compressed else ""
        offset = 0  # byte offset (of the decoded stream) where `pending` starts
        pending = b""  # an incomplete UTF-8 sequence left over from the previous chunk
        held = ""  # a \r at the end of the previous chunk: maybe the first half of a \r\n
        line_no = 1  # the line that `held` (or the next piece) starts on
        chunk = self._read(stream)
        if not chunk:
            raise self.error("The file is empty (it decompresses to 0 bytes).")
        _check_start(chunk, where, self.error, self.formats)
        if chunk.startswith(_UTF8_BOM):
            chunk, offset = chunk[len(_UTF8_BOM) :], len(_UTF8_BOM)
        while True:
            at_eof = not chunk
            nul = chunk.find(b"\x00")
            if nul >= 0:
                raise self.error(
                    f"The file contains a NUL byte at byte offset {offset + len(pending) + nul}"
                    f"{where}, so it is binary data, not plain text. Upload UTF-8 text as "
                    f"{self.formats}."
                )
            data = pending + chunk
            try:
                text, pending = data.decode("utf-8"), b""
            except UnicodeDecodeError as e:
                if not at_eof and e.reason == "unexpected end of data" and len(data) - e.start < 4:
                    text, pending = data[: e.start].decode("utf-8"), data[e.start :]
                else:
                    before = held + data[: e.start].decode("utf-8")  # decodes: first error
                    raise self.error(
                        f"The file is not valid UTF-8: the byte 0x{data[e.start]:02X} at byte "
                        f"offset {offset + e.start}{where} (line {line_no + _count_line_breaks(before)}) "
                        "cannot be decoded. It is probably in another encoding (such as Latin-1 or "
                        "Windows-1252); re-save it as UTF-8 and upload it again."
                    ) from None
            offset += len(data) - len(pending)
            if self.compressed and offset > self.max_decompressed:
                raise self.error(
                    f"The file decompresses to more than {_bytes(self.max_decompressed)}, the most this "
                    "installation unpacks (UPLOAD_MAX_DECOMPRESSED_BYTES). Upload a smaller file, or split it."
                )
            text, held = held + text, ""
            if not at_eof and text.endswith("\r"):
                text, held = text[:-1], "\r"
            line_no += _count_line_breaks(text)
            if text:
                yield text
            self.on_progress(raw.tell() / self.file_bytes)
            if at_eof:
                break
            chunk = self._read(stream)


def _bytes(n: int) -> str:
    return f"{n / 1e9:,.1f} GB" if n >= 100_000_000 else f"{n / 1e6:,.1f} MB"


def _txt_documents(lines: Iterable[tuple[int, str]]) -> Iterator[list[str]]:
    """A blank line (or one holding only whitespace) ends a document; a document longer than
    MAX_DOCUMENT_CHARS is cut there (between lines), so memory stays bounded."""
    doc: list[str] = []
    chars = 0
    for _, line in lines:
        if line.strip():
            doc.append(line)
            chars += len(line)
            if chars > MAX_DOCUMENT_CHARS:
                yield doc
                doc, chars = [], 0
        elif doc:
            yield doc
            doc, chars = [], 0
    if doc:
        yield doc


def _jsonl_documents(lines: Iterable[tuple[int, str]]) -> Iterator[list[str]]:
    """One JSON object with a string "text" field per line; blank lines are skipped."""
    for line_no, line in lines:
        if not line.strip():
            continue
        try:
            obj = jsonio.loads(line, subject=f"Line {line_no} of the JSONL file")
        except jsonio.JsonNestingError as e:
            raise CorpusError(str(e)) from None
        except json.JSONDecodeError as e:
            raise CorpusError(
                f"Line {line_no} of the JSONL file is not valid JSON ({e.msg} at column "
                f'{e.colno}). Each line must hold one object such as {{"text": "..."}}.'
            ) from None
        if not isinstance(obj, dict):
            raise CorpusError(
                f"Line {line_no} of the JSONL file is a JSON {_json_type(obj)}, not an object. "
                'Each line must hold one object such as {"text": "..."}.'
            )
        text = obj.get("text")
        if not isinstance(text, str):
            problem = (
                'has no "text" field'
                if "text" not in obj
                else f'has a "text" field that is a JSON {_json_type(text)}, not a string'
            )
            raise CorpusError(
                f"Line {line_no} of the JSONL file {problem}. Each line must hold one object "
                'with the document in a "text" string, such as {"text": "..."}.'
            )
        yield text.splitlines()


def _json_type(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", list: "list", dict: "object"}.get(type(value), type(value).__name__)


# ---------------------------------------------------------------------------------------------
# Cleaning: one document (a list of lines) -> a list of sentences, or None
# ---------------------------------------------------------------------------------------------


class _Cleaner:
    """Applies the chosen C4 rules to one document at a time and counts what each removed.

    Order: line rules (terminal punctuation, minimum words, "javascript"), then page rules on
    the lines kept ("lorem ipsum"/braces, bad words), sentence splitting, the minimum number
    of sentences, exact de-duplication of documents (always on), then span de-duplication.
    Each line, sentence or page is counted once, under the first rule that removed it.
    """

    def __init__(self, options: CleaningOptions):
        self.o = options
        self.removed = {key: 0 for rule, key in REMOVED_KEYS.items() if getattr(options, rule)}
        self.removed.update({key: 0 for key in ALWAYS_REMOVED_KEYS})
        self._doc_hashes: set[bytes] = set()
        self._span_hashes: set[int] = set()

    def clean(self, lines: list[str]) -> list[str] | None:
        o, removed = self.o, self.removed
        kept = []
        for line in lines:
            line = " ".join(line.split())
            if not line:
                continue
            if o.terminal_punct and (not line.endswith(TERMINAL_MARKS) or line.endswith(ELLIPSES)):
                removed["lines_without_terminal_punctuation"] += 1
            elif o.min_words and count_words(line) < C4_MIN_WORDS_PER_LINE:
                removed[REMOVED_KEYS["min_words"]] += 1
            elif o.no_javascript and "javascript" in line.lower():
                removed["lines_with_javascript"] += 1
            else:
                kept.append(line)
        if not kept:
            removed["pages_left_empty"] += 1
            return None
        text = " ".join(kept)
        lowered = text.lower()
        if o.no_lorem_or_braces and ("lorem ipsum" in lowered or "{" in text or "}" in text):
            removed["pages_with_lorem_ipsum_or_braces"] += 1
            return None
        if o.bad_words and _BAD_WORDS_RE.search(lowered):
            removed["pages_with_bad_words"] += 1
            return None
        sentences = split_sentences(text)
        if not self._enough_sentences(sentences):
            return None
        digest = hashlib.blake2b("\n".join(sentences).encode("utf-8"), digest_size=16).digest()
        if digest in self._doc_hashes:
            removed["duplicate_pages"] += 1
            return None
        self._doc_hashes.add(digest)
        if o.dedup_spans:
            sentences = self._drop_repeated_spans(sentences)
            if not sentences:
                removed["pages_left_empty"] += 1
                return None
            if not self._enough_sentences(sentences):
                return None
        return sentences

    def _enough_sentences(self, sentences: list[str]) -> bool:
        if self.o.min_sentences and len(sentences) < C4_MIN_SENTENCES_PER_PAGE:
            self.removed[REMOVED_KEYS["min_sentences"]] += 1
            return False
        return True

    def _drop_repeated_spans(self, sentences: list[str]) -> list[str]:
        """C4: of any three-sentence span seen more than once, keep only the first occurrence."""
        n = C4_SPAN_SENTENCES
        drop: set[int] = set()
        for i in range(len(sentences) - n + 1):
            h = hash(tuple(sentences[i : i + n]))
            if h in self._span_hashes:
                drop.update(range(i, i + n))
            else:
                self._span_hashes.add(h)
        if not drop:
            return sentences
        self.removed["sentences_in_duplicate_spans"] += len(drop)
        return [s for i, s in enumerate(sentences) if i not in drop]


# ---------------------------------------------------------------------------------------------
# Statistics, progress, preview
# ---------------------------------------------------------------------------------------------

_STAT_KEYS = ("documents", "sentences", "words", "characters", "bytes")


class _DocStats:
    """Per-document counts kept in compact arrays, so that splits can be summed later."""

    def __init__(self):
        self.columns = {k: array.array("q") for k in _STAT_KEYS[1:]}

    def add(self, sentences: list[str]) -> None:
        c = self.columns
        c["sentences"].append(len(sentences))
        c["words"].append(sum(count_words(s) for s in sentences))
        c["characters"].append(sum(len(s) for s in sentences))
        c["bytes"].append(sum(len(s.encode("utf-8")) for s in sentences))

    def __len__(self) -> int:
        return len(self.columns["sentences"])

    def total(self, docs: Iterable[int] | None = None) -> dict[str, int]:
        if docs is None:
            out = {k: sum(col) for k, col in self.columns.items()}
            return {"documents": len(self), **out}
        docs = list(docs)
        out = {k: sum(col[d] for d in docs) for k, col in self.columns.items()}
        return {"documents": len(docs), **out}




def _preview(sentences: list[str]) -> list[str]:
    shown = [s if len(s) <= PREVIEW_CHARS else s[: PREVIEW_CHARS - 1].rstrip() + "…" for s in sentences]
    if len(shown) > PREVIEW_SENTENCES:
        shown = shown[:PREVIEW_SENTENCES] + [f"… ({len(sentences) - PREVIEW_SENTENCES} more sentences)"]
    return shown


def _write_document(fh, sentences: list[str], first: bool) -> None:
    if not first:
        fh.write("\n")
    fh.write("\n".join(sentences))
    fh.write("\n")


def _read_documents(path: Path) -> Iterator[list[str]]:
    """Documents of a file in our output format (sentences, blank line between documents)."""
    with open(path, encoding="utf-8", newline="\n") as fh:
        doc: list[str] = []
        for line in fh:
            line = line.rstrip("\n")
            if line:
                doc.append(line)
            elif doc:
                yield doc
                doc = []
        if doc:
            yield doc


# ---------------------------------------------------------------------------------------------
# ingest
# ---------------------------------------------------------------------------------------------


def ingest(
    raw_path: Path,
    out_dir: Path,
    *,
    original_filename: str,
    options: CleaningOptions,
    valid_fraction: float = 0.05,
    seed: int = 0,
    progress: Callable[[float], None] | None = None,
) -> IngestResult:
    """Check, clean and split an uploaded corpus; write train.txt, valid.txt and stats.json.

    ``original_filename`` (the name the user uploaded) decides the format; ``progress`` is
    called with a percentage from 0 to 100. Raises CorpusError, leaving ``out_dir`` as it was.
    """
    fmt = _format_from_name(original_filename)
    if not 0.0 < valid_fraction <= 0.5:
        raise CorpusError("The validation fraction must be more than 0 and at most 0.5.")
    out_dir = Path(out_dir)
    created = not out_dir.exists()
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".ingest-", dir=out_dir))
    try:
        report = PercentProgress(progress)
        report.report(0)
        reader = UploadReader(Path(raw_path), lambda fraction: report.report(95 * fraction))
        documents = _txt_documents(reader) if fmt == "txt" else _jsonl_documents(reader)
        cleaner = _Cleaner(options)
        doc_stats = _DocStats()
        preview: list[list[str]] = []
        n_input = 0
        with open(tmp / "all.txt", "w", encoding="utf-8", newline="\n") as fh:
            for lines in documents:
                n_input += 1
                sentences = cleaner.clean(lines)
                if sentences is None:
                    continue
                _write_document(fh, sentences, first=not len(doc_stats))
                doc_stats.add(sentences)
                if len(preview) < PREVIEW_DOCUMENTS:
                    preview.append(_preview(sentences))
        _check_big_enough(doc_stats.total(), n_input, fmt, cleaner.removed)

        stats = _split(tmp, doc_stats, valid_fraction, seed, report)
        stats["input"] = {
            "format": fmt,
            "compressed": reader.compressed,
            "file_bytes": reader.file_bytes,
            "lines": reader.lines,
            "documents": n_input,
        }
        result = IngestResult(stats=stats, removed=dict(cleaner.removed), preview=preview)
        meta = {
            **result.to_dict(),
            "original_filename": original_filename,
            "options": options.to_dict(),
            "valid_fraction": valid_fraction,
            "seed": seed,
        }
        (tmp / "stats.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False), encoding="utf-8")
        for name in ("train.txt", "valid.txt", "stats.json"):  # stats.json last: marks completion
            os.replace(tmp / name, out_dir / name)
        report.report(100)
        return result
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if created:
            shutil.rmtree(out_dir, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _check_big_enough(total: dict[str, int], n_input: int, fmt: str, removed: dict[str, int]) -> None:
    if n_input == 0:
        if fmt == "txt":
            raise CorpusError("The file contains no text, only blank lines.")
        raise CorpusError("The JSONL file contains no documents, only blank lines.")
    docs, sents, words = total["documents"], total["sentences"], total["words"]
    lines = sum(v for k, v in removed.items() if k.startswith("lines_"))
    pages = sum(v for k, v in removed.items() if k.startswith("pages_") or k == "duplicate_pages")
    hint = ""
    if lines or pages:
        hint = (
            f" Cleaning removed {lines} line{'s' * (lines != 1)} and {pages} "
            f"document{'s' * (pages != 1)}; switching some cleaning rules off keeps more text."
        )
    if sents < MIN_SENTENCES or words < MIN_WORDS:
        raise CorpusError(
            f"The corpus is too small to train on: after cleaning, {sents} sentence"
            f"{'s' * (sents != 1)} and {words} word{'s' * (words != 1)} remain, but at least "
            f"{MIN_SENTENCES} sentences and {MIN_WORDS} words are needed.{hint}"
        )
    if docs < MIN_DOCUMENTS:
        separator = "a blank line between documents" if fmt == "txt" else "one JSON object per document"
        raise CorpusError(
            f"The corpus has only {docs} document after cleaning, but at least {MIN_DOCUMENTS} are "
            f"needed so that one can be held out for validation. Use {separator}.{hint}"
        )


def _split(tmp: Path, doc_stats: _DocStats, valid_fraction: float, seed: int, report: PercentProgress) -> dict:
    """Copy the documents of tmp/all.txt to tmp/train.txt and tmp/valid.txt; return statistics."""
    n_docs = len(doc_stats)
    n_valid = min(max(1, round(n_docs * valid_fraction)), n_docs - 1)
    valid = set(random.Random(seed).sample(range(n_docs), n_valid))
    with (
        open(tmp / "train.txt", "w", encoding="utf-8", newline="\n") as train_fh,
        open(tmp / "valid.txt", "w", encoding="utf-8", newline="\n") as valid_fh,
    ):
        first = {"train": True, "valid": True}
        for i, sentences in enumerate(_read_documents(tmp / "all.txt")):
            split = "valid" if i in valid else "train"
            _write_document(valid_fh if split == "valid" else train_fh, sentences, first[split])
            first[split] = False
            if i % 1000 == 0:
                report.report(95 + 5 * i / n_docs)
    (tmp / "all.txt").unlink()
    stats = doc_stats.total()
    stats["train"] = doc_stats.total(d for d in range(n_docs) if d not in valid)
    stats["valid"] = doc_stats.total(sorted(valid))
    return stats
