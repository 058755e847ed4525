"""Streaming, checked reading of uploaded text files: bytes in, decoded lines out.

:class:`UploadReader` is the one place where a text file a user supplied turns into lines, so
that every reader (corpus ingest, its sources of every format, labelled datasets) gives the same
sentence for the same problem: UTF-16/32, a binary file, a NUL byte, invalid UTF-8 (with its byte
offset and line), damaged compressed data, a file that decompresses to more than
:data:`UPLOAD_MAX_DECOMPRESSED_BYTES`.

Compression (gzip, zstd, bzip2) is recognised from the first bytes, never from the name, and
undone while reading; memory stays bounded (about a megabyte of text at a time, whatever the
compression ratio). An uncompressed file can also be read in byte ranges, so that a large file is
read by several processes at once (:func:`trainer.prep.sources.plan_pieces` picks the ranges).
"""

from __future__ import annotations

import bz2
import gzip
import os
import re
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import zstandard

from trainer.errors import CorpusError, UserError, bounded

_CHUNK = 1 << 20
_MAX_LINE_CHARS = 64 << 20
# A compressed upload may expand to at most this many bytes (a small .gz can hold
# gigabytes); the environment variable of the same name sets it.
UPLOAD_MAX_DECOMPRESSED_BYTES = int(os.environ.get("UPLOAD_MAX_DECOMPRESSED_BYTES", str(16 * 1024**3)))
# A .txt "document" (lines up to a blank one) is cut into pieces of at most this many characters,
# so a file with no blank lines is not held in memory whole.
MAX_DOCUMENT_CHARS = 4 << 20
_UTF8_BOM = b"\xef\xbb\xbf"

# Compressions we undo, recognised by their first bytes (bzip2: "BZh", the block size, then the
# magic of a first block or of the end of an empty stream, so that text starting "BZh5" is text).
_COMPRESSION_MAGIC = (
    (re.compile(rb"\x1f\x8b"), "gzip"),
    (re.compile(rb"\x28\xb5\x2f\xfd"), "zstd"),
    (re.compile(rb"BZh[1-9](?:1AY&SY|\x17rE8P\x90)"), "bz2"),
)
_COMPRESSION_NAMES = {"gzip": "gzip", "zstd": "zstd", "bz2": "bzip2"}
# Files people upload by mistake, recognised by their first bytes.
_KNOWN_BINARIES = (
    (rb"%PDF-\d", "a PDF document"),
    (rb"PK\x03\x04", "a ZIP archive (or a .docx/.xlsx/.odt document, which are ZIP archives)"),
    (rb"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "an old Microsoft Office document"),
    (rb"\{\\rtf1", "an RTF document"),
    (rb"\x89PNG\r\n", "a PNG image"),
    (rb"\xff\xd8\xff", "a JPEG image"),
    (rb"\xfd7zXZ\x00", "an xz-compressed file"),
    (rb"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
)
_COMPRESSED_HINT = "which may be compressed (.gz, .zst or .bz2)"


def detect_compression(head: bytes) -> str:
    """"gzip", "zstd", "bz2" or "none", from a file's first (at least 10) bytes."""
    for magic, kind in _COMPRESSION_MAGIC:
        if magic.match(head):
            return kind
    return "none"


def _check_start(head: bytes, where: str, error: type[UserError] = CorpusError,
                 formats: str = ".txt or .jsonl", subject: str = "The file") -> None:
    """Reject UTF-16/32 and binary files from their first bytes, before decoding anything.

    ``head`` is the start of the (decompressed) data; ``subject`` opens each sentence ("The file",
    'The file "a.txt"')."""
    if head.startswith((b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff")):
        raise error(
            f"{subject} is encoded as UTF-32. Re-save it as UTF-8 (in most editors: "
            '"Save as" and choose the UTF-8 encoding) and upload it again.'
        )
    if head.startswith((b"\xff\xfe", b"\xfe\xff")) or _looks_like_utf16(head):
        raise error(
            f"{subject} is encoded as UTF-16 (a common default of Windows editors). Re-save it "
            'as UTF-8 (in most editors: "Save as" and choose the UTF-8 encoding) and upload it again.'
        )
    for magic, what in _KNOWN_BINARIES:
        if re.match(magic, head):
            raise error(
                f"{subject} is {what}, not plain text. Convert it to UTF-8 text first: a {formats} "
                f"file, {_COMPRESSED_HINT}."
            )
    inner = detect_compression(head)
    if inner != "none":  # only reachable inside a compressed file: the outer layer was undone
        raise error(
            f"{subject} is compressed twice ({_COMPRESSION_NAMES[inner]}-compressed data inside the "
            "compressed file). Decompress it once and upload the result."
        )
    nul = head.find(b"\x00")
    if nul >= 0:
        raise error(
            f"{subject} contains a NUL byte at byte offset {nul}{where}, so it is a binary file "
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


def _capital(text: str) -> str:
    """``text`` with its first letter upper-case (str.capitalize would lower-case a file name)."""
    return text[:1].upper() + text[1:]


def _bytes(n: int) -> str:
    return f"{n / 1e9:,.1f} GB" if n >= 100_000_000 else f"{n / 1e6:,.1f} MB"


class _Range:
    """A file object's bytes from its position up to ``stop``, then on to the end of that line.

    The planner puts ``stop`` just after a line end, so normally nothing follows; should it not,
    the line that crosses ``stop`` still belongs whole to this range (the next range starts after
    it), so no line is lost or read twice."""

    def __init__(self, raw, stop: int):
        self.raw, self.stop = raw, stop
        self.done = False
        self.last = b"\n"

    def read(self, n: int) -> bytes:
        if self.done:
            return b""
        pos = self.raw.tell()
        if pos < self.stop:
            data = self.raw.read(min(n, self.stop - pos))
            if data:
                self.last = data[-1:]
                return data
        if self.last == b"\n":
            self.done = True
            return b""
        data = self.raw.read(n)
        end = data.find(b"\n")
        if end >= 0 or not data:
            data, self.done = data[: end + 1] if end >= 0 else data, True
        return data


class UploadReader:
    """Reads an uploaded text file, streaming: iterating gives ``(line_number, line)``.

    Decompresses gzip, zstd and bzip2 (recognised by the first bytes), checks for UTF-16 and
    binary data, decodes UTF-8 chunk by chunk while keeping track of byte offsets (for the error
    message), strips a UTF-8 byte-order mark, and treats \\r\\n, \\r and \\n as line ends.
    :meth:`texts` gives the same checked text in pieces instead of lines, for formats where
    a line may be as long as the file (one JSON document). Problems raise ``error`` (by
    default CorpusError); ``formats`` names the accepted file types in its messages, and
    ``long_line_hint`` ends the message about a line too long to hold. ``name``, when given,
    names the file in every message (a corpus has many files).

    ``start``/``stop`` read only the bytes from ``start`` up to the first line end at or after
    ``stop`` (uncompressed files only: compressed data cannot be entered in the middle). Byte
    offsets in messages stay offsets in the file; line numbers count from ``start`` and the
    messages say so ("line 3 after byte offset 1048576"). The file's first bytes are checked
    for every range, so each range of a UTF-16 file gives the same message.
    Shared by corpus ingest and labelled datasets (``trainer.prep.labelled``).
    """

    def __init__(self, path: Path, on_progress: Callable[[float], None], *,
                 error: type[UserError] = CorpusError, formats: str = ".txt or .jsonl",
                 long_line_hint: str = "Put line breaks between documents (and between paragraphs).",
                 name: str | None = None, start: int = 0, stop: int | None = None):
        self.path = Path(path)
        self.on_progress = on_progress  # called with the fraction (0..1) of the file (or range) read
        self.error = error
        self.formats = formats
        self.long_line_hint = long_line_hint
        self.name = name
        self.start = int(start)
        self.stop = None if stop is None or stop < 0 else int(stop)
        self.compression = "none"
        self.compressed = False
        self.max_decompressed = UPLOAD_MAX_DECOMPRESSED_BYTES
        self.file_bytes = 0
        self.consumed = 0  # bytes of the file read so far (compressed bytes for a compressed file)
        self.lines = 0

    # --- the words that name the file and a line in messages
    @property
    def subject(self) -> str:
        return f'The file "{bounded(self.name, 200)}"' if self.name else "The file"

    def line_label(self, line_no: int, *, named: bool = True) -> str:
        """'line 3', 'line 3 of "a.txt"', 'line 3 after byte offset 1048576 of "a.txt"' (``named``:
        with the file's name, for sentences that do not name it already)."""
        label = f"line {line_no}"
        if self.start:
            label += f" after byte offset {self.start}"
        if self.name and named:
            label += f' of "{bounded(self.name, 200)}"'
        return label

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
                    f"{_capital(self.line_label(line_no))} is longer than {_MAX_LINE_CHARS >> 20} million "
                    "characters. " + self.long_line_hint
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
            shown = f'"{bounded(self.name, 200)}"' if self.name else "The uploaded file"
            raise self.error(f"{shown} cannot be read ({e.strerror}).") from e
        with raw:
            self.file_bytes = os.fstat(raw.fileno()).st_size
            if self.file_bytes == 0:
                raise self.error(f"{self.subject} is empty (0 bytes).")
            head = raw.read(_CHUNK if self.start else 16)
            self.compression = detect_compression(head)
            self.compressed = self.compression != "none"
            ranged = self.start > 0 or self.stop is not None
            if ranged and self.compressed:
                raise self.error(f"{self.subject} changed since it was listed (it is compressed now). "
                                 "List the files again.")
            if self.start:
                _check_start(head, "", self.error, self.formats, self.subject)
            raw.seek(self.start)
            if self.compression == "gzip":
                stream = gzip.GzipFile(fileobj=raw, mode="rb")
            elif self.compression == "bz2":
                stream = bz2.BZ2File(raw, "rb")
            elif self.compression == "zstd":
                self._check_zstd_frames(raw)
                stream = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True, closefd=False)
            else:
                stream = raw if self.stop is None else _Range(raw, self.stop)
            yield from self._pieces(stream, raw)

    def _damaged(self, detail: str) -> UserError:
        kind = _COMPRESSION_NAMES[self.compression]
        return self.error(
            f"{self.subject} looks {kind}-compressed but is damaged or incomplete "
            f"({detail}). Compress it again, or upload it uncompressed."
        )

    def _read(self, stream) -> bytes:
        try:
            return stream.read(_CHUNK)
        except (OSError, EOFError, zlib.error, zstandard.ZstdError) as e:
            if not self.compressed:
                raise self.error(f"{self.subject} cannot be read ({e}).") from e
            raise self._damaged(str(e) or type(e).__name__) from e

    def _check_zstd_frames(self, raw) -> None:
        """Walk the zstd frame and block headers (a seek per block, no decompression) and refuse a
        file that ends inside a frame: zstandard's stream reader silently stops there, so an
        interrupted download would otherwise read as a shorter corpus."""
        size, pos = self.file_bytes, 0
        try:
            while pos < size:
                raw.seek(pos)
                magic = raw.read(4)
                if len(magic) < 4:
                    raise self._damaged(f"it ends inside a frame header at byte offset {pos}")
                if magic[1:] == b"\x2a\x4d\x18" and 0x50 <= magic[0] <= 0x5F:  # a skippable frame
                    length = raw.read(4)
                    if len(length) < 4:
                        raise self._damaged(f"it ends inside a frame header at byte offset {pos}")
                    pos += 8 + struct.unpack("<I", length)[0]
                    continue
                if magic != b"\x28\xb5\x2f\xfd":
                    raise self._damaged(f"no zstd frame starts at byte offset {pos}")
                descriptor = raw.read(1)
                if not descriptor:
                    raise self._damaged(f"it ends inside a frame header at byte offset {pos}")
                d = descriptor[0]
                single_segment = (d >> 5) & 1
                header = (0 if single_segment else 1) + (0, 1, 2, 4)[d & 3] \
                    + ((1 if single_segment else 0), 2, 4, 8)[d >> 6]
                pos += 5 + header
                while True:
                    raw.seek(pos)
                    block = raw.read(3)
                    if len(block) < 3:
                        raise self._damaged(f"it ends in the middle of a frame, at byte offset {size}")
                    value = int.from_bytes(block, "little")
                    kind, length = (value >> 1) & 3, value >> 3
                    if kind == 3:
                        raise self._damaged(f"a block of a reserved type at byte offset {pos}")
                    pos += 3 + (1 if kind == 1 else length)
                    if value & 1:
                        break
                pos += 4 if d & 4 else 0  # the content checksum
            if pos > size:
                raise self._damaged(f"it ends in the middle of a frame, at byte offset {size}")
        finally:
            raw.seek(0)

    def _pieces(self, stream, raw) -> Iterator[str]:
        where = " of the decompressed data" if self.compressed else ""
        offset = self.start  # byte offset (of the decoded stream) where `pending` starts
        pending = b""  # an incomplete UTF-8 sequence left over from the previous chunk
        held = ""  # a \r at the end of the previous chunk: maybe the first half of a \r\n
        line_no = 1  # the line that `held` (or the next piece) starts on
        total = (self.stop if self.stop is not None else self.file_bytes) - self.start
        chunk = self._read(stream)
        if not chunk:
            if self.start or self.stop is not None:
                return  # an empty range
            raise self.error(f"{self.subject} is empty (it decompresses to 0 bytes).")
        if self.start == 0:
            _check_start(chunk, where, self.error, self.formats, self.subject)
            if chunk.startswith(_UTF8_BOM):
                chunk, offset = chunk[len(_UTF8_BOM) :], len(_UTF8_BOM)
        while True:
            at_eof = not chunk
            nul = chunk.find(b"\x00")
            if nul >= 0:
                raise self.error(
                    f"{self.subject} contains a NUL byte at byte offset {offset + len(pending) + nul}"
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
                        f"{self.subject} is not valid UTF-8: the byte 0x{data[e.start]:02X} at byte "
                        f"offset {offset + e.start}{where} "
                        f"({self.line_label(line_no + _count_line_breaks(before), named=False)}) "
                        "cannot be decoded. It is probably in another encoding (such as Latin-1 or "
                        "Windows-1252); re-save it as UTF-8 and upload it again."
                    ) from None
            offset += len(data) - len(pending)
            if self.compressed and offset > self.max_decompressed:
                raise self.error(
                    f"{self.subject} decompresses to more than {_bytes(self.max_decompressed)}, the most this "
                    "installation unpacks (UPLOAD_MAX_DECOMPRESSED_BYTES). Upload a smaller file, or split it."
                )
            text, held = held + text, ""
            if not at_eof and text.endswith("\r"):
                text, held = text[:-1], "\r"
            line_no += _count_line_breaks(text)
            if text:
                yield text
            self.consumed = raw.tell() - self.start
            self.on_progress(min(1.0, self.consumed / total) if total > 0 else 1.0)
            if at_eof:
                break
            chunk = self._read(stream)


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
