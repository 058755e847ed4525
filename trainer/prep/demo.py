"""A demo corpus that needs no download: the docstrings of Python's standard library.

One document per docstring (of a module, class, function or method), each paragraph of
prose on one line, documents separated by a blank line — the ``.txt`` format ``ingest``
reads. Doctest examples, code-like paragraphs, reStructuredText blocks and tiny docstrings
are left out. The module list is fixed and walked in sorted order, so the output is the
same every time for a given Python version (about 1 MB on Python 3.11).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

# Standard-library modules that import without side effects on every platform (a few, like
# builtins and math, are built in: their C-level docstrings are prose too).
DEMO_MODULES = (
    "abc", "argparse", "ast", "asyncio.base_events", "asyncio.events", "asyncio.locks",
    "asyncio.queues", "asyncio.streams", "asyncio.tasks", "base64", "bdb", "builtins", "bz2",
    "calendar", "cmath", "cmd", "code", "codecs", "collections", "collections.abc",
    "concurrent.futures._base", "configparser", "contextlib", "csv", "dataclasses",
    "datetime", "difflib", "dis", "doctest", "email.charset", "email.feedparser",
    "email.header", "email.message", "email.parser", "email.utils", "enum", "fileinput",
    "fractions", "ftplib", "functools", "getopt", "gettext", "gzip", "hashlib", "heapq",
    "hmac", "html.parser", "http.client", "http.cookiejar", "http.cookies", "http.server",
    "imaplib", "importlib.abc", "importlib.metadata", "importlib.util", "inspect", "io",
    "ipaddress", "itertools", "json", "json.decoder", "json.encoder", "linecache", "locale",
    "logging", "logging.config", "logging.handlers", "lzma", "mailbox", "math", "mimetypes",
    "modulefinder", "multiprocessing.connection", "multiprocessing.managers", "netrc",
    "ntpath", "numbers", "operator", "optparse", "os", "pathlib", "pdb", "pickle",
    "pickletools", "pkgutil", "platform", "plistlib", "poplib", "posixpath", "pprint",
    "profile", "pstats", "py_compile", "pyclbr", "queue", "quopri", "random", "re", "runpy",
    "sched", "secrets", "selectors", "shelve", "shlex", "shutil", "signal", "smtplib",
    "socket", "socketserver", "ssl", "statistics", "string", "struct", "subprocess",
    "symtable", "sys", "sysconfig", "tabnanny", "tarfile", "tempfile", "textwrap",
    "threading", "time", "timeit", "tokenize", "trace", "traceback", "tracemalloc", "types",
    "typing", "unicodedata", "unittest.case", "unittest.loader", "unittest.mock",
    "unittest.result", "urllib.parse", "urllib.request", "urllib.robotparser", "uuid",
    "warnings", "weakref", "wsgiref.handlers", "wsgiref.util", "xml.dom.minidom",
    "xml.etree.ElementTree", "xml.sax.handler", "xml.sax.saxutils", "xml.sax.xmlreader",
    "xmlrpc.client", "xmlrpc.server", "zipfile", "zipimport", "zlib",
)  # fmt: skip

MIN_DOC_WORDS = 12  # smaller docstrings ("Return self.") teach nothing
MIN_PARAGRAPH_WORDS = 4
_CODE_CHARS = set("=[]{}<>*#@$%^&|\\~;")  # not () _ `: docstrings name functions in prose
_CODE_START = re.compile(r"^(>>>|\.\.\.|\$ |def |class |import |from \S+ import |return |if |for |@)")
_FIELD_LIST = re.compile(r"^(:\w+|\.\. |[-*+] |\w[\w ,*]*\s+--\s|\w+ *: *$)")


def write_demo_corpus(path: Path) -> Path:
    """Write the demo corpus to ``path`` (a ``.txt`` file, or a folder to put it in)."""
    path = Path(path)
    if path.is_dir():
        path = path / "python_stdlib_docstrings.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".demo-", suffix=".txt", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            for i, doc in enumerate(demo_documents()):
                if i:
                    fh.write("\n")
                fh.write("\n".join(doc) + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def demo_documents() -> list[list[str]]:
    """The demo corpus as documents, each a list of one-line paragraphs."""
    return [doc.paragraphs for doc in demo_docstrings()]


@dataclass(frozen=True)
class DemoDocstring:
    """One document of the demo corpus and where it comes from."""

    module: str  # the module walked, e.g. "email.message"
    name: str  # what the docstring documents: "email.message", "email.message.Message.get_payload"
    paragraphs: list[str]  # its prose paragraphs, one line each


def demo_docstrings() -> list[DemoDocstring]:
    """The demo corpus's documents with the module and object each one documents.

    Docstrings with fewer than MIN_DOC_WORDS words of prose are skipped, and so is a docstring
    whose paragraphs repeat an earlier one's (the first one keeps its name).
    """
    seen: set[str] = set()
    docs = []
    for module, name, docstring in _docstrings():
        paragraphs = _prose_paragraphs(docstring)
        if sum(len(p.split()) for p in paragraphs) < MIN_DOC_WORDS:
            continue
        key = "\n".join(paragraphs)
        if key not in seen:
            seen.add(key)
            docs.append(DemoDocstring(module, name, paragraphs))
    return docs


def _docstrings() -> list[tuple[str, str, str | None]]:
    """(module name, documented object's dotted name, docstring) in a fixed order, as a fresh
    interpreter with nothing but the standard library sees them.

    Walked here, the answer depended on what this process had imported before: other packages
    patch and extend standard-library objects (transformers adds logging.Logger.info_once, torch
    replaces inspect.getfile, typing_extensions typing's helpers), so a worker that had loaded torch
    wrote another demo corpus and other demo datasets than a fresh web process. The walk therefore
    runs in a child started with -I -S (no site-packages, no environment, no user site), once per
    process."""
    return list(_stdlib_docstrings())


@functools.lru_cache(maxsize=1)
def _stdlib_docstrings() -> tuple[tuple[str, str, str | None], ...]:
    code = ("import importlib.util, json, sys\n"
            "spec = importlib.util.spec_from_file_location('_lmwb_demo', sys.argv[1])\n"
            "demo = sys.modules[spec.name] = importlib.util.module_from_spec(spec)\n"
            "spec.loader.exec_module(demo)\n"
            "json.dump([(m, n, d if isinstance(d, str) else None) for m, n, d in demo._walk()], sys.stdout)\n")
    out = subprocess.run([sys.executable, "-I", "-S", "-c", code, __file__], capture_output=True, text=True,
                         encoding="utf-8", check=False)
    if out.returncode != 0:
        raise RuntimeError(f"Could not read the standard library's docstrings in a fresh Python: "
                           f"{out.stderr.strip()[-500:] or f'exit status {out.returncode}'}")
    return tuple((module, name, doc) for module, name, doc in json.loads(out.stdout))


def _walk():
    """(module name, documented object's dotted name, docstring) in a fixed order, as this process
    sees them (run in a fresh interpreter by _docstrings)."""
    with warnings.catch_warnings():  # deprecated modules and attributes warn when touched
        warnings.simplefilter("ignore")
        for name in DEMO_MODULES:
            try:
                module = importlib.import_module(name)
            except Exception:  # an optional C extension is missing (e.g. _ssl): skip it
                continue
            yield name, name, module.__doc__
            for obj_name, obj in _members(module, module.__name__):
                yield name, f"{name}.{obj_name}", obj.__doc__
                if inspect.isclass(obj):
                    for member_name, member in _members(obj, None):
                        yield name, f"{name}.{obj_name}.{member_name}", member.__doc__


def _members(owner, module_name: str | None) -> list[tuple[str, object]]:
    """Routines and classes defined in ``owner`` (a module: not imported ones), by name."""
    out = []
    for name, value in sorted(vars(owner).items()):
        if name.startswith("__") and name != "__init__":  # dunders repeat object's docstrings
            continue
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        if isinstance(value, property):
            value = value.fget
        if not (inspect.isroutine(value) or inspect.isclass(value)):
            continue
        if module_name is not None and getattr(value, "__module__", None) != module_name:
            continue
        out.append((name, value))
    return out


def _prose_paragraphs(docstring: str | None) -> list[str]:
    if not isinstance(docstring, str):
        return []
    paragraphs = []
    for block in re.split(r"\n\s*\n", inspect.cleandoc(docstring)):
        lines = block.split("\n")
        if any(line.startswith((" ", "\t")) for line in lines):
            continue  # indented: code, argument lists, tables
        if any(_CODE_START.match(line) or _FIELD_LIST.match(line) for line in lines):
            continue
        text = " ".join(block.split())
        if len(text.split()) < MIN_PARAGRAPH_WORDS or not text.endswith((".", "?", "!")):
            continue
        if text.endswith("::") or sum(c in _CODE_CHARS for c in text) > 0.06 * len(text):
            continue
        if "{" in text or "}" in text:
            continue
        paragraphs.append(text)
    return paragraphs
