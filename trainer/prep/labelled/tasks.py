"""Roles, task types, and the mapping of a file's columns to roles.

A *mapping* is ``{column name: role}``: it says what each column of the upload holds. Columns
left out of it are ignored. A *task type* needs one of a few sets of roles (its *forms*):
classification takes ``text`` and ``label``, or ``sentence1``, ``sentence2`` and ``label``.
The role ``split`` (train / validation / test per row) fits every task. The role ``choices``
(multiple choice) is the one role several columns may share: the choices in the file's column
order (``choice0``, ``choice1``, ... in a CSV), or one column holding the list (JSONL).

:func:`suggest_mapping` guesses a mapping from common header names and :func:`suggest_task`
the task from a mapping (and a few rows, to tell classes from scores); :func:`check_mapping`
says, in one sentence, what is wrong with a mapping for a task.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from trainer.errors import DatasetError

ROLES: tuple[str, ...] = (
    "text", "sentence1", "sentence2", "label", "tokens", "tags", "question", "context", "answers",
    "input", "target", "prompt", "response", "messages", "choices", "split",
)  # fmt: skip
MULTI_COLUMN_ROLES = frozenset({"choices"})  # roles several columns may share (in column order)


@dataclass(frozen=True)
class TaskSpec:
    """One task type: the roles it needs and what its labels are."""

    name: str
    title: str
    forms: tuple[tuple[str, ...], ...]  # each a set of roles that is enough on its own
    labels: str  # "classes" (one per example), "number", "multi" (a list per example), "tags" (per token),
    # "choice" (the right one of each example's choices), "none"
    description: str
    # How a dataset's page charts the labels (its "bins" of scores aside): the chart's heading,
    # what it counts ("{count}": how many labels) and what one count is.
    label_heading: str = "Labels"
    label_counted: str = "{count} labels"
    label_unit: str = "example"
    in_context: bool = False  # texts with one class each: the explorer's prompt builder evaluates them in context

    def label_sentence(self, count: int) -> str:
        """The label chart's sentence up to ", per split": "12 tags, counted per token"."""
        return f"{self.label_counted.format(count=count)}, counted per {self.label_unit}"


TASKS: dict[str, TaskSpec] = {
    spec.name: spec
    for spec in (
        TaskSpec("classification", "Classification", (("text", "label"), ("sentence1", "sentence2", "label")),
                 "classes", "One class per text or per pair of texts (sentiment, topic, entailment).",
                 in_context=True),
        TaskSpec("regression", "Regression", (("text", "label"), ("sentence1", "sentence2", "label")),
                 "number", "One number per text or per pair of texts (similarity scores, ratings)."),
        TaskSpec("multilabel", "Multi-label classification", (("text", "label"),),
                 "multi", "Any number of classes per text: a list, or labels joined by | ; or ,."),
        TaskSpec("token_classification", "Token classification", (("tokens", "tags"),),
                 "tags", "One tag per token (named entities in BIO tags, parts of speech).",
                 label_heading="Tags", label_counted="{count} tags", label_unit="token"),
        TaskSpec("extractive_qa", "Extractive question answering", (("question", "context", "answers"),),
                 "none", "The answer is a span of the context, found by its text and character offset."),
        TaskSpec("text_to_text", "Text to text", (("input", "target"),),
                 "none", "An input text and the text to produce (summaries, translations, T5's tasks)."),
        TaskSpec("sft", "Supervised fine-tuning", (("prompt", "response"), ("messages",)),
                 "none", "Prompts and the responses to learn, or whole chats as lists of {role, content}."),
        TaskSpec("multiple_choice", "Multiple choice",
                 (("context", "question", "choices", "label"), ("context", "choices", "label"),
                  ("question", "choices", "label")),
                 "choice", "A context (or question) and two or more choices, one of them right: the label is its "
                           "index (from 0) or its text. The choices are several columns (choice0, choice1, ...) or "
                           "one column holding a list; every example has as many.",
                 label_heading="The right choice",
                 label_counted="Where the right choice stands (choice 0 is the first)"),
    )
}
TASK_TYPES: tuple[str, ...] = tuple(TASKS)

# Header names that suggest a role, best first; compared after normalise_header(). A name may
# suggest several roles ("answer", "output"): the task that maps the most columns decides.
HEADER_ALIASES: dict[str, tuple[str, ...]] = {
    "text": ("text", "sentence", "review", "content", "document", "comment", "comment_text", "tweet", "body",
             "sms", "utterance", "abstract", "review_text", "headline", "title", "description", "passage"),
    "sentence1": ("sentence1", "premise", "question1", "text1", "text_a", "sentence_a", "s1", "first_sentence",
                  "query", "question"),
    "sentence2": ("sentence2", "hypothesis", "question2", "text2", "text_b", "sentence_b", "s2", "second_sentence",
                  "document", "passage", "sentence", "answer"),
    "label": ("label", "labels", "score", "class", "category", "gold_label", "sentiment", "similarity",
              "relatedness_score", "rating", "stars", "is_duplicate", "intent", "topic", "emotion", "y", "target",
              "tags", "classes", "categories", "topics", "answer_key", "answerkey", "correct", "correct_answer",
              "gold"),
    "tokens": ("tokens", "words", "token", "word"),
    "tags": ("tags", "ner_tags", "ner", "labels", "tag", "pos_tags", "pos"),
    "question": ("question", "query", "q"),
    "context": ("context", "passage", "paragraph", "document", "text", "article"),
    "answers": ("answers", "answer", "answer_text", "a"),
    "input": ("input", "inputs", "source", "src", "article", "document", "text", "sentence"),
    "target": ("target", "targets", "summary", "highlights", "output", "tgt", "reference", "translation"),
    "prompt": ("prompt", "instruction", "question", "query"),
    "response": ("response", "completion", "output", "answer", "chosen", "reply"),
    "messages": ("messages", "conversation", "conversations", "dialog", "dialogue", "chat"),
    "choices": ("choices", "options", "endings", "candidates", "alternatives"),  # + CHOICE_COLUMN names
    "split": ("split", "set", "fold", "partition", "subset"),
}

# One column per choice: choice0, choice_1, option_a, ending2, answer_b ... (after normalise_header).
CHOICE_COLUMN = re.compile(r"(choice|option|ending|candidate|alternative|answer)_?([0-9]|[a-h])")

# The order in which suggest_mapping tries the forms; on a tie (as many columns mapped) the
# first wins, so the more specific tasks come first.
_SUGGESTION_ORDER: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("multiple_choice", ("context", "question", "choices", "label")),
    ("multiple_choice", ("context", "choices", "label")),
    ("multiple_choice", ("question", "choices", "label")),
    ("extractive_qa", ("question", "context", "answers")),
    ("token_classification", ("tokens", "tags")),
    ("sft", ("messages",)),
    ("sft", ("prompt", "response")),
    ("text_to_text", ("input", "target")),
    ("classification", ("sentence1", "sentence2", "label")),
    ("classification", ("text", "label")),
)
MULTILABEL_SEPARATORS = ("|", ";", ",")


def normalise_header(name: str) -> str:
    """Lower case, surrounding blanks dropped, inner spaces, dots and hyphens as underscores."""
    return re.sub(r"[\s.\-]+", "_", str(name).strip().lower())


def suggest_mapping(columns: Sequence[str]) -> dict[str, str]:
    """Guess ``{column: role}`` from the header names (case-insensitive); ``{}`` if nothing fits.

    Every task form is tried; the one that maps the most columns wins, and of those the first
    of question answering, token classification, SFT, text to text, pair classification and
    classification. Within a form, each role takes the column whose name comes first in its
    HEADER_ALIASES. A column named like "split" is added to the winner.
    """
    best: dict[str, str] = {}
    for _task, form in _SUGGESTION_ORDER:
        assigned = _assign(columns, form)
        if assigned is not None and len(assigned) > len(best):
            best = assigned
    if not best:
        return {}
    split = _assign([c for c in columns if c not in best], ("split",))
    return {**best, **(split or {})}


def _assign(columns: Sequence[str], roles: Sequence[str]) -> dict[str, str] | None:
    """Give each role the unused column whose name comes first among its aliases; None when a
    role finds no column."""
    names = {column: normalise_header(column) for column in columns}
    out: dict[str, str] = {}
    for role in roles:
        if role == "choices":
            numbered = [c for c in columns if c not in out and CHOICE_COLUMN.fullmatch(names[c])]
            if len(numbered) >= 2:
                out.update({c: role for c in numbered})
                continue
        aliases = HEADER_ALIASES[role]
        ranked = [(aliases.index(names[c]), i, c) for i, c in enumerate(columns)
                  if c not in out and names[c] in aliases]
        if not ranked:
            return None
        out[min(ranked)[2]] = role
    return out


def suggest_task(mapping: Mapping[str, str], rows: Iterable[Mapping] = ()) -> str | None:
    """The task type a mapping points to, or None.

    Classification, regression and multi-label classification take the same roles; the label
    values of ``rows`` decide: lists or values joined by ``|``, ``;`` or ``,`` (on single texts)
    mean multi-label, numbers with a fractional part mean regression, anything else classes.
    """
    roles = set(mapping.values()) - {"split"}
    if "choices" in roles:
        return "multiple_choice" if "label" in roles and roles & {"context", "question"} else None
    if {"question", "context", "answers"} <= roles:
        return "extractive_qa"
    if {"tokens", "tags"} <= roles:
        return "token_classification"
    if "messages" in roles or {"prompt", "response"} <= roles:
        return "sft"
    if {"input", "target"} <= roles:
        return "text_to_text"
    if "label" not in roles or not ("text" in roles or {"sentence1", "sentence2"} <= roles):
        return None
    label_column = next(column for column, role in mapping.items() if role == "label")
    values = [row.get(label_column) for row in rows]
    values = [v for v in values if v is not None and v != ""]
    if "text" in roles and any(_looks_multilabel(v) for v in values):
        return "multilabel"
    numbers = [_as_number(v) for v in values]
    if values and all(n is not None for n in numbers) and any(n != int(n) for n in numbers):
        return "regression"
    return "classification"


def suggest(columns: Sequence[str], rows: Sequence[Mapping] = ()) -> tuple[dict[str, str], str | None]:
    """:func:`suggest_mapping` and :func:`suggest_task` together: ``(mapping, task or None)``."""
    mapping = suggest_mapping(columns)
    return mapping, suggest_task(mapping, rows)


def _looks_multilabel(value) -> bool:
    if isinstance(value, list):
        return True
    return isinstance(value, str) and (value.lstrip().startswith("[") or any(s in value for s in MULTILABEL_SEPARATORS))


def _as_number(value) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def check_mapping(task: str, mapping: Mapping[str, str], columns: Sequence[str] | None = None, *,
                  where: str = "the file") -> tuple[str, ...]:
    """Check a mapping for a task; return the form it gives (its roles, without ``split``).

    Raises DatasetError for an unknown task or role, a role given to two columns, a mapped
    column that ``columns`` (when given) does not hold, a role the task does not use, or a
    role the task needs that no column gives. ``where`` names what holds ``columns`` in the
    message ("the header (line 1)").
    """
    spec = task_spec(task)
    by_role: dict[str, str] = {}
    for column, role in mapping.items():
        if role not in ROLES:
            raise DatasetError(f'The column "{column}" is mapped to "{role}", which is not a role; the roles are '
                               f"{', '.join(ROLES)}.")
        if role in by_role and role not in MULTI_COLUMN_ROLES:
            raise DatasetError(f'The role {role} is given to two columns, "{by_role[role]}" and "{column}"; '
                               "map each role to one column.")
        by_role.setdefault(role, column)
    if columns is not None:
        for column, role in mapping.items():
            if column not in columns:
                shown = ", ".join(f'"{c}"' for c in columns[:20]) + (", ..." if len(columns) > 20 else "")
                raise DatasetError(f'The column "{column}" (mapped to {role}) is not in {where}; its columns '
                                   f"are {shown}.")
    given = set(by_role) - {"split"}
    for form in spec.forms:
        if set(form) <= given:
            extra = sorted(given - set(form), key=ROLES.index)
            if extra:
                raise DatasetError(f'{spec.title} does not use the role {extra[0]}; unmap the column '
                                   f'"{by_role[extra[0]]}".')
            return form
    needs = ", or ".join(_and(form) for form in spec.forms)
    raise DatasetError(f"{spec.title} needs columns mapped to {needs}; the mapping gives "
                       f"{_and(sorted(given, key=ROLES.index)) if given else 'none of them'}.")


def task_spec(task: str) -> TaskSpec:
    """The TaskSpec of a task type; DatasetError naming the known ones for an unknown name."""
    try:
        return TASKS[task]
    except (KeyError, TypeError):
        raise DatasetError(f'"{task}" is not a task type; choose one of {", ".join(TASK_TYPES)}.') from None


def _and(words: Sequence[str]) -> str:
    words = list(words)
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]
