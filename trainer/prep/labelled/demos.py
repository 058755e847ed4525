"""Demo labelled datasets, one per task type, made offline from the standard library's docstrings.

Each is built from :func:`trainer.prep.demo.demo_docstrings` (the prose paragraphs of about 170
standard-library modules, walked in a fixed order) by a rule stated in :data:`DEMOS`, so it is
the same on every run of a given Python version, needs no download, and takes well under a
second to build. The labels are derived from the text mechanically: they are honest about
what a model could learn from them, not human judgements. :func:`write_demo_dataset` writes
one as a file in an upload format (the extension says which), for ``sniff`` and ``ingest``
to read like any upload.
"""

from __future__ import annotations

import csv
import io
import json
import os
import random
import re
import tempfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trainer.errors import DatasetError
from trainer.prep.demo import DemoDocstring, demo_docstrings
from trainer.prep.sentences import split_sentences

DEMO_SEED = 0
CLASS_PACKAGES = ("asyncio", "email", "http", "logging", "xml")  # the five with the most paragraphs, builtins aside
LONG_WORD = 7  # regression: the share of words of at least this many letters
TOPICS = {  # multi-label: a topic applies when its pattern occurs in the paragraph (ignoring case)
    "returns": r"\breturn(s|ed|ing)?\b",
    "errors": r"\b(raises?|raised|errors?|exceptions?)\b",
    "files": r"\b(files?|paths?|director(y|ies)|filenames?)\b",
    "text": r"\b(strings?|str|bytes|characters?|unicode|text)\b",
    "concurrency": r"\b(threads?|threading|locks?|coroutines?|async|await|event loop|futures?|tasks?)\b",
}
NAME_CHOICES = 4  # multiple choice: the documented object's name and three of other packages
MAX_TOKENS = 80  # token classification: longer paragraphs are left out rather than cut
# Module names that are also English words: tagged MOD only before "module" or "package".
ENGLISH_MODULE_NAMES = frozenset({
    "abc", "ast", "calendar", "code", "email", "logging", "mailbox", "numbers", "operator", "platform", "profile",
    "queue", "random", "secrets", "signal", "socket", "string", "struct", "time", "trace", "types", "warnings",
})  # fmt: skip
_EXCEPTION = re.compile(r"[A-Z]\w*(?:Error|Exception|Warning|Exit|Interrupt|Iteration)")


@dataclass(frozen=True)
class DemoDataset:
    """One demo dataset: its task, the file it is written as, its size and how it was made."""

    name: str
    task: str
    filename: str
    rows: int  # examples on Python 3.11 (other versions' docstrings differ slightly)
    how: str
    build: Callable[[list[DemoDocstring]], str]  # the docstrings -> the file's text




def write_demo_dataset(name: str, out_path: Path) -> Path:
    """Write the demo dataset ``name`` (a key of DEMOS) to ``out_path``, a file or a folder to put
    DEMOS[name].filename in; return the file's path."""
    try:
        demo = DEMOS[name]
    except KeyError:
        raise DatasetError(f'"{name}" is not a demo dataset; choose one of {", ".join(DEMOS)}.') from None
    text = demo.build(demo_docstrings())
    path = Path(out_path)
    if path.is_dir():
        path = path / demo.filename
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".demo-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


# --- paragraphs -------------------------------------------------------------------------------


def _paragraphs(docs: list[DemoDocstring]) -> list[tuple[DemoDocstring, str]]:
    """Each distinct paragraph once, with the first docstring it appears in."""
    seen: set[str] = set()
    out = []
    for doc in docs:
        for paragraph in doc.paragraphs:
            if paragraph not in seen:
                seen.add(paragraph)
                out.append((doc, paragraph))
    return out


def _public(docs: list[DemoDocstring]) -> list[DemoDocstring]:
    """Docstrings of public objects: no part of the dotted name starts with an underscore."""
    return [doc for doc in docs if not any(part.startswith("_") for part in doc.name.split("."))]


def _csv(header: list[str], rows: list[list[str]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


def _tsv(header: list[str], rows: list[list[str]]) -> str:
    assert not any("\t" in cell or "\n" in cell for row in rows for cell in row)  # paragraphs are one line
    return "".join("\t".join(row) + "\n" for row in [header, *rows])


def _jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


# --- one builder per demo ---------------------------------------------------------------------


def _classification(docs: list[DemoDocstring]) -> str:
    rows = [[p, doc.module.split(".")[0]] for doc, p in _paragraphs(docs) if doc.module.split(".")[0] in CLASS_PACKAGES]
    return _csv(["text", "label"], rows)


def _pair_classification(docs: list[DemoDocstring]) -> str:
    rows, seen = [], set()
    for doc in docs:
        if len(doc.paragraphs) < 2 or doc.paragraphs[0] == doc.paragraphs[1]:
            continue
        summary, second = doc.paragraphs[:2]
        if (summary, second) in seen:
            continue
        seen.add((summary, second))
        split = ("validation", "test", *["train"] * 8)[_stable_hash(summary) % 10]  # a summary's pairs in one split
        if _stable_hash(summary + "\n" + second) % 2:
            rows.append([second, summary, "swapped", split])
        else:
            rows.append([summary, second, "in_order", split])
    return _tsv(["sentence1", "sentence2", "label", "split"], rows)


def _stable_hash(text: str) -> int:
    """The same number for the same text in every process and on every machine (unlike hash()), so
    a docstring that one Python version lacks moves no other row to another split or label."""
    return zlib.crc32(text.encode("utf-8"))


def _regression(docs: list[DemoDocstring]) -> str:
    rows = []
    for _, paragraph in _paragraphs(docs)[::2]:
        words = re.findall(r"[A-Za-z]+", paragraph)
        if len(words) >= 8:
            share = sum(len(w) >= LONG_WORD for w in words) / len(words)
            rows.append({"text": paragraph, "score": round(share, 4)})
    return _jsonl(rows)


def _multilabel(docs: list[DemoDocstring]) -> str:
    patterns = {topic: re.compile(pattern, re.IGNORECASE) for topic, pattern in TOPICS.items()}
    rows = []
    for _, paragraph in _paragraphs(docs)[::2]:
        topics = [topic for topic, pattern in patterns.items() if pattern.search(paragraph)]
        if topics:
            rows.append([paragraph, "|".join(topics)])
    return _csv(["text", "labels"], rows)


_SPAN = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*(?:\(\))?|\w+|[^\w\s]")
_PIECES = re.compile(r"\w+|[^\w\s]")


def _token_classification(docs: list[DemoDocstring]) -> str:
    modules = {doc.module for doc in docs} | {doc.module.split(".")[0] for doc in docs}
    sentences = []
    for _, paragraph in _paragraphs(docs):
        spans = _SPAN.findall(paragraph)
        tokens, tags = [], []
        for i, span in enumerate(spans):
            kind = _code_kind(span, spans[i + 1] if i + 1 < len(spans) else "", modules)
            pieces = _PIECES.findall(span)
            tokens.extend(pieces)
            tags.extend(["O"] * len(pieces) if kind is None else [f"B-{kind}"] + [f"I-{kind}"] * (len(pieces) - 1))
        if len(tokens) <= MAX_TOKENS and any(tag != "O" for tag in tags):
            sentences.append("".join(f"{token}\t{tag}\n" for token, tag in zip(tokens, tags)))
    return "\n".join(sentences)


def _code_kind(span: str, following: str, modules: set[str]) -> str | None:
    """"MOD", "EXC", "CODE" or None for one span of _SPAN (see DEMOS["token_classification"])."""
    name = span[:-2] if span.endswith("()") else span
    parts = name.split(".")
    if len(parts) > 1 and all(len(part) <= 1 for part in parts):
        return None  # e.g., i.e
    if name in modules and not span.endswith("()") and (
            len(parts) > 1 or following in ("module", "package") or name not in ENGLISH_MODULE_NAMES):
        return "MOD"
    if _EXCEPTION.fullmatch(name):
        return "EXC"
    if len(parts) > 1 or "_" in name or span.endswith("()") or re.search(r"[a-z][A-Z]", name):
        return "CODE"
    return None


_RETURN = re.compile(r"(?:^|(?<=\. ))Returns? (?P<answer>[^.]{3,160}?)\.(?:\s|$)")
_RAISE = re.compile(r"\b[Rr]aises? (?:an? )?(?P<answer>" + _EXCEPTION.pattern + r")\b")


def _extractive_qa(docs: list[DemoDocstring]) -> str:
    articles: dict[str, list] = {}
    impossible = 0
    for doc in _public(docs):
        if doc.name == doc.module:
            continue  # questions are about functions and classes
        context = "\n\n".join(doc.paragraphs)
        qas = []
        returned, raised = _RETURN.search(context), _RAISE.search(context)
        for kind, match in (("return", returned), ("raise", raised)):
            if match and len(match["answer"].split()) <= 30:
                qas.append({"id": f"{doc.name}:{kind}", "question": f"What does {doc.name} {kind}?",
                            "answers": [{"text": match["answer"], "answer_start": match.start("answer")}],
                            "is_impossible": False})
        if returned and not raised:
            impossible += 1
            if impossible % 2:
                qas.append({"id": f"{doc.name}:raise", "question": f"What does {doc.name} raise?", "answers": [],
                            "is_impossible": True})
        if qas:
            articles.setdefault(doc.module, []).append({"context": context, "qas": qas})
    data = [{"title": module, "paragraphs": paragraphs} for module, paragraphs in articles.items()]
    return json.dumps({"version": "v2.0", "data": data}, ensure_ascii=False, indent=1) + "\n"


def _text_to_text(docs: list[DemoDocstring]) -> str:
    rows = []
    for _, paragraph in _paragraphs(docs)[::2]:
        sentences = split_sentences(paragraph)
        if len(sentences) >= 2:
            rows.append([paragraph, sentences[0]])
    return _tsv(["source", "target"], rows)


def _sft(docs: list[DemoDocstring]) -> str:
    rows = []
    for doc in _public(docs):
        kind = "module" if doc.name == doc.module else "class" if doc.name.split(".")[-1][:1].isupper() else "function"
        prompt = (f"What does the function {doc.name} do?" if kind == "function"
                  else f"What is the {kind} {doc.name} for?")
        rows.append({"prompt": prompt, "response": "\n\n".join(doc.paragraphs[:3])})
    return _jsonl(rows)


def _multiple_choice(docs: list[DemoDocstring]) -> str:
    entries: dict[str, list[tuple[str, str]]] = {package: [] for package in CLASS_PACKAGES}
    for doc, paragraph in _paragraphs(docs):  # (the documented object's dotted name, a paragraph) per package
        package = doc.module.split(".")[0]
        if doc.name != doc.module and package in entries:
            entries[package].append((doc.name, paragraph))
    rng = random.Random(DEMO_SEED)
    rows = []
    for package in CLASS_PACKAGES:
        for name, paragraph in entries[package]:
            others = rng.sample([p for p in CLASS_PACKAGES if p != package], NAME_CHOICES - 1)
            choices = [name, *(entries[other][rng.randrange(len(entries[other]))][0] for other in others)]
            rng.shuffle(choices)
            rows.append([paragraph, *choices, str(choices.index(name))])
    return _csv(["context", *(f"choice{i}" for i in range(NAME_CHOICES)), "label"], rows)


# name -> the demo dataset; each is built by its own function above from the docstrings.
DEMOS: dict[str, DemoDataset] = {
    d.name: d
    for d in (
        DemoDataset("classification", "classification", "stdlib_package.csv", 1012,
                    "CSV text,label: each distinct docstring paragraph of the modules of five packages "
                    f"({', '.join(CLASS_PACKAGES)}), labelled with its package.", _classification),
        DemoDataset("pair_classification", "classification", "stdlib_paragraph_order.tsv", 1397,
                    "TSV sentence1,sentence2,label: sentence-order prediction (ALBERT's SOP) on docstrings: each "
                    "docstring's first paragraph (its summary) and its second paragraph, in that order "
                    '("in_order") or swapped ("swapped"), one distinct pair per line. Which pairs are swapped (about '
                    "one in two) and the split column (about 80 / 10 / 10 of the summaries into train / validation / "
                    "test, every pair of one summary in one split) come from a CRC-32 of the text, the same on "
                    "every machine.", _pair_classification),
        DemoDataset("regression", "regression", "stdlib_long_words.jsonl", 1905,
                    'JSONL text,score: every other paragraph (of at least 8 words); score = the share of its words '
                    f"of {LONG_WORD} letters or more, rounded to 4 decimals (words: runs of letters).", _regression),
        DemoDataset("multilabel", "multilabel", "stdlib_topics.csv", 1211,
                    "CSV text,labels: every other paragraph that matches one of five keyword patterns "
                    f"({', '.join(TOPICS)}: e.g. errors = raise, error or exception), labelled with all the "
                    "topics it matches, joined by |.", _multilabel),
        DemoDataset("token_classification", "token_classification", "stdlib_identifiers.conll", 1550,
                    "CoNLL token/tag: the paragraphs of at most 80 tokens that name code, split into words and "
                    "punctuation and tagged BIO: MOD for a module (a dotted module name, a one-word module name "
                    'that is not also an English word, or any module name before "module" or "package"), EXC for '
                    "an exception class (CamelCase ending in Error, Exception, Warning, ...), CODE for other "
                    "identifiers (dotted, with an underscore, camelCase, or called with ()), O otherwise.", _token_classification),
        DemoDataset("extractive_qa", "extractive_qa", "stdlib_qa.json", 733,
                    "SQuAD 2.0 JSON: one article per module, one paragraph per public function or class "
                    'docstring; "What does NAME return?" answered by the rest of its first "Return(s) ..." '
                    'sentence, "What does NAME raise?" answered by the first exception class after "raise(s)", '
                    'and for one in two docstrings that return but raise nothing, "What does NAME raise?" marked '
                    "is_impossible.", _extractive_qa),
        DemoDataset("text_to_text", "text_to_text", "stdlib_first_sentence.tsv", 734,
                    "TSV source,target: every other paragraph of two sentences or more, and its first sentence "
                    "(a summary-like target taken from the text itself).", _text_to_text),
        DemoDataset("sft", "sft", "stdlib_explain.jsonl", 1871,
                    'JSONL prompt,response: for each public module, class and function, "What does the function '
                    'NAME do?" (or "What is the class NAME for?", "What is the module NAME for?") answered by the '
                    "first three paragraphs of its docstring.", _sft),
        DemoDataset("multiple_choice", "multiple_choice", "stdlib_which_object.csv", 970,
                    "CSV context,choice0..choice3,label: each distinct docstring paragraph of a function, class or "
                    f"method of the five packages ({', '.join(CLASS_PACKAGES)}), and four dotted names to choose "
                    "from: the object it documents and an object of each of three other of those packages (drawn "
                    "with a fixed seed), shuffled; label = the index of the documented one (0 to 3).", _multiple_choice),
    )
}
