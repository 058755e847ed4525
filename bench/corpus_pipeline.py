"""The corpus pipeline at scale, as a user gets it, beside the tokenizers library's own encoding (issue 28).

    .venv/bin/python bench/corpus_pipeline.py                              # 1 GB, parquet, jsonl.zst, json.gz
    .venv/bin/python bench/corpus_pipeline.py --size 200MB --formats parquet --threads 2
    .venv/bin/python bench/corpus_pipeline.py --size 1GB --prepare-only    # render and write the corpus only

The corpus is real text made on this machine, no network:

  - the English man pages under /usr/share/man (man1..man8; the language folders are left out),
    each rendered to plain text by groff as man(1) does (`groff -mandoc -t -k -Tutf8`, lines of 100
    characters, no hyphenation, no bold/underline overstrikes); redirect pages (`.so other.1`) and
    symbolic links are left out, being other pages again;
  - the Python standard library's documentation: `pydoc.render_doc(module, renderer=pydoc.plaintext)`
    of every importable module of the Python running this (packages' submodules included; tests,
    `__main__` modules, private `_modules` and a few with side effects on import left out); a module
    that fails to import or render is skipped.

Each page is one document. Rendering runs in a process pool (--threads), each page cached as a text
file under --cache (render/), so a second run renders nothing again. --layout paragraphs (the
default) then puts each paragraph of a page on one line, as web text has it (the lines of a block
that share their indentation joined; see unwrap): rendered at 100 columns, a page's sentences run
over several lines, and C4's terminal-punctuation rule would drop every line but a paragraph's
last; --layout lines keeps the rendering's lines. The pages are taken in a seeded order; a corpus
smaller than all of them is the first pages of that order (so only those are rendered), a larger
one repeats them, each round in another seeded order, until --size of text is reached
(--unique-size: repeat only the first pages, up to that much text). Every repeated copy is varied
(--vary): `words` (the default) gives it a first line "Copy N of NAME" and, of 20% of its words
drawn at random (seeded per copy), replaces those made of letters alone by words drawn from the
corpus, so that neither exact nor near-duplicate removal (MinHash: about a third of the 5-grams
left in common) nor repeated-span removal (hardly ever three sentences in a row unchanged) removes
the copies, and every stage works on the whole --size; `title` adds the first line alone, which
exact deduplication lets through but MinHash and span removal do not (then the later stages see
the unique text only).

The corpus is written in each of --formats, as shards of about --shard-mb MB of text each (text
before compression; a shard is cut after the document that reaches it):
  parquet    pyarrow, columns `text` and `id`, row groups of 10,000 rows (snappy, pyarrow's default);
  jsonl.zst  JSON lines {"text", "meta": {"source", "name", "copy"}} (as The Pile), zstandard level 3;
  json.gz    JSON lines {"text", "timestamp", "url"} (as C4), gzip level 6.
Written in parallel (one shard a task) and cached under --cache (corpora/), keyed by everything
that decides their content.

Then, per format, in a subprocess of its own (so that its peak memory is the run's alone), the
product's pipeline end to end, as the web app and the CLI call it:
  trainer.prep.sources.discover([folder])
  trainer.prep.corpus.ingest(sources, corpus_dir, options=CleaningOptions(<--rules>), workers=--threads)
  trainer.prep.tokenization.train_tokenizer(corpus_dir, tok_dir, algorithm="wordpiece", vocab_size=--vocab-size)
  trainer.prep.shards.encode_corpus(corpus_dir, tok_dir, workers=--threads)
(`workers=` passed to the functions that take it), each call timed, and ingest's own stage seconds
(stats["stages"]: read and clean, dedup, split) read back. The subprocess runs with
RAYON_NUM_THREADS=--threads and TOKENIZERS_PARALLELISM=true (tokenizer training's threads; the
encode's worker processes set their own). Peak memory: the resident set of the subprocess and all
its descendants summed, sampled every 0.2 s with psutil; beside it getrusage's ru_maxrss of the
subprocess and of its children (the largest single process of each). --rules: CleaningOptions'
fields switched on, `all` (the default: C4's rules, MinHash, Gopher's and FineWeb's, as many as
CleaningOptions has) or a comma list; the output lists them.

The ceiling, in the same run right after the first format's pipeline: the tokenizers library's own
`Tokenizer.encode_batch(lines, add_special_tokens=False)` (as the shards' encoder calls it) over the
non-blank lines of that run's cleaned train.txt, 1,000 lines a batch, with the tokenizer that run
trained, in a subprocess with RAYON_NUM_THREADS=--threads and TOKENIZERS_PARALLELISM=true; timed
over the encode_batch calls alone; MB/s of the text it encoded.

Figures: MB is the input's text (UTF-8, uncompressed: the `text` values). Each stage's MB/s is that
input MB over the stage's seconds, end to end over the sum of the four calls' seconds; "kept" is the
cleaned text (train.txt + valid.txt) over the input; ratio = end to end MB/s / ceiling MB/s (the
issue's goal: >= 0.8); cores busy = a stage's CPU seconds (user + system, of the subprocess and of
the worker processes that ended with the stage: getrusage) over its wall seconds, out of --threads:
how much an overlap of the stages could still gain on this machine. One markdown table (and one of seconds) on stdout, everything (the command
line, the machine, the corpus, each run's stats) in corpus_pipeline.json under --out (default $OUT,
else --cache), the runs' logs in corpus_pipeline-logs/ beside it. The runs' folders (cleaned text,
tokenizer, token shards) are removed after each run unless --keep.

Needs psutil, pyarrow and zstandard (the runs: the trainer's requirements).
"""
from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import importlib
import importlib.util
import inspect
import io
import json
import multiprocessing
import os
import pkgutil
import platform
import random
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = Path(__file__).resolve()
MAN_ROOT = Path("/usr/share/man")
MAN_SECTIONS = tuple(f"man{i}" for i in range(1, 9))  # the English pages; de/, fr/, ja/, ... are left out
MAN_WIDTH = 100
# man(1)'s formatting of a page (man-db: groff -mandoc with the preprocessors), in plain text:
# -k the input's UTF-8 (preconv), -t tables, LL/LT the line length, HY=0 no hyphenation,
# grotty -c -b -o -u: no SGR escapes and no overstrikes (bold, underline), so no `col -b` is needed.
GROFF = ["groff", "-mandoc", "-t", "-k", "-Kutf-8", "-Tutf8", f"-rLL={MAN_WIDTH}n", f"-rLT={MAN_WIDTH}n", "-rHY=0",
         "-P-cbou"]
# Standard-library modules not imported for their documentation: they act when imported (open a
# browser, print, start IDLE) or are the test suite.
PYDOC_SKIP = frozenset({"antigravity", "this", "idlelib", "test", "turtledemo", "__phello__", "__hello__"})
PYDOC_SKIP_PARTS = frozenset({"test", "tests", "idle_test", "__main__"})
PYDOC_TIMEOUT = 30  # seconds to import and render one module
RENDER_VERSION = 1
CORPUS_VERSION = 1
FORMATS = {"parquet": ".parquet", "jsonl.zst": ".jsonl.zst", "json.gz": ".json.gz"}
ROW_GROUP_ROWS = 10_000
VARY_SHARE = 0.2      # the share of a copy's words replaced (--vary words)
VOCAB_SAMPLE_BYTES = 4_000_000  # the words copies draw replacements from: the first pages' words
VOCAB_MAX_WORDS = 400_000
CEILING_BATCH = 1000
SAMPLE_EVERY = 0.2    # seconds between memory samples
JSON_NAME = "corpus_pipeline.json"
STAGE_COLUMNS = (("read_clean", "read+clean"), ("dedup", "dedup"), ("split", "split"),
                 ("tokenizer", "tokenizer training"), ("encode", "encoding"))
_WORDS = re.compile(r"(\s+)")
_LETTERS = re.compile(r"[A-Za-z]{3,}")


# ---------------------------------------------------------------------------- small things
class Clock:
    def __init__(self) -> None:
        self.start = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def say(self, text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')} +{self.elapsed():6.1f}s] {text}", flush=True)


def parse_size(text: str) -> int:
    """'1GB', '200MB', '3MB', '1.5gb', '500kB', '1000000' -> bytes (decimal units, as MB/s is counted)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([kmg]?)b?\s*", str(text), re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size such as 1GB, 200MB or 3MB")
    size = int(float(m[1]) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m[2].lower()])
    if size <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size above zero")
    return size


def parse_formats(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in FORMATS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown format(s) {', '.join(unknown) or '(none)'}; "
                                         f"choose from {', '.join(FORMATS)}")
    return list(dict.fromkeys(names))


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _fork_pool(workers: int) -> ProcessPoolExecutor:
    # fork: the workers find this module's functions where the parent has them (it may be loaded
    # from a path, as the tests do, and not importable by name)
    return ProcessPoolExecutor(max_workers=max(1, workers), mp_context=multiprocessing.get_context("fork"))


# ---------------------------------------------------------------------------- pages
def man_pages(root: Path = MAN_ROOT) -> list[str]:
    """The English man pages, as paths relative to root ('man1/ls.1.gz'), symbolic links left out."""
    out = []
    for section in MAN_SECTIONS:
        folder = root / section
        if not folder.is_dir():
            continue
        for path in sorted(folder.iterdir()):
            if path.is_file() and not path.is_symlink():
                out.append(f"{section}/{path.name}")
    return out


def _stdlib_spec_ok(spec, stdlib: str) -> bool:
    if spec is None:
        return False
    origin = spec.origin or ""
    if origin in ("built-in", "frozen"):
        return True
    locations = list(spec.submodule_search_locations or []) or [origin]
    return all(os.path.realpath(p).startswith(stdlib) and "-packages" not in p for p in locations)


def stdlib_modules() -> list[str]:
    """The standard library's public modules and their packages' public submodules, found without importing."""
    stdlib = os.path.realpath(sysconfig.get_paths()["stdlib"])
    out: list[str] = []

    def walk(name: str, locations: list[str]) -> None:
        for info in sorted(pkgutil.iter_modules(locations), key=lambda i: i.name):
            if info.name.startswith("_") or info.name in PYDOC_SKIP_PARTS:
                continue
            child = f"{name}.{info.name}"
            out.append(child)
            if info.ispkg:
                walk(child, [os.path.join(loc, info.name) for loc in locations])

    for top in sorted(sys.stdlib_module_names):
        if top.startswith("_") or top in PYDOC_SKIP:
            continue
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            continue
        if not _stdlib_spec_ok(spec, stdlib):
            continue
        out.append(top)
        if spec.submodule_search_locations:
            walk(top, list(spec.submodule_search_locations))
    return out


def page_items(seed: int) -> list[tuple[str, str]]:
    """Every page to render, (kind, name), in the corpus's seeded order."""
    items = [("man", n) for n in man_pages()] + [("pydoc", n) for n in stdlib_modules()]
    random.Random(f"pages-{seed}").shuffle(items)
    return items


def render_folder(cache: Path) -> Path:
    return cache / "render" / f"v{RENDER_VERSION}"


def cache_path(cache: Path, kind: str, name: str) -> Path:
    if kind == "man":
        return render_folder(cache) / "man" / f"{name}.txt"
    return render_folder(cache) / f"pydoc-{platform.python_version()}" / f"{name}.txt"


def tidy(text: str) -> str:
    """Trailing spaces off, runs of blank lines made one, blank lines at both ends off."""
    lines = [line.rstrip() for line in text.replace("\r", "").split("\n")]
    out: list[str] = []
    for line in lines:
        if line or (out and out[-1]):
            out.append(line)
    while out and not out[-1]:
        out.pop()
    return "\n".join(out)


def _is_redirect(source: bytes) -> bool:
    """A page that only says `.so man1/other.1`: the other page again."""
    lines = [ln.strip() for ln in source.splitlines() if ln.strip() and not ln.startswith((b'.\\"', b"'\\\""))]
    return bool(lines) and len(lines) <= 2 and lines[0].startswith(b".so ")


def render_man(name: str) -> str:
    path = MAN_ROOT / name
    source = path.read_bytes()
    if source[:2] == b"\x1f\x8b":
        source = gzip.decompress(source)
    if _is_redirect(source):
        raise ValueError("a redirect (.so) to another page")
    run = subprocess.run(GROFF, input=source, capture_output=True, timeout=120,
                         env={**os.environ, "LC_ALL": "C.UTF-8"})
    if run.returncode != 0:
        raise RuntimeError(f"groff exited with {run.returncode}: {run.stderr.decode(errors='replace')[-200:]}")
    text = run.stdout.decode("utf-8", errors="replace")
    return tidy(re.sub(".\x08", "", text))


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout(f"took over {PYDOC_TIMEOUT} s")


def render_pydoc(name: str) -> str:
    import pydoc

    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(PYDOC_TIMEOUT)
    try:
        with (contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()),
              warnings.catch_warnings()):
            warnings.simplefilter("ignore")
            module = importlib.import_module(name)
            text = pydoc.render_doc(module, renderer=pydoc.plaintext)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return tidy(text)


def render_item(task: tuple[str, str, str]) -> tuple[int, str]:
    """Render one page into its cache file (or a .fail file saying why not) -> (bytes, reason)."""
    kind, name, target = task
    target_path = Path(target)
    try:
        text = render_man(name) if kind == "man" else render_pydoc(name)
        if not text.strip():
            raise ValueError("renders to no text")
    except BaseException as e:  # noqa: BLE001 -- a module may raise anything (SystemExit included) when imported
        if isinstance(e, KeyboardInterrupt):
            raise
        reason = f"{type(e).__name__}: {e}"[:300]
        _write_atomic(target_path.with_suffix(".fail"), reason.encode("utf-8"))
        return 0, reason
    data = text.encode("utf-8")
    _write_atomic(target_path, data)
    return len(data), ""


def page_text(cache: Path, kind: str, name: str, layout: str) -> str:
    """A rendered page's text as the corpus has it (--layout)."""
    text = cache_path(cache, kind, name).read_text(encoding="utf-8")
    return unwrap(text) if layout == "paragraphs" else text


def render_pages(items: Sequence[tuple[str, str]], cache: Path, target: int, threads: int, clock: Clock,
                 layout: str = "paragraphs") -> dict[str, Any]:
    """Render the pages in order until their text (as --layout has it) reaches `target` bytes (or
    all of them), rendering only pages not in the cache.
    -> {"pages": [(kind, name, bytes)...], and counts}."""
    sizes_path = render_folder(cache) / f"sizes-{layout}-{platform.python_version()}.json"
    try:
        known = json.loads(sizes_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        known = {}
    measured = len(known)
    pages: list[tuple[str, str, int]] = []
    total = 0
    rendered = cached = failed = 0
    failures: dict[str, int] = {}
    next_say = time.monotonic() + 10
    pool = None
    i = 0
    try:
        while i < len(items) and total < target:
            mean = total / len(pages) if pages else 8000
            want = int((target - total) / max(mean, 1) * 1.2) + 1
            batch = items[i:i + max(4 * threads, min(want, 64 * threads))]
            i += len(batch)
            sizes: list[int | None] = []
            todo = []
            for kind, name in batch:
                path = cache_path(cache, kind, name)
                if path.is_file():
                    sizes.append(path.stat().st_size)
                    cached += 1
                elif path.with_suffix(".fail").is_file():
                    sizes.append(None)
                    failed += 1
                else:
                    sizes.append(-1)
                    todo.append((len(sizes) - 1, (kind, name, str(path))))
            if todo:
                if pool is None:
                    pool = _fork_pool(threads)
                for (slot, _), (size, reason) in zip(todo, pool.map(render_item, [t for _, t in todo], chunksize=4)):
                    sizes[slot] = size or None
                    if reason:
                        failed += 1
                        kind = batch[slot][0]
                        failures[kind] = failures.get(kind, 0) + 1
                    else:
                        rendered += 1
            for (kind, name), size in zip(batch, sizes):
                if size and total < target:
                    key = f"{kind}:{name}"
                    if key not in known:
                        known[key] = size if layout == "lines" else len(
                            page_text(cache, kind, name, layout).encode("utf-8"))
                    pages.append((kind, name, known[key]))
                    total += known[key]
            if rendered and time.monotonic() > next_say:
                clock.say(f"  rendered {rendered:,} pages so far ({total / 1e6:.1f} MB of text in use)")
                next_say = time.monotonic() + 30
    finally:
        if pool is not None:
            pool.shutdown()
        if len(known) > measured:
            _write_atomic(sizes_path, json.dumps(known).encode("utf-8"))
    by_kind = {k: sum(s for kk, _, s in pages if kk == k) for k in ("man", "pydoc")}
    return {"pages": pages, "bytes": total, "rendered_now": rendered, "from_cache": cached, "failed": failed,
            "failed_now": failures, "man_pages": sum(1 for p in pages if p[0] == "man"),
            "pydoc_modules": sum(1 for p in pages if p[0] == "pydoc"), "man_bytes": by_kind["man"],
            "pydoc_bytes": by_kind["pydoc"], "all_pages": len(items)}


# ---------------------------------------------------------------------------- the corpus
def plan_corpus(pages: Sequence[tuple[str, str, int]], target: int, shard_bytes: int, seed: int, vary: str
                ) -> list[list[tuple[int, int]]]:
    """The documents as (page index, copy) in order, cut into shards of about shard_bytes of text:
    copy 0 is the pages in their order; copy r >= 1 all of them again in another seeded order."""
    shards: list[list[tuple[int, int]]] = [[]]
    total = in_shard = 0
    copy = 0
    while total < target and pages:
        order = list(range(len(pages)))
        if copy:
            random.Random(f"copy-{seed}-{copy}").shuffle(order)
        for index in order:
            kind, name, size = pages[index]
            size += len(copy_title(copy, kind, name)) + 1 if copy else 0
            if in_shard >= shard_bytes:
                shards.append([])
                in_shard = 0
            shards[-1].append((index, copy))
            total += size
            in_shard += size
            if total >= target:
                break
        copy += 1
    return [s for s in shards if s]


def copy_title(copy: int, kind: str, name: str) -> str:
    label = name.rsplit("/", 1)[-1].removesuffix(".gz") if kind == "man" else f"the {name} module"
    return f"Copy {copy} of {label}"


def vary_text(text: str, copy: int, title: str, vary: str, vocab: Sequence[str], seed: int, number: int) -> str:
    """A repeated copy: its title line, and with --vary words VARY_SHARE of its words replaced."""
    if vary == "words" and vocab:
        parts = _WORDS.split(text)  # words at the even places, the whitespace between them kept
        n_words = (len(parts) + 1) // 2
        rng = random.Random(f"{seed}-{copy}-{number}")
        k = int(n_words * VARY_SHARE)
        picks = rng.choices(vocab, k=k)
        for j, word in zip(rng.sample(range(n_words), k), picks):
            if parts[2 * j].isalpha():
                parts[2 * j] = word
        text = "".join(parts)
    return f"{title}\n{text}"


def unwrap(text: str) -> str:
    """Each paragraph on one line, as web text has it: the lines of a block (between blank lines)
    that share their indentation joined by spaces; a change of indentation (an option's tag and its
    description, a heading, an indented example) starts a new line."""
    out: list[str] = []
    indent = -1
    for line in text.split("\n"):
        stripped = line.lstrip(" ")
        if not stripped:
            out.append("")
            indent = -1
            continue
        here = len(line) - len(stripped)
        if here == indent and out and out[-1]:
            out[-1] += " " + stripped
        else:
            out.append(line)
            indent = here
    return "\n".join(out)


def corpus_vocab(pages: Sequence[tuple[str, str, int]], cache: Path) -> list[str]:
    """The words (3 letters or more, as they occur: common ones often) of the first pages."""
    words: list[str] = []
    size = 0
    for kind, name, n in pages:
        words += _LETTERS.findall(page_text(cache, kind, name, "lines"))
        size += n
        if size >= VOCAB_SAMPLE_BYTES or len(words) >= VOCAB_MAX_WORDS:
            break
    return words[:VOCAB_MAX_WORDS]


def write_shard(task: dict) -> dict:
    """Write one shard in each format of task["formats"]: the documents made, then written as they go."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import zstandard

    cache, pages, vocab = Path(task["cache"]), task["pages"], task["vocab"]
    files: dict[str, Path] = {fmt: Path(task["folders"][fmt]) / f"shard-{task['index']:05d}{FORMATS[fmt]}"
                              for fmt in task["formats"]}
    handles: dict[str, Any] = {}
    rows: list[tuple[str, str]] = []
    text_bytes = documents = 0
    schema = pa.schema([("text", pa.string()), ("id", pa.string())])

    def flush_parquet() -> None:
        if rows and "parquet" in handles:
            handles["parquet"].write_table(pa.table({"text": [r[0] for r in rows], "id": [r[1] for r in rows]},
                                                    schema=schema), row_group_size=ROW_GROUP_ROWS)
        rows.clear()

    try:
        for fmt, path in files.items():
            tmp = path.with_name(f".{path.name}.tmp")
            if fmt == "parquet":
                handles[fmt] = pq.ParquetWriter(tmp, schema)
            elif fmt == "jsonl.zst":
                raw = open(tmp, "wb")
                handles[fmt] = (raw, zstandard.ZstdCompressor(level=3).stream_writer(raw))
            else:
                raw = open(tmp, "wb")
                handles[fmt] = (raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6, mtime=0))
        for number, (index, copy) in task["documents"]:
            kind, name, _ = pages[index]
            text = page_text(cache, kind, name, task["layout"])
            if copy:
                text = vary_text(text, copy, copy_title(copy, kind, name), task["vary"], vocab, task["seed"], number)
            text_bytes += len(text.encode("utf-8"))
            documents += 1
            doc_id = f"{kind}:{name}#{copy}"
            if "parquet" in handles:
                rows.append((text, doc_id))
                if len(rows) >= ROW_GROUP_ROWS:
                    flush_parquet()
            if "jsonl.zst" in handles:
                record = {"text": text, "meta": {"source": kind, "name": name, "copy": copy}}
                handles["jsonl.zst"][1].write((json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))
            if "json.gz" in handles:
                url = (f"file://{MAN_ROOT / name}" if kind == "man"
                       else f"https://docs.python.org/3/library/{name}.html")
                record = {"text": text, "timestamp": "2024-01-01T00:00:00Z", "url": f"{url}#copy-{copy}"}
                handles["json.gz"][1].write((json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))
        flush_parquet()
    finally:
        for fmt, handle in handles.items():
            if fmt == "parquet":
                handle.close()
            else:
                handle[1].close()
                handle[0].close()
    sizes = {}
    for fmt, path in files.items():
        os.replace(path.with_name(f".{path.name}.tmp"), path)
        sizes[fmt] = path.stat().st_size
    return {"index": task["index"], "documents": documents, "text_bytes": text_bytes, "file_bytes": sizes}


def prepare_corpus(args, rendered: dict, clock: Clock) -> dict[str, Any]:
    """The corpus in each requested format (written the first time, else from the cache)."""
    pages = rendered["pages"]
    shard_bytes = int(args.shard_mb * 1e6)
    plan = plan_corpus(pages, args.size, shard_bytes, args.seed, args.vary)
    key_data = {"version": CORPUS_VERSION, "render": RENDER_VERSION, "python": platform.python_version(),
                "pages": [f"{k}:{n}:{s}" for k, n, s in pages], "size": args.size, "shard_bytes": shard_bytes,
                "seed": args.seed, "vary": args.vary, "vary_share": VARY_SHARE, "layout": args.layout}
    key = hashlib.sha1(json.dumps(key_data, sort_keys=True).encode()).hexdigest()[:12]
    folder = args.cache / "corpora" / f"{args.size / 1e6:g}MB-{key}"
    folder.mkdir(parents=True, exist_ok=True)
    missing = [fmt for fmt in args.formats if not (folder / f"{fmt}.json").is_file()]
    if missing:
        documents = sum(len(s) for s in plan)
        clock.say(f"writing the corpus: {documents:,} documents in {len(plan)} shards as {', '.join(missing)} "
                  f"into {folder}")
        started = time.monotonic()
        vocab = corpus_vocab(pages, args.cache) if args.vary == "words" else []
        tmp = {fmt: folder / f".tmp-{fmt.replace('.', '-')}" for fmt in missing}
        for path in tmp.values():
            shutil.rmtree(path, ignore_errors=True)
            path.mkdir()
        numbers = 0
        tasks = []
        for index, docs in enumerate(plan):
            tasks.append({"index": index, "documents": list(enumerate(docs, numbers)), "formats": missing,
                          "folders": {fmt: str(p) for fmt, p in tmp.items()}, "cache": str(args.cache),
                          "pages": pages, "vocab": vocab, "vary": args.vary, "seed": args.seed,
                          "layout": args.layout})
            numbers += len(docs)
        with _fork_pool(min(args.threads, len(tasks))) as pool:
            shards = list(pool.map(write_shard, tasks))
        seconds = time.monotonic() - started
        for fmt in missing:
            final = folder / fmt
            shutil.rmtree(final, ignore_errors=True)
            os.replace(tmp[fmt], final)
            meta = {"format": fmt, "folder": str(final), "shards": len(shards),
                    "documents": sum(s["documents"] for s in shards),
                    "text_bytes": sum(s["text_bytes"] for s in shards),
                    "file_bytes": sum(s["file_bytes"][fmt] for s in shards),
                    "write_seconds_all_formats": round(seconds, 2)}
            (folder / f"{fmt}.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        clock.say(f"  written in {seconds:.1f} s")
    formats = {fmt: json.loads((folder / f"{fmt}.json").read_text(encoding="utf-8")) for fmt in args.formats}
    copies = max((c for s in plan for _, c in s), default=0) + 1
    return {"folder": str(folder), "key": key, "documents": sum(len(s) for s in plan), "shards": len(plan),
            "copies": copies, "unique_pages": len(pages), "unique_bytes": rendered["bytes"],
            "text_bytes": next(iter(formats.values()))["text_bytes"], "formats": formats,
            "vary": args.vary, "vary_share": VARY_SHARE if args.vary == "words" else 0.0, "layout": args.layout}


# ---------------------------------------------------------------------------- subprocess runs
class TreeMemory:
    """The peak of the summed resident memory of a process and all its descendants, sampled."""

    def __init__(self, pid: int, every: float = SAMPLE_EVERY):
        import psutil

        self.psutil = psutil
        self.root = psutil.Process(pid)
        self.every = every
        self.peak = 0
        self.peak_processes = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def sample(self) -> None:
        try:
            procs = [self.root, *self.root.children(recursive=True)]
        except self.psutil.Error:
            return
        total = 0
        for proc in procs:
            try:
                total += proc.memory_info().rss
            except self.psutil.Error:
                pass
        self.samples += 1
        if total > self.peak:
            self.peak, self.peak_processes = total, len(procs)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.every)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def run_child(mode: str, job: dict, log: Path, env: dict[str, str], timeout: float) -> dict[str, Any]:
    """This script as a subprocess (`_pipeline` or `_ceiling` JOB.json), its memory sampled; -> its
    result JSON plus rc, wall seconds and peak memory."""
    log.parent.mkdir(parents=True, exist_ok=True)
    job_path = log.with_suffix(".job.json")
    result_path = log.with_suffix(".result.json")
    result_path.unlink(missing_ok=True)
    job_path.write_text(json.dumps({**job, "result": str(result_path)}, indent=2), encoding="utf-8")
    full_env = {**os.environ, **env,
                "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    started = time.monotonic()
    with open(log, "w", encoding="utf-8") as out:
        proc = subprocess.Popen([sys.executable, str(SCRIPT), mode, str(job_path)], cwd=ROOT, env=full_env,
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        memory = TreeMemory(proc.pid)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            rc = proc.wait()
        finally:
            memory.stop()
    wall = time.monotonic() - started
    try:
        result = json.loads(result_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        result = {}
    if rc != 0 and "error" not in result:
        tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-1:] or [""]
        result["error"] = (f"timed out after {timeout:g} s" if wall >= timeout else
                           f"exited with {rc}: {tail[0][:300]}")
    return {**result, "rc": rc, "wall_seconds": round(wall, 3), "peak_rss_bytes": memory.peak,
            "peak_rss_processes": memory.peak_processes, "memory_samples": memory.samples,
            "parent_ru_maxrss_children_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}


class StageLog:
    """The pipeline's progress callback in the child: a line to its log every 10 s of each stage."""

    def __init__(self, name: str):
        self.name = name
        self.last = 0.0
        self.started = time.monotonic()

    def __call__(self, percent: float) -> None:
        pass

    def stage(self, detail: dict) -> None:
        now = time.monotonic()
        if now - self.last >= 10:
            self.last = now
            from trainer.progress import describe_stage

            print(f"[+{now - self.started:7.1f}s] {self.name}: {describe_stage(detail)}", flush=True)


def _workers_kw(fn, workers: int) -> dict:
    return {"workers": workers} if "workers" in inspect.signature(fn).parameters else {}


def _json_safe(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def child_pipeline(job: dict) -> int:
    """discover -> ingest -> train_tokenizer -> encode_corpus on one format's folder, each timed."""
    from dataclasses import fields

    from trainer.prep.corpus import CleaningOptions, ingest
    from trainer.prep.shards import encode_corpus
    from trainer.prep.sources import discover
    from trainer.prep.tokenization import train_tokenizer

    run = Path(job["run"])
    corpus_dir, tok_dir = run / "corpus", run / "tokenizer"
    names = [f.name for f in fields(CleaningOptions)]
    if job["rules"] == ["all"]:
        rules = names
    else:
        unknown = [r for r in job["rules"] if r not in names and r != "none"]
        if unknown:
            raise SystemExit(f"unknown cleaning rule(s) {', '.join(unknown)}; CleaningOptions has {', '.join(names)}")
        rules = [r for r in job["rules"] if r in names]
    options = CleaningOptions(**{r: True for r in rules})
    workers = job["threads"]
    out: dict[str, Any] = {"rules": rules, "rules_available": names,
                           "workers_passed": {"ingest": bool(_workers_kw(ingest, workers)),
                                              "encode_corpus": bool(_workers_kw(encode_corpus, workers))}}
    seconds: dict[str, float] = {}

    cpu: dict[str, float] = {}

    def cpu_seconds() -> float:
        """User + system CPU seconds of this process and of its children that have ended (a stage's
        worker processes end with it)."""
        own, ended = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + ended.ru_utime + ended.ru_stime

    def timed(key: str, fn, *a, **kw):
        print(f"[{time.strftime('%H:%M:%S')}] {key} ...", flush=True)
        t, c = time.perf_counter(), cpu_seconds()
        value = fn(*a, **kw)
        seconds[key] = round(time.perf_counter() - t, 3)
        cpu[key] = round(cpu_seconds() - c, 3)
        print(f"[{time.strftime('%H:%M:%S')}] {key}: {seconds[key]:.1f} s, {cpu[key]:.1f} CPU s", flush=True)
        return value

    sources = timed("discover", discover, [job["folder"]])
    out["sources"] = {"files": len(sources), "bytes": sum(s.bytes for s in sources)}
    result = timed("ingest", ingest, sources, corpus_dir, options=options, progress=StageLog("ingest"),
                   **_workers_kw(ingest, workers))
    tok = timed("tokenizer", train_tokenizer, corpus_dir, tok_dir, algorithm="wordpiece",
                vocab_size=job["vocab_size"])
    enc = timed("encode", encode_corpus, corpus_dir, tok_dir, progress=StageLog("encode"),
                **_workers_kw(encode_corpus, workers))
    stats = dict(result.stats)
    if isinstance(stats.get("input"), dict):
        stats["input"] = {k: v for k, v in stats["input"].items() if k != "files"}
    out.update({
        "seconds": seconds, "cpu_seconds": cpu,
        "ingest_stats": stats, "removed": result.removed,
        "kept_bytes": sum((corpus_dir / f"{s}.txt").stat().st_size for s in ("train", "valid")),
        "train_bytes": (corpus_dir / "train.txt").stat().st_size,
        "sample_bytes": (corpus_dir / "sample.txt").stat().st_size if (corpus_dir / "sample.txt").is_file() else None,
        "tokenizer_stats": {k: v for k, v in tok.items() if k != "examples"},
        "encode_stats": enc,
        "ru_maxrss_self_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "ru_maxrss_children_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
    })
    Path(job["result"]).write_text(json.dumps(_json_safe(out), indent=2), encoding="utf-8")
    return 0


def child_ceiling(job: dict) -> int:
    """The tokenizers library alone: encode_batch over train.txt's lines, 1,000 a batch, timed."""
    import tokenizers
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(job["tokenizer"])
    encode_seconds = 0.0
    text_bytes = lines = tokens = 0
    started = time.perf_counter()

    def batches():
        batch: list[str] = []
        with open(job["text"], encoding="utf-8") as fh:
            for line in fh:
                line = line.strip()
                if line:
                    batch.append(line)
                    if len(batch) == CEILING_BATCH:
                        yield batch
                        batch = []
        if batch:
            yield batch

    for batch in batches():
        t = time.perf_counter()
        encodings = tok.encode_batch(batch, add_special_tokens=False)
        encode_seconds += time.perf_counter() - t
        lines += len(batch)
        text_bytes += sum(len(s.encode("utf-8")) for s in batch)
        tokens += sum(len(e) for e in encodings)
    out = {"encode_seconds": round(encode_seconds, 3),
           "wall_seconds_with_reading": round(time.perf_counter() - started, 3),
           "text_bytes": text_bytes, "lines": lines, "tokens": tokens, "batch": CEILING_BATCH,
           "mb_per_s": text_bytes / 1e6 / encode_seconds if encode_seconds else None,
           "tokenizers": tokenizers.__version__, "RAYON_NUM_THREADS": os.environ.get("RAYON_NUM_THREADS"),
           "TOKENIZERS_PARALLELISM": os.environ.get("TOKENIZERS_PARALLELISM")}
    Path(job["result"]).write_text(json.dumps(out, indent=2), encoding="utf-8")
    return 0


def child_main(mode: str, job_path: str) -> int:
    job = json.loads(Path(job_path).read_text(encoding="utf-8"))
    try:
        return child_pipeline(job) if mode == "_pipeline" else child_ceiling(job)
    except BaseException as e:  # the parent reports the sentence; the traceback stays in the log
        import traceback

        traceback.print_exc()
        message = str(e) if isinstance(e, SystemExit) and not isinstance(e.code, int) else f"{type(e).__name__}: {e}"
        Path(job["result"]).write_text(json.dumps({"error": message[:500]}), encoding="utf-8")
        return 1


# ---------------------------------------------------------------------------- figures
def figures(run: dict, input_bytes: int) -> dict[str, Any]:
    """MB/s per stage (input MB over the stage's seconds) and end to end, from a pipeline run's result."""
    mb = input_bytes / 1e6
    seconds = dict(run.get("seconds", {}))
    stages = (run.get("ingest_stats") or {}).get("stages") or {}
    stage_seconds = {k: (stages.get(k) or {}).get("seconds") for k in ("read_clean", "dedup", "split")}
    stage_seconds.update(tokenizer=seconds.get("tokenizer"), encode=seconds.get("encode"))
    total = sum(seconds.get(k, 0.0) for k in ("discover", "ingest", "tokenizer", "encode"))

    def rate(s):
        return mb / s if s else None

    cpu = run.get("cpu_seconds") or {}
    busy = {k: (cpu[k] / seconds[k] if cpu.get(k) is not None and seconds.get(k) else None)
            for k in ("ingest", "tokenizer", "encode")}
    cpu_total = sum(cpu.get(k, 0.0) for k in ("discover", "ingest", "tokenizer", "encode"))
    busy["all"] = cpu_total / total if cpu and total else None
    return {"input_mb": mb, "stage_seconds": stage_seconds, "total_seconds": round(total, 3),
            "cores_busy": busy,
            "mb_per_s": {k: rate(s) for k, s in stage_seconds.items()},
            "ingest_mb_per_s": rate(seconds.get("ingest")), "end_to_end_mb_per_s": rate(total),
            "kept_share": (run["kept_bytes"] / input_bytes
                           if run.get("kept_bytes") is not None and input_bytes else None)}


def _f(value, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def tables(rows: Sequence[dict], ceiling: dict | None) -> str:
    ceiling_rate = (ceiling or {}).get("mb_per_s")
    rates, secs = [], []
    for row in rows:
        if row["status"] != "ok":
            rates.append([row["format"], _f(row["input_mb"])] + ["-"] * 9 + [_f(row["peak_rss_mb"], 0)])
            secs.append([row["format"]] + ["-"] * 8)
            continue
        fig = row["figures"]
        rates.append([row["format"], _f(fig["input_mb"]), _f(100 * fig["kept_share"], 0) + "%"]
                     + [_f(fig["mb_per_s"][k]) for k, _ in STAGE_COLUMNS]
                     + [_f(fig["end_to_end_mb_per_s"], 2), _f(ceiling_rate, 2), _f(row["ratio"], 2),
                        _f(row["peak_rss_mb"], 0)])
        s = row["seconds"]
        secs.append([row["format"], _f(s.get("discover"), 2)]
                    + [_f(fig["stage_seconds"][k]) for k in ("read_clean", "dedup", "split")]
                    + [_f(s.get("ingest")), _f(s.get("tokenizer")), _f(s.get("encode")), _f(fig["total_seconds"])])
    header = (["format", "MB", "kept"] + [f"{label} MB/s" for _, label in STAGE_COLUMNS]
              + ["end to end MB/s", "ceiling MB/s", "ratio", "peak RSS MB"])
    seconds_header = ["format", "discover s", "read+clean s", "dedup s", "split s", "ingest s", "tokenizer s",
                      "encode s", "total s"]
    busy = [[row["format"]] + [_f(row["figures"]["cores_busy"].get(k), 2)
                               for k in ("ingest", "tokenizer", "encode", "all")]
            for row in rows if row["status"] == "ok" and row["figures"].get("cores_busy", {}).get("all") is not None]
    busy_table = ("\n\n" + markdown_table(["format", "ingest cores busy", "tokenizer cores busy",
                                             "encode cores busy", "end to end cores busy"], busy)) if busy else ""
    return markdown_table(header, rates) + "\n\n" + markdown_table(seconds_header, secs) + busy_table


def _git() -> dict[str, Any]:
    def git(*a):
        run = subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True)
        return run.stdout.strip() if run.returncode == 0 else None

    status = git("status", "--porcelain")
    return {"commit": git("rev-parse", "HEAD"), "changed_files": None if status is None else len(status.splitlines())}


def _versions() -> dict[str, str | None]:
    out = {}
    for name in ("pyarrow", "zstandard", "tokenizers", "psutil", "numpy", "xxhash"):
        try:
            out[name] = importlib.import_module(name).__version__
        except Exception:  # noqa: BLE001
            out[name] = None
    return out


def _memory_total() -> int | None:
    try:
        import psutil

        return psutil.virtual_memory().total
    except Exception:  # noqa: BLE001
        return None


# ---------------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=parse_size, default=parse_size("1GB"),
                   help="the corpus's text (uncompressed), e.g. 1GB, 200MB (default 1GB)")
    p.add_argument("--formats", type=parse_formats, default=list(FORMATS),
                   help=f"comma list of {', '.join(FORMATS)} (default all three)")
    p.add_argument("--shard-mb", type=float, default=64.0, help="text per shard, MB (default 64)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                   help="workers of the pipeline and threads of the ceiling (default: every core)")
    p.add_argument("--vocab-size", type=int, default=30000, help="WordPiece vocabulary (default 30000)")
    p.add_argument("--rules", default="all",
                   help="CleaningOptions fields switched on: all (default), none, or a comma list")
    p.add_argument("--unique-size", type=parse_size, default=None,
                   help="use only the first pages, up to this much text, and repeat them (default: every page)")
    p.add_argument("--vary", choices=("words", "title"), default="words",
                   help="how repeated copies differ (see the module docstring; default words)")
    p.add_argument("--layout", choices=("paragraphs", "lines"), default="paragraphs",
                   help="paragraphs (default): each paragraph of a page on one line; lines: as rendered, 100 columns")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cache", type=Path, default=Path("/tmp/corpus_bench_cache"),
                   help="rendered pages, corpora and the runs' folders (default /tmp/corpus_bench_cache)")
    p.add_argument("--out", type=Path, default=None,
                   help=f"folder for {JSON_NAME} and the runs' logs (default $OUT, else --cache)")
    p.add_argument("--keep", action="store_true", help="keep each run's folder (cleaned text, tokenizer, shards)")
    p.add_argument("--timeout", type=float, default=4 * 3600, help="seconds a run may take (default 4 h)")
    p.add_argument("--prepare-only", action="store_true", help="render the pages and write the corpus, no runs")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["_pipeline"], ["_ceiling"]):
        return child_main(argv[0], argv[1])
    args = build_parser().parse_args(argv)
    if args.threads < 1:
        raise SystemExit("--threads must be 1 or more")
    args.cache = args.cache.resolve()
    out_dir = (args.out or (Path(os.environ["OUT"]) if os.environ.get("OUT") else args.cache)).resolve()
    command = shlex.join([sys.executable, os.path.relpath(SCRIPT, ROOT), *argv])
    clock = Clock()
    clock.say(f"corpus_pipeline: {args.size / 1e6:g} MB of text, formats {', '.join(args.formats)}, "
              f"{args.threads} threads, cache {args.cache}")
    report: dict[str, Any] = {
        "command": command, "cwd": str(ROOT), "started": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "machine": {"cpu_count": os.cpu_count(), "threads": args.threads, "platform": platform.platform(),
                    "python": platform.python_version(), "memory_bytes": _memory_total(),
                    "load_average_start": os.getloadavg()},
        "versions": _versions(), "git": _git(),
    }

    items = page_items(args.seed)
    clock.say(f"rendering pages as needed: {len(items):,} candidates (man pages and stdlib modules)")
    t = time.monotonic()
    rendered = render_pages(items, args.cache, min(args.size, args.unique_size or args.size), args.threads, clock,
                            args.layout)
    render_seconds = time.monotonic() - t
    clock.say(f"  {len(rendered['pages']):,} pages in use, {rendered['bytes'] / 1e6:.1f} MB of text "
              f"({rendered['man_pages']:,} man pages {rendered['man_bytes'] / 1e6:.1f} MB, "
              f"{rendered['pydoc_modules']:,} modules {rendered['pydoc_bytes'] / 1e6:.1f} MB); rendered now "
              f"{rendered['rendered_now']:,} in {render_seconds:.1f} s, {rendered['from_cache']:,} from the cache, "
              f"{rendered['failed']:,} skipped")
    corpus = prepare_corpus(args, rendered, clock)
    report["render"] = {k: v for k, v in rendered.items() if k != "pages"} | {"seconds": round(render_seconds, 2)}
    report["corpus"] = corpus
    clock.say(f"  corpus: {corpus['text_bytes'] / 1e6:.1f} MB of text, {corpus['documents']:,} documents "
              f"({corpus['copies']} cop{'y' if corpus['copies'] == 1 else 'ies'} of {corpus['unique_pages']:,} pages, "
              f"repeats varied: {corpus['vary']}), {corpus['shards']} shards; on disk "
              + ", ".join(f"{fmt} {m['file_bytes'] / 1e6:.1f} MB" for fmt, m in corpus["formats"].items()))
    if args.prepare_only:
        _write_report(out_dir, report, clock)
        return 0

    env = {"RAYON_NUM_THREADS": str(args.threads), "TOKENIZERS_PARALLELISM": "true"}
    logs = out_dir / "corpus_pipeline-logs"
    rows: list[dict] = []
    ceiling: dict | None = None
    rules = ["all"] if args.rules.strip() == "all" else [r.strip() for r in args.rules.split(",") if r.strip()]
    for fmt in args.formats:
        run_dir = args.cache / "runs" / fmt.replace(".", "-")
        shutil.rmtree(run_dir, ignore_errors=True)  # a fresh run: nothing to resume from
        meta = corpus["formats"][fmt]
        clock.say(f"{fmt}: discover -> ingest -> train_tokenizer -> encode_corpus (log {logs / fmt}.log)")
        result = run_child("_pipeline", {"folder": meta["folder"], "run": str(run_dir), "threads": args.threads,
                                         "vocab_size": args.vocab_size, "rules": rules},
                           logs / f"{fmt}.log", env, args.timeout)
        row = {"format": fmt, "input_mb": meta["text_bytes"] / 1e6, "peak_rss_mb": result["peak_rss_bytes"] / 1e6,
               "status": "ok" if result["rc"] == 0 and "error" not in result else "failed", **result}
        if row["status"] == "ok":
            row["figures"] = figures(result, meta["text_bytes"])
            fig = row["figures"]
            clock.say(f"  {fig['total_seconds']:.1f} s, {fig['end_to_end_mb_per_s']:.2f} MB/s end to end, kept "
                      f"{100 * fig['kept_share']:.0f}%, peak RSS {row['peak_rss_mb']:.0f} MB; rules: "
                      f"{', '.join(result['rules']) or 'none'}")
            if ceiling is None:
                clock.say(f"  ceiling: tokenizers' encode_batch on {fmt}'s train.txt, {args.threads} threads")
                ceiling = run_child("_ceiling", {"tokenizer": str(run_dir / "tokenizer" / "tokenizer.json"),
                                                 "text": str(run_dir / "corpus" / "train.txt")},
                                    logs / "ceiling.log", env, args.timeout)
                ceiling["from_format"] = fmt
                if ceiling.get("error"):
                    clock.say(f"  the ceiling failed: {ceiling['error'].splitlines()[0]}")
                else:
                    clock.say(f"  {ceiling['text_bytes'] / 1e6:.1f} MB in {ceiling['encode_seconds']:.1f} s: "
                              f"{ceiling['mb_per_s']:.2f} MB/s")
        else:
            first = (str(result.get("error") or "").splitlines() or [""])[0]
            clock.say(f"  failed: {first} (the log has the rest)")
        rows.append(row)
        if not args.keep:
            shutil.rmtree(run_dir, ignore_errors=True)
        else:
            row["run_folder"] = str(run_dir)
    ceiling_rate = (ceiling or {}).get("mb_per_s")
    for row in rows:
        e2e = (row.get("figures") or {}).get("end_to_end_mb_per_s")
        row["ratio"] = e2e / ceiling_rate if e2e and ceiling_rate else None
    used = next((r["rules"] for r in rows if r.get("rules") is not None), rules)  # as the runs read them
    report.update(rows=rows, ceiling=ceiling, rules=used)
    report["machine"]["load_average_end"] = os.getloadavg()

    print()
    print(f"corpus_pipeline: {corpus['text_bytes'] / 1e6:.1f} MB of text ({corpus['documents']:,} documents: "
          f"{corpus['copies']} cop{'y' if corpus['copies'] == 1 else 'ies'} of {corpus['unique_pages']:,} pages, "
          f"repeats varied: {corpus['vary']}), {args.threads} threads, WordPiece {args.vocab_size:,}")
    print(f"cleaning rules: {', '.join(report['rules']) or 'none'}")
    print(f"command: {command}")
    print()
    print(tables(rows, ceiling))
    print()
    print("MB/s: the input's text MB over each stage's seconds; kept: cleaned text (train + valid) over the input; "
          "ceiling: tokenizers' encode_batch of the first run's train.txt, same threads; ratio: end to end / ceiling "
          "(goal >= 0.8); peak RSS: the run's process tree, summed; cores busy: CPU seconds over wall seconds "
          f"(of {args.threads} threads).")
    _write_report(out_dir, report, clock)
    return 0 if all(r["status"] == "ok" for r in rows) and ceiling and not ceiling.get("error") else 1


def _write_report(out_dir: Path, report: dict, clock: Clock) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / JSON_NAME
    path.write_text(json.dumps(_json_safe(report), indent=2) + "\n", encoding="utf-8")
    clock.say(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
