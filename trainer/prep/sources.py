"""The files of a corpus: find them, cut them into pieces, read each piece's documents.

A corpus is one uploaded file, several, an archive of shards, or a folder or glob on the server
(C4's ``c4-train.*.json.gz``, FineWeb's parquet shards, a Hugging Face ``save_to_disk`` folder).
This module turns such a description into an ordered list of :class:`SourceFile` (:func:`discover`,
:func:`resolve_import` for server paths, :func:`unpack_archive` for uploaded archives), cuts the
list into :class:`Piece` objects that worker processes read independently (:func:`plan_pieces`),
and reads a piece's documents (:func:`read_piece`), each a list of lines as the cleaning rules
expect.

Formats: plain text (documents separated by a blank line), JSON lines (``.jsonl``, and ``.json``
as C4 ships it: one object per line), Parquet and Arrow (a column holds the text). Text files may
be gzip, zstd or bzip2 compressed, recognised from their first bytes. Everything streams: a piece
is read a megabyte or a record batch at a time, so memory does not grow with the files.

Every problem a user can fix is a :class:`~trainer.errors.CorpusError` whose sentence names the
file (as the page shows it) and, where it helps, the line or record.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from trainer import jsonio
from trainer.errors import CorpusError, bounded
from trainer.prep import reading
from trainer.prep.reading import UPLOAD_MAX_DECOMPRESSED_BYTES, UploadReader, _bytes, _txt_documents

__all__ = [
    "ACCEPTED_DESCRIPTION",
    "COMPRESSIONS",
    "FORMATS",
    "UPLOAD_MAX_DECOMPRESSED_BYTES",
    "UPLOAD_SUFFIXES",
    "Piece",
    "SourceFile",
    "describe",
    "detect_compression",
    "discover",
    "is_archive",
    "plan_pieces",
    "read_piece",
    "resolve_import",
    "unpack_archive",
]

FORMATS = ("txt", "jsonl", "parquet", "arrow")
COMPRESSIONS = ("none", "gzip", "zstd", "bz2")

# File name endings -> format; compression endings (a hint only: the first bytes decide).
_FORMAT_SUFFIXES = ((".txt", "txt"), (".jsonl", "jsonl"), (".json", "jsonl"), (".parquet", "parquet"),
                    (".arrow", "arrow"))
_TEXT_FORMATS = ("txt", "jsonl")
_COMPRESSION_SUFFIXES = (".gz", ".zst", ".zstd", ".bz2")
_ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".zip", ".tar")
UPLOAD_SUFFIXES: tuple[str, ...] = tuple(sorted(
    {suffix + c for suffix, fmt in _FORMAT_SUFFIXES if fmt in _TEXT_FORMATS for c in ("", *_COMPRESSION_SUFFIXES)}
    | {suffix for suffix, fmt in _FORMAT_SUFFIXES if fmt not in _TEXT_FORMATS}
    | set(_ARCHIVE_SUFFIXES),
    key=lambda s: (-len(s), s),
))
ACCEPTED_DESCRIPTION = (
    "A corpus is made of text files (.txt, a blank line between documents), JSON lines (.jsonl or .json, "
    'one {"text": "..."} object per line), Parquet (.parquet) or Arrow (.arrow) files, the text ones '
    "optionally compressed (.gz, .zst or .bz2), and an upload may also be a .zip or .tar archive of them."
)

_MARKERS = ("_SUCCESS",)  # Spark/Hadoop job markers, next to their output shards
_SAVE_TO_DISK_METADATA = ("state.json", "dataset_info.json")
_WINDOW = 64 << 10  # bytes read at a time while looking for a place to cut a text file
_BLANK = re.compile(rb"\n[ \t\r\f\v]*\n")  # a line end, then a whitespace-only line
_BLANK_REST = re.compile(rb"[ \t\r\f\v]*\n")
_OPEN_BLANK = re.compile(rb"\n[ \t\r\f\v]*\Z")
_ALL_BLANK = re.compile(rb"[ \t\r\f\v]*")
_BATCH_BYTES = 8 << 20  # about this much text per parquet record batch
_MAX_MEMBERS = 100_000  # members of one archive
_GLOB_CHARS = re.compile(r"[*?[]")


def _shown(name: str) -> str:
    return f'"{bounded(name, 200)}"'


# ---------------------------------------------------------------------------------------------
# The files
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceFile:
    """One file of a corpus. ``path`` is its absolute real path (symlinks resolved: what was
    checked is what is read); ``name`` is what the page shows."""

    path: str
    name: str
    format: str  # one of FORMATS
    compression: str  # one of COMPRESSIONS ("none" for parquet/arrow, which compress inside)
    bytes: int  # size on disk

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> SourceFile:
        return cls(path=str(d["path"]), name=str(d["name"]), format=str(d["format"]),
                   compression=str(d.get("compression", "none")), bytes=int(d["bytes"]))


def format_of(filename: str) -> str | None:
    """The format a file name says (one of FORMATS), or None for a type we do not read. A text
    format may carry a compression ending (.jsonl.zst); parquet and arrow may not."""
    name = filename.strip().lower()
    compressed = False
    for suffix in _COMPRESSION_SUFFIXES:
        if name.endswith(suffix):
            name, compressed = name[: -len(suffix)], True
            break
    for suffix, fmt in _FORMAT_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return None if compressed and fmt not in _TEXT_FORMATS else fmt
    return None


def detect_compression(path: str | os.PathLike) -> str:
    """The compression of a file, from its first bytes ("none" when it is not compressed)."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError as e:
        raise CorpusError(f"{_shown(Path(path).name)} cannot be read ({e.strerror}).") from None
    return reading.detect_compression(head)


def _skipped(name: str) -> bool:
    """Files a folder or glob holds that are not data: hidden files and job markers."""
    return name.startswith(".") or name in _MARKERS or name.lower().endswith(".crc")


def _refuse_type(name: str) -> CorpusError:
    return CorpusError(f"{_shown(name)} is not a type of file the corpus reader reads. {ACCEPTED_DESCRIPTION}")


# A check run on every folder and file found (resolve_import's: inside the allowed roots).
Check = Callable[[str, str], None]  # (real path, shown name)


def discover(specs: Sequence[str | Path], *, base: Path | None = None) -> list[SourceFile]:
    """Each spec is a file, a folder (walked recursively) or a glob pattern (*, ?, **); relative specs are
    taken from `base`. Order: the order of the specs; inside a folder or glob, sorted by relative path
    (so shard-00002 before shard-00010 when zero-padded, as shards are). A HF `save_to_disk` folder (a
    `state.json` listing `_data_files`, `*.arrow` files) gives its arrow files in state.json's order,
    and its json metadata files are not corpus files. Hidden files (.DS_Store, .gitattributes) and
    `_SUCCESS`/`.crc` markers are skipped; any other file with an extension we do not read is REFUSED
    (CorpusError naming it and what is accepted), never silently skipped. Nothing found, a missing
    path, an empty file: CorpusError with a sentence. The same file twice (e.g. two globs) appears once."""
    return _Finder(base).run(specs)


class _Finder:
    """One discover() call: the files found so far (by real path, to drop repeats) and the check."""

    def __init__(self, base: Path | None, check: Check | None = None, *, check_root: Check | None = None,
                 keep: Callable[[str], bool] | None = None):
        self.base = Path(base) if base is not None else Path.cwd()
        self.check = check  # on every folder entered and file found
        self.check_root = check_root  # on a glob's fixed part
        self.keep = keep  # which of a glob's matches are part of the corpus
        self.found: list[SourceFile] = []
        self.seen: set[str] = set()
        self.walked: set[str] = set()  # real paths of folders entered (a symlink loop stops here)

    def run(self, specs: Sequence[str | Path]) -> list[SourceFile]:
        if isinstance(specs, (str, os.PathLike)):
            specs = [specs]
        for spec in specs:
            self.spec(spec)
        if not self.found:
            shown = ", ".join(_shown(os.fspath(s)) for s in list(specs)[:3]) or "the corpus"
            raise CorpusError(f"No corpus files were found in {shown}. {ACCEPTED_DESCRIPTION}")
        return self.found

    def spec(self, spec: str | Path) -> None:
        text = os.fspath(spec)
        if not text.strip():
            raise CorpusError("A corpus path is empty: name a file, a folder or a glob pattern.")
        if "\x00" in text:
            raise CorpusError("A corpus path contains a NUL character.")
        path = Path(text)
        if not path.is_absolute():
            path = self.base / path
        if _GLOB_CHARS.search(text) and not os.path.lexists(path):
            return self.glob(text)
        if path.is_dir():
            return self.folder(path, path)
        if path.is_file():
            return self.file(path, path.name)
        if os.path.lexists(path):
            raise CorpusError(f"{_shown(text)} is neither a file nor a folder.")
        raise CorpusError(f"{_shown(text)} does not exist.")

    def glob(self, text: str) -> None:
        root, pattern = _glob_parts(text, self.base)
        if self.check_root is not None:
            self.check_root(os.path.realpath(root), text)
        matches = glob.glob(pattern, recursive=True)  # hidden names match only a pattern that starts with "."
        matches = [m for m in matches if self.keep is None or self.keep(m)]
        if not matches:
            raise CorpusError(f"Nothing matches {_shown(text)}.")
        for match in sorted(matches, key=lambda m: Path(m).relative_to(root).parts):
            found = Path(match)
            if found.is_dir():
                self.folder(found, root)
            elif not _skipped(found.name) and not _save_to_disk_metadata(found):
                self.file(found, found.relative_to(root).as_posix())

    def folder(self, folder: Path, root: Path) -> None:
        real = os.path.realpath(folder)
        if self.check is not None:
            self.check(real, _relative(folder, root) or folder.name)
        if real in self.walked:
            return
        self.walked.add(real)
        listed = _save_to_disk_files(folder)
        if listed is not None:
            for name in listed:
                self.file(folder / name, _relative(folder / name, root))
            return
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as e:
            raise CorpusError(f"The folder {_shown(_relative(folder, root) or folder.name)} cannot be read "
                              f"({e.strerror}).") from None
        for entry in entries:
            if entry.name.startswith("."):
                continue
            path = Path(entry.path)
            if entry.is_dir():
                self.folder(path, root)
            elif not _skipped(entry.name) and not (entry.name == "dataset_dict.json" and _is_dataset_dict(path)):
                self.file(path, _relative(path, root))

    def file(self, path: Path, shown: str) -> None:
        real = os.path.realpath(path)
        if self.check is not None:
            self.check(real, shown)
        fmt = format_of(path.name)
        if fmt is None:
            raise _refuse_type(shown)
        try:
            st = os.stat(real)
        except OSError as e:
            raise CorpusError(f"{_shown(shown)} cannot be read ({e.strerror}).") from None
        if not stat.S_ISREG(st.st_mode):
            raise CorpusError(f"{_shown(shown)} is not a regular file.")
        if st.st_size == 0:
            raise CorpusError(f"{_shown(shown)} is empty (0 bytes). Remove it, or leave it out of the corpus.")
        if real in self.seen:
            return
        self.seen.add(real)
        compression = detect_compression(real) if fmt in _TEXT_FORMATS else "none"
        self.found.append(SourceFile(path=real, name=shown, format=fmt, compression=compression,
                                     bytes=st.st_size))


def _glob_parts(text: str, base: Path) -> tuple[Path, str]:
    """A glob spec's fixed part (the folders before the first wildcard, from ``base`` when relative)
    and the pattern to match, the fixed part escaped (a folder may be named "data[1]")."""
    parts = Path(text).parts
    first = next(i for i, part in enumerate(parts) if _GLOB_CHARS.search(part))
    root = Path(*parts[:first]) if first else Path()
    if not root.is_absolute():
        root = base / root
    return root, os.path.join(glob.escape(str(root)), *parts[first:])


def _save_to_disk_metadata(path: Path) -> bool:
    return path.name in _SAVE_TO_DISK_METADATA and (path.parent / "state.json").is_file() \
        and _save_to_disk_files(path.parent) is not None


def _relative(path: Path, root: Path) -> str:
    try:
        rel = path.relative_to(root).as_posix()
    except ValueError:
        return path.name
    return "" if rel == "." else rel


def _save_to_disk_files(folder: Path) -> list[str] | None:
    """The data files of a Hugging Face ``save_to_disk`` folder in state.json's order, or None when
    the folder is not one. Each listed name must be a plain file name inside the folder."""
    state = folder / "state.json"
    if not state.is_file():
        return None
    try:
        data = jsonio.loads(state.read_text(encoding="utf-8"), subject="state.json")
    except (OSError, ValueError):
        return None
    files = data.get("_data_files") if isinstance(data, dict) else None
    if not isinstance(files, list) or not files:
        return None
    names = []
    for entry in files:
        name = entry.get("filename") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name or "/" in name or "\\" in name or name in (".", ".."):
            raise CorpusError(f"The state.json of the dataset folder {_shown(folder.name)} lists a data file "
                              f"that is not a plain file name in that folder ({_shown(str(name))}).")
        if not (folder / name).is_file():
            raise CorpusError(f"The dataset folder {_shown(folder.name)} lacks {_shown(name)}, which its "
                              "state.json lists.")
        names.append(name)
    return names


def _is_dataset_dict(path: Path) -> bool:
    """A DatasetDict's dataset_dict.json (its splits are save_to_disk folders next to it)."""
    try:
        data = jsonio.loads(path.read_text(encoding="utf-8"), subject=path.name)
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and isinstance(data.get("splits"), list)


def describe(sources: Sequence[SourceFile]) -> dict:
    """{"files": n, "bytes": total, "formats": {"parquet": 3, "jsonl": 2}, "compressions": {...}}"""
    formats: dict[str, int] = {}
    compressions: dict[str, int] = {}
    for s in sources:
        formats[s.format] = formats.get(s.format, 0) + 1
        compressions[s.compression] = compressions.get(s.compression, 0) + 1
    order = {k: i for i, k in enumerate(FORMATS + COMPRESSIONS)}
    return {"files": len(sources), "bytes": sum(s.bytes for s in sources),
            "formats": dict(sorted(formats.items(), key=lambda kv: order.get(kv[0], 99))),
            "compressions": dict(sorted(compressions.items(), key=lambda kv: order.get(kv[0], 99)))}


# ---------------------------------------------------------------------------------------------
# Pieces
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Piece:
    """A part of one file that a worker reads on its own. Uncompressed txt/jsonl: the byte range
    [start, stop) (start aligned: the start of a line for jsonl, the line after a blank line for
    txt); parquet: the row groups [start, stop); arrow: the record batches [start, stop);
    a compressed text file is one piece, (0, -1)."""

    source: SourceFile
    index: int  # the piece's place in the whole corpus (0, 1, 2, ... in reading order)
    start: int
    stop: int

    def to_dict(self) -> dict:
        return {"source": self.source.to_dict(), "index": self.index, "start": self.start, "stop": self.stop}

    @classmethod
    def from_dict(cls, d: dict) -> Piece:
        return cls(source=SourceFile.from_dict(d["source"]), index=int(d["index"]), start=int(d["start"]),
                   stop=int(d["stop"]))


def plan_pieces(sources: Sequence[SourceFile], *, piece_bytes: int = 64 << 20) -> list[Piece]:
    """Cut the corpus into pieces of about piece_bytes (on disk) that can be read independently, in
    order; the concatenation of read_piece over the pieces is exactly the documents of reading each
    file whole. Deterministic: the same files give the same pieces.

    A text file is cut where a new document surely starts, found by reading a small window at each
    multiple of piece_bytes and onwards: just after a line end (jsonl), just after a whitespace-only
    line (txt; a file without one is a single piece). Parquet files are cut between row groups,
    arrow files between record batches (an arrow stream has no index, so it is read once here,
    without its data: its batches are memory-mapped)."""
    piece_bytes = max(1, int(piece_bytes))
    pieces: list[Piece] = []
    for source in sources:
        if source.format in _TEXT_FORMATS:
            ranges = _text_ranges(source, piece_bytes)
        elif source.format == "parquet":
            ranges = _parquet_ranges(source, piece_bytes)
        elif source.format == "arrow":
            ranges = _arrow_ranges(source, piece_bytes)
        else:
            raise CorpusError(f"{_shown(source.name)} has the format {source.format!r}, which the corpus "
                              "reader does not know.")
        for start, stop in ranges:
            pieces.append(Piece(source=source, index=len(pieces), start=start, stop=stop))
    return pieces


def _text_ranges(source: SourceFile, piece_bytes: int) -> list[tuple[int, int]]:
    try:
        with open(source.path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if reading.detect_compression(f.read(16)) != "none":
                return [(0, -1)]  # compressed data cannot be entered in the middle
            find = _next_line_start if source.format == "jsonl" else _next_document_start
            cuts = [0]
            while cuts[-1] + piece_bytes < size:
                cut = find(f, cuts[-1] + piece_bytes)
                if cut is None or cut >= size:
                    break
                cuts.append(cut)
    except OSError as e:
        raise CorpusError(f"{_shown(source.name)} cannot be read ({e.strerror}).") from None
    return list(zip(cuts, cuts[1:] + [size]))


def _next_line_start(f, pos: int) -> int | None:
    """The offset just after the first \\n at or after ``pos``."""
    f.seek(pos)
    at = pos
    while buf := f.read(_WINDOW):
        end = buf.find(b"\n")
        if end >= 0:
            return at + end + 1
        at += len(buf)
    return None


def _next_document_start(f, pos: int) -> int | None:
    """The offset just after the first whitespace-only line that starts after ``pos`` (the line end
    before it at or after ``pos``): there a .txt document surely begins. Reads window by window,
    remembering only whether the window ended inside a possible blank line."""
    f.seek(pos)
    at, open_blank = pos, False
    while buf := f.read(_WINDOW):
        if open_blank:
            m = _BLANK_REST.match(buf)
            if m:
                return at + m.end()
            open_blank = _ALL_BLANK.fullmatch(buf) is not None
        m = _BLANK.search(buf)
        if m:
            return at + m.end()
        open_blank = open_blank or _OPEN_BLANK.search(buf) is not None
        at += len(buf)
    return None


def _parquet_file(source: SourceFile):
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(source.path)
    except (pa.ArrowException, OSError) as e:
        raise CorpusError(f"{_shown(source.name)} is not a readable Parquet file "
                          f"({bounded(str(e), 200)}).") from None


def _parquet_ranges(source: SourceFile, piece_bytes: int) -> list[tuple[int, int]]:
    """Consecutive row groups of about piece_bytes compressed on disk (from the file's metadata)."""
    meta = _parquet_file(source).metadata
    ranges, start, size = [], 0, 0
    for i in range(meta.num_row_groups):
        group = meta.row_group(i)
        size += sum(group.column(j).total_compressed_size for j in range(group.num_columns))
        if size >= piece_bytes:
            ranges.append((start, i + 1))
            start, size = i + 1, 0
    if start < meta.num_row_groups or not ranges:
        ranges.append((start, meta.num_row_groups))
    return ranges


class _ArrowBatches:
    """The record batches of an Arrow IPC file, memory-mapped: the stream format (what
    ``datasets.save_to_disk`` writes) or the file format (which has an index)."""

    def __init__(self, source: SourceFile):
        import pyarrow as pa

        self.source = source
        self.map = None
        try:
            self.map = pa.memory_map(source.path)
            if self.map.read(6) == b"ARROW1":
                self.map.seek(0)
                self.reader = pa.ipc.open_file(self.map)
                self.stream = False
            else:
                self.map.seek(0)
                self.reader = pa.ipc.open_stream(self.map)
                self.stream = True
        except (pa.ArrowException, OSError) as e:
            if getattr(self, "map", None) is not None:
                self.map.close()
            raise CorpusError(f"{_shown(source.name)} is not a readable Arrow file "
                              f"({bounded(str(e), 200)}).") from None
        self.schema = self.reader.schema

    def __iter__(self) -> Iterator:
        import pyarrow as pa

        try:
            if self.stream:
                yield from self.reader
            else:
                for i in range(self.reader.num_record_batches):
                    yield self.reader.get_batch(i)
        except (pa.ArrowException, OSError) as e:
            raise CorpusError(f"{_shown(self.source.name)} is damaged: a record batch cannot be read "
                              f"({bounded(str(e), 200)}).") from None

    def close(self) -> None:
        self.map.close()


def _arrow_ranges(source: SourceFile, piece_bytes: int) -> list[tuple[int, int]]:
    """Consecutive record batches of about piece_bytes (their buffers' size)."""
    batches = _ArrowBatches(source)
    try:
        ranges, start, size, n = [], 0, 0, 0
        for n, batch in enumerate(batches, 1):
            size += batch.nbytes
            if size >= piece_bytes:
                ranges.append((start, n))
                start, size = n, 0
        if start < n or not ranges:
            ranges.append((start, n))
        return ranges
    finally:
        batches.close()


# ---------------------------------------------------------------------------------------------
# Reading a piece
# ---------------------------------------------------------------------------------------------


def read_piece(piece: Piece, *, text_field: str = "text",
               on_bytes: Callable[[int], None] | None = None) -> Iterator[list[str]]:
    """The piece's documents, each a list of lines:
       txt: lines up to a blank (whitespace-only) line; a document longer than MAX_DOCUMENT_CHARS is cut
            between lines (as trainer.prep.corpus._txt_documents does today);
       jsonl / parquet / arrow: the string in `text_field` of each record, .splitlines().
    Streams: never holds a whole file (record batches of parquet/arrow, ~1 MB chunks of text).
    Text files get every check trainer.prep.corpus.UploadReader makes today (UTF-16/32, binary data, NUL
    bytes, BOM stripped, damaged compressed data, UPLOAD_MAX_DECOMPRESSED_BYTES), for gzip, zstd and bz2.
    Errors are CorpusError sentences naming source.name and the line (or record) number; for a piece that
    starts inside a file, "line N after byte offset X" is fine. A record without the field: the sentence
    names the field and the fields/columns the file has (and that the text field can be chosen).
    Null text values are skipped (counted nowhere). on_bytes(n) is called with the bytes of the file
    consumed so far within this piece (compressed bytes for compressed files), for progress."""
    source = piece.source
    report = on_bytes or (lambda n: None)
    if source.format in _TEXT_FORMATS:
        stop = piece.stop if piece.stop >= 0 else None
        hint = ("Put line breaks between documents (and between paragraphs)." if source.format == "txt"
                else "Each line must hold one JSON object: one document.")
        reader = UploadReader(Path(source.path), lambda fraction: report(reader.consumed), name=source.name,
                              start=piece.start, stop=stop, long_line_hint=hint)
        if source.format == "txt":
            return _txt_documents(reader)
        return _jsonl_documents(reader, text_field)
    if source.format == "parquet":
        return _parquet_documents(piece, text_field, report)
    if source.format == "arrow":
        return _arrow_documents(piece, text_field, report)
    raise CorpusError(f"{_shown(source.name)} has the format {source.format!r}, which the corpus reader "
                      "does not know.")


def _example(field: str) -> str:
    return "{" + json.dumps(field) + ': "..."}'


def _jsonl_documents(reader: UploadReader, field: str) -> Iterator[list[str]]:
    """One JSON object per line with the document in the string ``field``; blank lines and null
    values are skipped."""
    key = json.dumps(field)
    for line_no, line in reader:
        if not line.strip():
            continue
        try:
            obj = jsonio.loads(line)
        except jsonio.JsonNestingError:
            raise CorpusError(jsonio.nesting_message(reading._capital(reader.line_label(line_no)))) from None
        except json.JSONDecodeError as e:
            raise CorpusError(
                f"{reading._capital(reader.line_label(line_no))} is not valid JSON ({e.msg} at column {e.colno}). "
                f"Each line must hold one object such as {_example(field)}."
            ) from None
        if not isinstance(obj, dict):
            raise CorpusError(
                f"{reading._capital(reader.line_label(line_no))} is a JSON {jsonio.json_type(obj)}, not an object. "
                f"Each line must hold one object such as {_example(field)}."
            )
        text = obj.get(field)
        if isinstance(text, str):
            yield text.splitlines()
        elif text is None and field in obj:
            continue  # a null text: nothing to read
        elif text is None:
            raise CorpusError(
                f"{reading._capital(reader.line_label(line_no))} has no {key} field; its fields are "
                f"{_names(obj.keys())}. Each line must hold the document in a {key} string, or choose the "
                "field that holds the text (the text field option)."
            )
        else:
            raise CorpusError(
                f"{reading._capital(reader.line_label(line_no))} has a {key} field that is a JSON "
                f"{jsonio.json_type(text)}, not a string. Each line must hold the document in a {key} string, "
                f"such as {_example(field)}."
            )


def _names(names: Iterable[str], limit: int = 12) -> str:
    names = [str(n) for n in names]
    if not names:
        return "none"
    shown = ", ".join(json.dumps(n, ensure_ascii=False) for n in names[:limit])
    more = len(names) - limit
    return bounded(shown + (f" and {more} more" if more > 0 else ""), 300)


def _text_column(schema, field: str, source: SourceFile, what: str) -> None:
    """Refuse a file whose ``field`` column is missing or does not hold strings."""
    import pyarrow as pa

    if field not in schema.names:
        raise CorpusError(
            f"{_shown(source.name)} has no {json.dumps(field)} column; its columns are {_names(schema.names)}. "
            f"Choose the column that holds the documents as the text field."
        )
    kind = schema.field(field).type
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)):
        raise CorpusError(
            f"The {json.dumps(field)} column of {_shown(source.name)} holds {kind} values, not text. "
            f"Choose the column of the {what} file that holds the documents as the text field."
        )


def _documents(column) -> Iterator[list[str]]:
    for text in column.to_pylist():
        if text is not None:
            yield text.splitlines()


def _parquet_documents(piece: Piece, field: str, report: Callable[[int], None]) -> Iterator[list[str]]:
    """The row groups [start, stop), only the text column, a record batch of about _BATCH_BYTES at a time."""
    import pyarrow as pa

    source = piece.source
    pf = _parquet_file(source)
    _text_column(pf.schema_arrow, field, source, "Parquet")
    meta = pf.metadata
    groups = list(range(piece.start, min(piece.stop, meta.num_row_groups)))
    if not groups:
        return
    rows = sum(meta.row_group(i).num_rows for i in groups)
    disk = sum(meta.row_group(i).column(j).total_compressed_size
               for i in groups for j in range(meta.row_group(i).num_columns))
    row_bytes = max(1, sum(meta.row_group(i).total_byte_size for i in groups) // max(1, rows))
    batch_size = min(65536, max(16, _BATCH_BYTES // row_bytes))
    done = 0
    try:
        for batch in pf.iter_batches(batch_size=batch_size, row_groups=groups, columns=[field]):
            yield from _documents(batch.column(0))
            done += batch.num_rows
            report(disk * done // max(1, rows))
    except (pa.ArrowException, OSError) as e:
        raise CorpusError(f"{_shown(source.name)} is damaged: its rows cannot be read "
                          f"({bounded(str(e), 200)}).") from None


def _arrow_documents(piece: Piece, field: str, report: Callable[[int], None]) -> Iterator[list[str]]:
    """The record batches [start, stop); the batches before ``start`` are memory-mapped, not read."""
    batches = _ArrowBatches(piece.source)
    try:
        _text_column(batches.schema, field, piece.source, "Arrow")
        index = batches.schema.get_field_index(field)
        consumed = 0
        for i, batch in enumerate(batches):
            if i >= piece.stop:
                break
            if i >= piece.start:
                yield from _documents(batch.column(index))
                consumed += batch.nbytes
                report(consumed)
    finally:
        batches.close()


# ---------------------------------------------------------------------------------------------
# Server-side import
# ---------------------------------------------------------------------------------------------


def _inside(real: str, folder: str) -> bool:
    return real == folder or real.startswith(folder.rstrip(os.sep) + os.sep)


def resolve_import(spec: str, roots: Sequence[Path], *, forbidden: Sequence[Path] = ()) -> list[SourceFile]:
    """A folder, file or glob on the server. Refused (CorpusError, one sentence each): no roots configured
    (name the setting CORPUS_IMPORT_ROOTS), a spec with a `..` component, a relative spec (must be
    absolute), a path whose real path (symlinks resolved) is not inside one of the roots' real paths,
    any path inside `forbidden` (the app passes its own STORAGE_ROOT: other users' uploads are never
    reachable even if a root contains it), and every file a folder walk or glob finds is checked the same
    way (a symlink inside the folder pointing out of the roots is refused, naming it). Returns
    discover()'s list.

    A glob's fixed part (the folders before the first wildcard) must be inside a root or hold one, so
    that a pattern cannot list folders elsewhere; what it matches is then checked file by file."""
    if not roots:
        raise CorpusError("Importing corpus files from the server is switched off: an administrator has to "
                          "list the folders it may read in the CORPUS_IMPORT_ROOTS setting.")
    spec = os.fspath(spec or "").strip()
    if not spec:
        raise CorpusError("Name a file, a folder or a glob pattern on the server to import.")
    if "\x00" in spec:
        raise CorpusError("The path to import contains a NUL character.")
    if ".." in re.split(r"[/\\]", spec):
        raise CorpusError(f"The path {_shown(spec)} contains a \"..\" component; give the full path without it.")
    if not os.path.isabs(spec):
        raise CorpusError(f"The path {_shown(spec)} is relative; give the full path, starting with \"/\".")
    real_roots = [os.path.realpath(r) for r in roots]
    real_forbidden = [os.path.realpath(f) for f in forbidden]

    def check(real: str, shown: str) -> None:
        if any(_inside(real, f) for f in real_forbidden):
            raise CorpusError(f"{_shown(shown)} is inside this application's own storage, which cannot be "
                              "imported.")
        if not any(_inside(real, r) for r in real_roots):
            raise CorpusError(f"{_shown(shown)} is outside the folders this server allows importing from "
                              "(CORPUS_IMPORT_ROOTS); a link that leads out of them is refused too.")

    if _GLOB_CHARS.search(spec) and not os.path.lexists(spec):
        def check_root(real: str, shown: str) -> None:
            if any(_inside(real, f) for f in real_forbidden):
                raise CorpusError(f"{_shown(shown)} is inside this application's own storage, which cannot be "
                                  "imported.")
            if not any(_inside(real, r) or _inside(r, real) for r in real_roots):
                raise CorpusError(f"{_shown(shown)} is outside the folders this server allows importing from "
                                  "(CORPUS_IMPORT_ROOTS).")

        # A pattern whose fixed part lies above a root (/data/*/x with roots /data/a and /data/b) also
        # matches paths beside the roots: those are not part of the corpus, and not named either.
        fixed = os.path.realpath(_glob_parts(spec, Path("/"))[0])
        keep = None
        if not any(_inside(fixed, r) for r in real_roots):
            lexical_roots = [os.path.abspath(r) for r in roots] + real_roots
            keep = lambda match: any(_inside(os.path.abspath(match), r) for r in lexical_roots)  # noqa: E731
        return _Finder(None, check, check_root=check_root, keep=keep).run([spec])
    check(os.path.realpath(spec), spec)
    return _Finder(None, check).run([spec])


# ---------------------------------------------------------------------------------------------
# Archives of shards (uploads)
# ---------------------------------------------------------------------------------------------


def is_archive(filename: str) -> bool:
    """Whether a file name is an archive that unpack_archive opens: .zip .tar .tar.gz .tgz"""
    return (filename or "").strip().lower().endswith(_ARCHIVE_SUFFIXES)


def _safe_parts(name: str, archive: str) -> tuple[str, ...]:
    """A member name's parts; CorpusError for an absolute name or a ".." part (a "zip slip")."""
    raw = name.replace("\\", "/")
    if raw.startswith("/") or re.match(r"[A-Za-z]:", raw):
        raise CorpusError(f"The archive {archive} holds {_shown(name)}, an absolute path; archives may only "
                          "hold relative paths.")
    parts = tuple(p for p in raw.split("/") if p not in ("", "."))
    if ".." in parts:
        raise CorpusError(f"The archive {archive} holds {_shown(name)}, a path that leads out of its folder "
                          "(\"..\"); it is refused.")
    return parts


def _member_parts(name: str, archive: str) -> tuple[str, ...] | None:
    """The path a member file is written to (its parts), None for junk (hidden files, __MACOSX,
    markers); CorpusError for an unsafe name or a type we do not read."""
    parts = _safe_parts(name, archive)
    if not parts or parts[0] == "__MACOSX" or any(p.startswith(".") for p in parts) or _skipped(parts[-1]):
        return None
    if format_of(parts[-1]) is None:
        raise CorpusError(f"The archive {archive} holds {_shown('/'.join(parts))}, which is not a type of file "
                          f"the corpus reader reads. {ACCEPTED_DESCRIPTION}")
    return parts


def _zip_members(zf: zipfile.ZipFile, archive: str) -> list[tuple[tuple[str, ...], Callable]]:
    members = []
    for info in zf.infolist():
        mode = info.external_attr >> 16
        kind = stat.S_IFMT(mode) if info.create_system == 3 else 0  # Unix file types
        if kind == stat.S_IFLNK:
            raise CorpusError(f"The archive {archive} holds {_shown(info.filename)}, a symbolic link; links "
                              "are refused.")
        if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
            raise CorpusError(f"The archive {archive} holds {_shown(info.filename)}, a device or other special "
                              "file; only regular files are unpacked.")
        if info.is_dir() or kind == stat.S_IFDIR:
            _safe_parts(info.filename, archive)  # refuses "../" and "/x/" folders too
            continue
        parts = _member_parts(info.filename, archive)
        if parts is None:
            continue
        if info.flag_bits & 0x1:
            raise CorpusError(f"The archive {archive} is encrypted ({_shown(info.filename)}); upload an "
                              "unencrypted archive.")
        members.append((parts, lambda info=info: zf.open(info)))
    return members


def _tar_members(tf: tarfile.TarFile, archive: str) -> list[tuple[tuple[str, ...], Callable]]:
    members = []
    for n, member in enumerate(tf, 1):
        if n > _MAX_MEMBERS:
            raise CorpusError(f"The archive {archive} holds more than {_MAX_MEMBERS:,} files; split it.")
        if member.issym() or member.islnk():
            raise CorpusError(f"The archive {archive} holds {_shown(member.name)}, a link; links are refused.")
        if member.isdir():
            _safe_parts(member.name, archive)
            continue
        if not member.isfile():
            raise CorpusError(f"The archive {archive} holds {_shown(member.name)}, a device or other special "
                              "file; only regular files are unpacked.")
        parts = _member_parts(member.name, archive)
        if parts is not None:
            members.append((parts, lambda member=member: tf.extractfile(member)))
    return members


_ARCHIVE_ERRORS = (OSError, EOFError, zlib.error, zipfile.BadZipFile, tarfile.TarError, RuntimeError)


def unpack_archive(archive: Path, dest: Path, *, max_bytes: int) -> list[Path]:
    """Unpack into dest (which exists and is empty), members in archive order sorted by name. Refuse
    (CorpusError) absolute names, `..`, symlinks, hard links, devices, names whose extension we do not read
    (hidden/`__MACOSX` junk is skipped), and stop with a sentence once the bytes written pass max_bytes
    (counted while writing, not from the headers). Nothing partial is left behind on failure.

    Every member is checked before anything is written; then each is copied by this code, counting
    bytes (never ``extractall``, which trusts the names and the declared sizes). Returns the written
    files sorted by their path in the archive."""
    archive, dest = Path(archive), Path(dest)
    shown = _shown(archive.name)
    try:
        if zipfile.is_zipfile(archive):
            opened = zipfile.ZipFile(archive)
            if len(opened.infolist()) > _MAX_MEMBERS:
                raise CorpusError(f"The archive {shown} holds more than {_MAX_MEMBERS:,} files; split it.")
            list_members = _zip_members
        else:
            opened = tarfile.open(archive, "r:*")
            list_members = _tar_members
    except CorpusError:
        raise
    except _ARCHIVE_ERRORS as e:
        raise CorpusError(f"{shown} is not a readable .zip or .tar archive ({bounded(str(e), 200)}).") from None
    written: list[tuple[tuple[str, ...], Path]] = []
    try:
        with opened:
            try:
                members = list_members(opened, shown)
            except _ARCHIVE_ERRORS as e:
                raise CorpusError(f"The archive {shown} is damaged ({bounded(str(e), 200)}).") from None
            files = {parts for parts, _ in members}
            folders = {parts[:i] for parts in files for i in range(1, len(parts))}
            if len(files) < len(members) or files & folders:
                twice = next(parts for parts, _ in members
                             if parts in folders or sum(p == parts for p, _ in members) > 1)
                raise CorpusError(f"The archive {shown} holds {_shown('/'.join(twice))} twice (or as both a file "
                                  "and a folder).")
            if not members:
                raise CorpusError(f"The archive {shown} holds no corpus files. {ACCEPTED_DESCRIPTION}")
            total = 0
            for parts, open_member in members:
                target = dest.joinpath(*parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                with open(target, "xb") as out:
                    written.append((parts, target))
                    try:
                        src = open_member()
                        with src:
                            while chunk := src.read(reading._CHUNK):
                                total += len(chunk)
                                if total > max_bytes:
                                    raise CorpusError(
                                        f"The archive {shown} unpacks to more than {_bytes(max_bytes)}, the most "
                                        "this installation unpacks (UPLOAD_MAX_DECOMPRESSED_BYTES). Upload a "
                                        "smaller archive, or split it."
                                    )
                                out.write(chunk)
                    except _ARCHIVE_ERRORS as e:
                        if isinstance(e, OSError) and getattr(e, "errno", None) is not None and \
                                not isinstance(e, (zipfile.BadZipFile, tarfile.TarError)):
                            raise  # a problem of this server (disk full), not of the archive
                        raise CorpusError(f"The archive {shown} is damaged: {_shown('/'.join(parts))} cannot be "
                                          f"read ({bounded(str(e) or type(e).__name__, 200)}).") from None
    except BaseException:
        for child in list(dest.iterdir()):
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)
        raise
    return [path for _, path in sorted(written)]
