"""A labelled dataset uploaded as one .zip holding a file per split.

The archive holds ``train`` and, optionally, ``validation`` (or ``dev``, ``valid``) and ``test``
files, each with the extension of its format (``train.conll``, ``dev.csv.gz``, ...), at its top
or inside folders. Nothing else may be in it (a Mac's ``__MACOSX/`` and ``.DS_Store`` aside):
a file that is not a split is refused, never skipped, so a misnamed split cannot go unnoticed.

Only the split files are written, each to the path the caller chooses (never a path read from
the archive), and the bytes written are counted against ``max_bytes`` as they unpack, so an
archive that expands past the bound stops there.
"""

from __future__ import annotations

import stat
import zipfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from trainer.errors import DatasetError
from trainer.prep.labelled.examples import SPLIT_NAMES, SPLITS
from trainer.prep.labelled.readers import ACCEPTED, extension_format

ARCHIVE_SUFFIX = ".zip"
ARCHIVE_NAMES = "train, validation (or dev, valid) and test"
_JUNK_NAMES = (".DS_Store", "Thumbs.db")
_CHUNK = 1 << 20


def is_archive(filename: str) -> bool:
    """Whether an upload's name is a split archive's."""
    return (filename or "").strip().lower().endswith(ARCHIVE_SUFFIX)


def unpack_split_archive(archive: Path, *, target: Callable[[str, str], Path],
                         max_bytes: int) -> dict[str, tuple[Path, str]]:
    """Write the split files of a .zip; ``{split: (path written, the file's name in the archive)}``.

    ``target(split, suffix)`` is where a split's file goes (``suffix``: its extension in lower
    case, ".conll" or ".csv.gz"). Every entry is checked before anything is written. Raises
    DatasetError with a sentence (naming the entry at fault); files already written are removed.
    """
    try:
        zf = zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, OSError) as e:
        raise DatasetError(f"The .zip archive cannot be read ({e}).") from None
    with zf:
        plan = _plan(zf, max_bytes)
        paths: list[Path] = []
        try:
            total = 0
            for split, (info, suffix) in plan.items():
                paths.append(target(split, suffix))
                total = _unpack(zf, info, paths[-1], total, max_bytes)
        except BaseException:
            for path in paths:
                path.unlink(missing_ok=True)
            raise
    written = {split: (path, PurePosixPath(info.filename).name)
               for (split, (info, _)), path in zip(plan.items(), paths)}
    return {split: written[split] for split in SPLITS if split in written}


def _plan(zf: zipfile.ZipFile, max_bytes: int) -> dict[str, tuple[zipfile.ZipInfo, str]]:
    """The entry and extension of each split; refuses links, other files, a split twice, no train."""
    plan: dict[str, tuple[zipfile.ZipInfo, str]] = {}
    formats: dict[str, str] = {}
    declared = 0
    for info in zf.infolist():
        path = PurePosixPath(info.filename.replace("\\", "/"))
        if info.is_dir() or path.parts[:1] == ("__MACOSX",) or path.name in _JUNK_NAMES or path.name.startswith("._"):
            continue
        if stat.S_IFMT(info.external_attr >> 16) not in (0, stat.S_IFREG):  # 0: written without Unix mode bits
            raise DatasetError(f'"{info.filename}" in the archive is not a plain file (a link?); the archive may '
                               f"hold only the {ARCHIVE_NAMES} files.")
        stem, dot, _ = path.name.partition(".")
        split = SPLIT_NAMES.get(stem.lower())
        if split is None or not dot:
            raise DatasetError(f'The archive holds "{info.filename}", which is not a split file; it may hold only '
                               f"files named {ARCHIVE_NAMES}, each with its format's extension (train.conll, "
                               "dev.csv, test.jsonl.gz, ...).")
        fmt = extension_format(path.name)  # "json": SQuAD or JSON Lines, which the content tells later
        gz = ".gz" if path.name.lower().endswith(".gz") else ""
        suffix = "." + path.name.lower().removesuffix(gz).rsplit(".", 1)[-1] + gz
        if split in plan:
            raise DatasetError(f'The archive holds two {split} files, "{plan[split][0].filename}" and '
                               f'"{info.filename}"; keep one.')
        declared += info.file_size
        if declared > max_bytes:
            raise DatasetError(_too_large(max_bytes))
        plan[split] = (info, suffix)
        formats[split] = fmt
    if "train" not in plan:
        found = ", ".join(f'"{info.filename}"' for info, _ in plan.values()) or "no split file"
        raise DatasetError(f"The archive holds no train file ({found}); name the files {ARCHIVE_NAMES}, each with its "
                           f"format's extension: {ACCEPTED}.")
    for split, fmt in formats.items():
        if fmt != formats["train"]:
            raise DatasetError(f'The archive\'s {split} file "{plan[split][0].filename}" is {fmt.upper()} but its '
                               f'train file "{plan["train"][0].filename}" is {formats["train"].upper()}; give every '
                               "split in one format.")
    return plan


def _unpack(zf: zipfile.ZipFile, info: zipfile.ZipInfo, path: Path, total: int, max_bytes: int) -> int:
    """Copy one entry to ``path``, counting its bytes against ``max_bytes`` (the declared sizes may lie)."""
    try:
        with zf.open(info) as src, open(path, "wb") as out:
            for chunk in iter(lambda: src.read(_CHUNK), b""):
                total += len(chunk)
                if total > max_bytes:
                    raise DatasetError(_too_large(max_bytes))
                out.write(chunk)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, NotImplementedError, RuntimeError) as e:
        raise DatasetError(f'"{info.filename}" in the .zip archive cannot be unpacked ({e}).') from None
    return total


def _too_large(max_bytes: int) -> str:
    return (f"The archive unpacks to more than {max_bytes / 1e6:,.1f} MB, the most a dataset upload may take; "
            "gzip-compress the files inside it (train.conll.gz, ...) or upload them one per split.")
