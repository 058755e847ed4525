"""Writes for corpora and tokenizers: create, process (called by the Celery tasks), delete.

Processing functions are not wrapped in one transaction on purpose: their progress updates
must be visible to the page while the work runs. Each state change is its own small write.
Outputs are built in a temporary folder and moved into place only on success, so a failed
job never leaves half-made files behind.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction

from webapp.corpora.models import Corpus, CorpusFile, SourceKind, Tokenizer
from webapp.corpora.uploads import check_uploads, corpus_suffix, guess_source, is_archive
from webapp.jobs.lifecycle import ActionRefused
from webapp.jobs.lifecycle import StageProgress as _Progress
from webapp.jobs.lifecycle import claim as _claim
from webapp.jobs.lifecycle import enqueue as _enqueue
from webapp.jobs.lifecycle import fail as _fail
from webapp.jobs.lifecycle import rmtree_after_commit as _rmtree_after_commit
from webapp.jobs.models import JobStatus
from webapp.jobs.uploads import keep_upload

if TYPE_CHECKING:
    from trainer.prep.sources import SourceFile

log = logging.getLogger(__name__)

DEMO_NAME = "Demo corpus (Python standard library docstrings)"
RAW_FOLDER = "raw"  # several uploaded files (or archives of them): raw/0000<suffix>, raw/0001<suffix>, ...
UPLOADS_MANIFEST = "uploads.json"  # in raw/: [{"stored": "0000.parquet", "name": <the client's name>}, ...]
LISTED_FILES = 1000  # files an import's listing (dry run) shows; its totals count them all
FILES_BATCH = 1000  # CorpusFile rows written at a time
NO_IMPORT_ROOTS = ("Importing from the server is off: an administrator must set CORPUS_IMPORT_ROOTS (the folders "
                   "corpora may be imported from) in the server's environment.")


# ---------------------------------------------------------------- helpers


def _cleaning_options(options: dict[str, Any] | None):
    """The trainer's CleaningOptions from a dict (unknown keys are ignored)."""
    from trainer.prep.corpus import CleaningOptions

    return CleaningOptions.from_dict(options)


def store_files(corpus: Corpus, sources: Sequence[dict[str, Any]]) -> None:
    """Record `corpus`'s files (SourceFile.to_dict() each, in reading order) as its CorpusFile rows,
    written in batches, and their totals in corpus.sources_summary (stored)."""
    from trainer.prep.sources import SourceFile, describe

    CorpusFile.objects.bulk_create(
        (CorpusFile(corpus=corpus, position=i, name=str(d["name"]), path=str(d.get("path") or ""),
                    format=str(d["format"]), compression=str(d.get("compression") or "none"),
                    bytes=int(d.get("bytes") or 0)) for i, d in enumerate(sources)),
        batch_size=FILES_BATCH)
    corpus.sources_summary = describe([SourceFile.from_dict(d) for d in sources])
    Corpus.objects.filter(pk=corpus.pk).update(sources_summary=corpus.sources_summary)


@transaction.atomic
def _replace_files(corpus: Corpus, sources: Sequence[dict[str, Any]]) -> None:
    corpus.files.all().delete()
    store_files(corpus, sources)


def raw_path(corpus: Corpus) -> Path:
    """Where the one uploaded file of `corpus` is stored: always `raw` plus the accepted suffix."""
    matches = sorted(p for p in corpus.folder.glob("raw.*") if p.is_file())
    return matches[0] if matches else corpus.folder / "raw.txt"


# ---------------------------------------------------------------- corpora


@transaction.atomic
def corpus_create_from_upload(
    *, owner: AbstractBaseUser, name: str, options: dict[str, bool], uploaded_file: UploadedFile | None = None,
    original_filename: str | None = None, uploaded_files: Sequence[UploadedFile] | None = None,
    text_field: str = "text",
) -> Corpus:
    """Store uploaded files as a new corpus and queue its ingest.

    One file (`uploaded_file`, shown as `original_filename`) is kept as `<corpus folder>/raw<suffix>`;
    several (`uploaded_files`, each shown by its own name), or any archive, as
    `<corpus folder>/raw/0000<suffix>`, ... with raw/uploads.json naming them (archives are unpacked by
    the ingest task, not here). Each file is moved (not copied) from the upload's temporary file,
    which Django streamed to disk inside the storage folder.
    """
    from webapp.corpora.tasks import ingest_corpus

    if uploaded_files is None:
        if uploaded_file is None:
            raise ValueError("corpus_create_from_upload needs uploaded_file or uploaded_files")
        files = [uploaded_file]
        names = [Path(original_filename or uploaded_file.name or "").name]
    else:
        files = list(uploaded_files)
        names = [Path(f.name or "").name for f in files]
    suffixes = check_uploads(list(zip(names, [f.size for f in files])))  # forms check this first; never trust
    total = sum(f.size for f in files)
    corpus = Corpus.objects.create(
        owner=owner,
        name=(name or "").strip() or _default_name(names[0]),
        original_filename=_shown_names(names),
        size_bytes=total,
        options=_cleaning_options(options).to_dict(),
        source_kind=SourceKind.UPLOAD,
        text_field=(text_field or "").strip() or "text",
    )
    folder = corpus.folder
    folder.mkdir(parents=True)
    try:
        if len(files) == 1 and not is_archive(names[0]):
            target = folder / f"raw{suffixes[0]}"
            keep_upload(files[0], target)
            sources = [guess_source(names[0], target, files[0].size)]
        else:
            raw = folder / RAW_FOLDER
            raw.mkdir()
            manifest, sources = [], []
            for i, (uploaded, shown, suffix) in enumerate(zip(files, names, suffixes)):
                target = raw / f"{i:04d}{suffix}"
                keep_upload(uploaded, target)
                manifest.append({"stored": target.name, "name": shown})
                sources.append(guess_source(shown, target, uploaded.size))
            (raw / UPLOADS_MANIFEST).write_text(json.dumps(manifest, ensure_ascii=False, indent=1), encoding="utf-8")
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    store_files(corpus, sources)
    _enqueue(ingest_corpus, corpus)
    return corpus


def _shown_names(names: list[str]) -> str:
    """The client's file names, for the page only (never a path): "a.parquet", or "a.parquet, b.jsonl.zst, …"."""
    shown = ", ".join(names)
    return shown if len(shown) <= 255 else shown[:254] + "…"


def _default_name(filename: str) -> str:
    base = Path(filename or "corpus").name
    suffix = corpus_suffix(base)
    if suffix:
        base = base[: -len(suffix)]
    for suffix in (".gz", ".jsonl", ".txt"):
        if base.lower().endswith(suffix):
            base = base[: -len(suffix)]
    return (base.strip(" .") or "Corpus")[:200]


def _import_roots() -> tuple[list[Path], list[Path]]:
    """The folders the administrator allows imports from, and those never reachable (our own storage)."""
    return [Path(p) for p in settings.CORPUS_IMPORT_ROOTS], [Path(settings.STORAGE_ROOT)]


def import_find(spec: str) -> list[SourceFile]:
    """The files a server path (a file, a folder or a glob) names, path-checked
    (trainer.prep.sources.resolve_import); CorpusError with a sentence for every refusal."""
    from trainer.errors import CorpusError
    from trainer.prep.sources import resolve_import

    roots, forbidden = _import_roots()
    if not roots:
        raise CorpusError(NO_IMPORT_ROOTS)
    spec = (spec or "").strip()
    try:
        return resolve_import(spec, roots, forbidden=forbidden)
    except OSError as error:  # a folder the server may not read, a path too long for the system, ...
        raise CorpusError(f"The files at {spec[:300]} cannot be read ({error.strerror or error}).") from None


def import_listing(spec: str) -> dict[str, Any]:
    """What an import would read (its dry run): the totals of every file, and the first LISTED_FILES."""
    from trainer.prep.sources import describe

    found = import_find(spec)
    summary = describe(found)
    return {"path": (spec or "").strip(), "files": [f.to_dict() for f in found[:LISTED_FILES]],
            "shown": min(len(found), LISTED_FILES), "summary": summary}


def corpus_create_from_import(
    *, owner: AbstractBaseUser, spec: str, name: str = "", options: dict[str, bool] | None = None,
    text_field: str = "text",
) -> Corpus:
    """A corpus read in place from files on the server (never copied: its sources point at them), owned
    by `owner` as an upload is, and ingested like one. CorpusError with a sentence when the path is refused."""
    found = import_find(spec)
    return _create_imported(owner=owner, spec=spec.strip(), name=name, options=options or {}, found=found,
                            text_field=text_field)


@transaction.atomic
def _create_imported(*, owner, spec: str, name: str, options: dict, found: list, text_field: str) -> Corpus:
    from webapp.corpora.tasks import ingest_corpus

    corpus = Corpus.objects.create(
        owner=owner,
        name=(name or "").strip() or _import_name(spec),
        original_filename=spec if len(spec) <= 255 else "…" + spec[-254:],
        size_bytes=sum(f.bytes for f in found),
        options=_cleaning_options(options).to_dict(),
        source_kind=SourceKind.IMPORT,
        text_field=(text_field or "").strip() or "text",
    )
    store_files(corpus, [f.to_dict() for f in found])
    _enqueue(ingest_corpus, corpus)
    return corpus


def _import_name(spec: str) -> str:
    """The last part of the path that is not a pattern: /data/c4/en/*.json.gz -> "en"."""
    parts = [p for p in Path(spec).parts if p not in ("/", "") and not any(c in p for c in "*?[")]
    if parts and Path(spec).name == parts[-1] and corpus_suffix(parts[-1]):
        return _default_name(parts[-1])  # a single file: its name without the extension
    return (parts[-1] if parts else "Imported corpus")[:200]


@transaction.atomic
def corpus_create_demo(*, owner: AbstractBaseUser) -> Corpus:
    """A corpus built from the standard library's docstrings, ingested like any upload."""
    from trainer.prep.corpus import write_demo_corpus
    from webapp.corpora.tasks import ingest_corpus

    corpus = Corpus.objects.create(owner=owner, name=DEMO_NAME, original_filename="demo.txt",
                                   options=_cleaning_options({}).to_dict(), source_kind=SourceKind.DEMO)
    corpus.folder.mkdir(parents=True)
    try:
        path = Path(write_demo_corpus(corpus.folder / "raw.txt"))
    except BaseException:
        shutil.rmtree(corpus.folder, ignore_errors=True)
        raise
    corpus.size_bytes = path.stat().st_size
    corpus.save(update_fields=["size_bytes"])
    store_files(corpus, [guess_source("demo.txt", path, corpus.size_bytes)])
    _enqueue(ingest_corpus, corpus)
    return corpus


def corpus_process(*, corpus_id) -> None:
    """Find, validate, clean and split a corpus's files (the ingest task). Never raises for bad data.

    An upload of several files or archives: the archives are unpacked into raw/ (each into its own
    folder, once), then every file is found there; an import: each file it listed is checked again
    against the allowed roots (one removed since is refused); an upload of one file (and every corpus
    made before issue 28) is ingested from its `raw<suffix>` file. A job that was interrupted and
    queued again resumes: the corpus folder is kept, and the trainer continues from its work folder.
    """
    from trainer.prep import corpus as prep

    if not _claim(Corpus, corpus_id):
        log.info("Corpus %s is finished or gone; nothing to do.", corpus_id)
        return
    Corpus.objects.filter(pk=corpus_id).update(progress_detail={})
    corpus = Corpus.objects.get(pk=corpus_id)
    progress = _Progress(Corpus, corpus.pk, end=99.0)
    options = _cleaning_options(corpus.options)
    try:
        # ingest builds its outputs in a work folder inside the corpus folder and renames them into
        # place at the end, so a failure leaves only what was uploaded there.
        if corpus.source_kind == SourceKind.IMPORT:
            sources = _imported_sources(corpus)
        elif (corpus.folder / RAW_FOLDER).is_dir():
            sources = _uploaded_sources(corpus)
        else:
            sources = None
        if sources is not None:  # the files as found now (an archive's members, an import's sizes)
            _replace_files(corpus, [s.to_dict() for s in sources])
            if corpus.source_kind == SourceKind.IMPORT:
                Corpus.objects.filter(pk=corpus.pk).update(size_bytes=sum(s.bytes for s in sources))
            result = prep.ingest(sources, corpus.folder, options=options, text_field=corpus.text_field,
                                 progress=progress)
        else:
            result = prep.ingest(raw_path(corpus), corpus.folder, original_filename=corpus.original_filename,
                                 options=options, text_field=corpus.text_field, progress=progress)
        listed = _listed_files(result.stats)
        with transaction.atomic():
            if sources is None and listed:  # one stored file: its format as the ingest found it
                _replace_files(corpus, listed)
            Corpus.objects.filter(pk=corpus.pk).update(
                status=JobStatus.READY, progress=100.0, error="",
                stats=result.stats, removed=result.removed, preview=result.preview,
                examples=getattr(result, "examples", None) or {},
            )
    except Exception as error:
        _fail(Corpus, corpus.pk, error)
    if not Corpus.objects.filter(pk=corpus.pk).exists():  # deleted while we worked
        shutil.rmtree(corpus.folder, ignore_errors=True)


def _listed_files(stats: dict) -> list[dict] | None:
    """The files an ingest read, as its statistics list them (SourceFile dicts)."""
    found = (stats or {}).get("input") or {}
    for key in ("files", "file_list"):
        if isinstance(found.get(key), list):
            return found[key]
    return None


def _imported_sources(corpus: Corpus) -> list[SourceFile]:
    """The imported files, each checked again as when it was listed: the roots may have changed since."""
    from trainer.errors import CorpusError
    from trainer.prep.sources import SourceFile, resolve_import

    listed_files = corpus.files.order_by("position")
    if not listed_files.exists():
        raise CorpusError("This corpus lists no files to read. Import the folder again.")
    roots, forbidden = _import_roots()
    if not roots:
        raise CorpusError(NO_IMPORT_ROOTS)
    found = []
    for row in listed_files.iterator(chunk_size=FILES_BATCH):
        listed = SourceFile.from_dict(row.to_dict())
        for source in resolve_import(listed.path, roots, forbidden=forbidden):
            found.append(dataclasses.replace(source, name=listed.name))
    return found


def _uploaded_sources(corpus: Corpus) -> list[SourceFile]:
    """The files of an upload kept in raw/, archives unpacked, in the order they were uploaded; each
    named as the client named it (an archive's members as "<archive>/<member>")."""
    from trainer.errors import CorpusError
    from trainer.prep.sources import discover

    raw = corpus.folder / RAW_FOLDER
    try:
        manifest = json.loads((raw / UPLOADS_MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise CorpusError("The uploaded files are incomplete (their list is missing). Upload them again.") from None
    found = []
    for entry in manifest:
        stored, shown = raw / entry["stored"], entry["name"]
        if is_archive(shown):
            try:
                folder = _unpacked(stored)
            except CorpusError as refused:  # the trainer names the stored file; the person knows theirs
                raise CorpusError(str(refused).replace(stored.name, shown)) from None
            for source in discover([folder]):
                found.append(dataclasses.replace(source, name=f"{shown}/{source.name}"))
        else:
            for source in discover([stored]):
                found.append(dataclasses.replace(source, name=shown))
    return found


def _unpacked(archive: Path) -> Path:
    """The folder an uploaded archive is unpacked into (raw/0001.zip -> raw/0001/), unpacked once:
    into a temporary folder renamed at the end, the archive deleted after (its files are the corpus now)."""
    from trainer.prep import corpus as prep
    from trainer.prep.sources import unpack_archive

    folder = archive.parent / archive.name.split(".", 1)[0]
    if not folder.is_dir():
        work = archive.parent / f".{folder.name}.unpacking"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        try:
            unpack_archive(archive, work, max_bytes=prep.UPLOAD_MAX_DECOMPRESSED_BYTES)
            work.rename(folder)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
    archive.unlink(missing_ok=True)
    return folder


@transaction.atomic
def corpus_delete(*, corpus: Corpus) -> None:
    """Delete a corpus, its tokenizers and their files; refused while runs use it."""
    n_runs = corpus.runs.count()
    if n_runs:
        raise ActionRefused(
            f"“{corpus.name}” is used by {n_runs} run{'s' if n_runs != 1 else ''}. "
            "Delete those runs first, then delete the corpus."
        )
    folders = [corpus.folder, *(t.folder for t in corpus.tokenizers.all())]
    corpus.delete()
    _rmtree_after_commit(*folders)


# ---------------------------------------------------------------- tokenizers


@transaction.atomic
def tokenizer_create(
    *, owner: AbstractBaseUser, corpus: Corpus, name: str, algorithm: str, vocab_size: int, lowercase: bool,
    extra_ids: int | None = None,
) -> Tokenizer:
    """Queue training a tokenizer on a ready corpus (then encoding the corpus into shards).
    extra_ids: T5 sentinel tokens to add (<extra_id_0> ...), 0 for none; None: the algorithm's
    default (trainer.catalog.schema.default_extra_ids: T5's 100 for Unigram, else none)."""
    from trainer.catalog.schema import default_extra_ids

    from webapp.corpora.tasks import build_tokenizer

    if corpus.owner_id != owner.pk:  # callers look corpora up by owner; this is a last guard
        raise Corpus.DoesNotExist("No such corpus.")
    corpus = Corpus.objects.select_for_update().get(pk=corpus.pk)
    if corpus.status == JobStatus.FAILED:
        raise ActionRefused(
            f"The corpus “{corpus.name}” failed to process, so no tokenizer can be trained on it. "
            "Upload a corrected file."
        )
    if corpus.status != JobStatus.READY:
        raise ActionRefused(
            "The corpus is still being processed. Wait until it is ready, then train the tokenizer."
        )
    tokenizer = Tokenizer.objects.create(
        owner=owner, corpus=corpus, algorithm=algorithm, vocab_size=vocab_size, lowercase=lowercase,
        extra_ids=default_extra_ids(algorithm) if extra_ids is None else int(extra_ids),
        name=(name or "").strip() or default_tokenizer_name(corpus, algorithm, vocab_size, lowercase),
    )
    _enqueue(build_tokenizer, tokenizer)
    return tokenizer


def default_tokenizer_name(corpus: Corpus, algorithm: str, vocab_size: int, lowercase: bool) -> str:
    size = f"{vocab_size // 1000}k" if vocab_size % 1000 == 0 else str(vocab_size)
    case = "uncased" if lowercase else "cased"
    return f"{corpus.name[:150]} · {algorithm} {size} {case}"


TRAINED_MARK = "trained.json"  # in the work folder: the tokenizer is trained (its statistics)


def tokenizer_process(*, tokenizer_id) -> None:
    """Train the tokenizer (0-60 %), then encode the corpus into token shards (60-100 %).

    A job stopped after its training (a worker killed, a machine restarted) resumes when it is
    queued again: the trained tokenizer is kept in the work folder (TRAINED_MARK), and the encode
    continues from the pieces it had finished (trainer.prep.shards). Training again would give
    another vocabulary (the tokenizers library's trainers are not deterministic across processes)
    and so encode everything again."""
    from trainer.prep.shards import encode_corpus
    from trainer.prep.tokenization import train_tokenizer

    if not _claim(Tokenizer, tokenizer_id):
        log.info("Tokenizer %s is finished or gone; nothing to do.", tokenizer_id)
        return
    Tokenizer.objects.filter(pk=tokenizer_id).update(progress_detail={})
    tokenizer = Tokenizer.objects.select_related("corpus").get(pk=tokenizer_id)
    folder = tokenizer.folder
    work = folder.with_name(f".{folder.name}.tmp")
    stats = _trained(work)
    if stats is None:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
    try:
        corpus_dir = tokenizer.corpus.folder
        if stats is None:
            stats = train_tokenizer(
                corpus_dir, work, algorithm=tokenizer.algorithm, vocab_size=tokenizer.vocab_size,
                lowercase=tokenizer.lowercase, extra_ids=tokenizer.extra_ids,
                progress=_Progress(Tokenizer, tokenizer.pk, end=60.0),
            )
            (work / TRAINED_MARK).write_text(json.dumps(stats), encoding="utf-8")
        sample = (tokenizer.corpus.stats or {}).get("sample")
        if isinstance(sample, dict):
            stats["sample"] = sample  # what the vocabulary was learned from
        shard_stats = encode_corpus(corpus_dir, work, progress=_Progress(Tokenizer, tokenizer.pk, start=60.0,
                                                                        end=99.0))
        (work / TRAINED_MARK).unlink(missing_ok=True)
        shutil.rmtree(folder, ignore_errors=True)
        work.replace(folder)
        with transaction.atomic():
            Tokenizer.objects.filter(pk=tokenizer.pk).update(
                status=JobStatus.READY, progress=100.0, error="", stats={**stats, "shards": shard_stats},
            )
    except Exception as error:
        _fail(Tokenizer, tokenizer.pk, error)
        shutil.rmtree(work, ignore_errors=True)
    # a stop that is not a failure (a worker's shutdown, a kill) leaves `work` for the next attempt
    if not Tokenizer.objects.filter(pk=tokenizer.pk).exists():
        shutil.rmtree(folder, ignore_errors=True)


def _trained(work: Path) -> dict | None:
    """The statistics of a tokenizer an earlier attempt of this job trained, None when there is none."""
    try:
        stats = json.loads((work / TRAINED_MARK).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return stats if isinstance(stats, dict) and (work / "tokenizer.json").is_file() else None


@transaction.atomic
def tokenizer_delete(*, tokenizer: Tokenizer) -> None:
    n_runs = tokenizer.runs.count()
    if n_runs:
        raise ActionRefused(
            f"“{tokenizer.name}” is used by {n_runs} run{'s' if n_runs != 1 else ''}. "
            "Delete those runs first, then delete the tokenizer."
        )
    folder = tokenizer.folder
    tokenizer.delete()
    _rmtree_after_commit(folder)
