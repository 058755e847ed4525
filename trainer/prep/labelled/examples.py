"""From a row as read to a normalised example of a task, checking every value on the way.

The normalised examples (one JSON object per line of ``train.jsonl`` etc.) are, per task:

    classification         {"text", "label"} or {"sentence1", "sentence2", "label"}; label a string
    regression             the same with a float label
    multilabel             {"text", "label": [str, ...]} (possibly empty)
    token_classification   {"tokens": [str, ...], "tags": [str, ...]} of equal length
    extractive_qa          {"id", "question", "context", "answers": [{"text", "answer_start"}, ...]};
                           answers == [] means the context holds no answer (SQuAD 2.0); id is the
                           row's "id" column or field when it has one, else its number (1, 2, ...)
    text_to_text           {"input", "target"}
    sft                    {"prompt", "response"} or {"messages": [{"role", "content"}, ...]}
    multiple_choice        {"context" and/or "question", "choices": [str, ...], "label": int}; label the
                           index (from 0) of the right choice; every example has as many choices

Texts are kept exactly as uploaded (answer offsets count characters of the context).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from trainer import jsonio
from trainer.errors import DatasetError
from trainer.prep.labelled.readers import Row, json_type
from trainer.prep.labelled.tasks import MULTILABEL_SEPARATORS, check_mapping, task_spec

SPLIT_NAMES = {"train": "train", "training": "train", "validation": "validation", "valid": "validation",
               "val": "validation", "dev": "validation", "development": "validation", "test": "test",
               "testing": "test"}
SPLITS = ("train", "validation", "test")
CHAT_ROLES = {"system": "system", "user": "user", "assistant": "assistant", "human": "user", "gpt": "assistant"}
_SHOWN_CHARS = 60


class ExampleBuilder:
    """Builds the examples of one task from rows: ``example, split = builder(row)``.

    ``labels`` (optional) is the label set the user expects: a label outside it is an error.
    ``label_separator`` splits a multi-label string; by default the first of ``|``, ``;``
    and ``,`` found in it. ``split`` is the row's split (train/validation/test) when the
    mapping has a split column, else None.
    """

    def __init__(self, task: str, mapping: Mapping[str, str], *, labels: Sequence[str] | None = None,
                 label_separator: str | None = None):
        self.spec = task_spec(task)
        self.form = check_mapping(task, mapping)
        self.column = {role: column for column, role in mapping.items()}
        self.allowed = None if labels is None else list(dict.fromkeys(str(label).strip() for label in labels))
        if self.allowed is not None:
            if self.spec.labels not in ("classes", "multi", "tags"):
                raise DatasetError(f"{self.spec.title} has no set of labels to check; leave the label set empty.")
            if len(self.allowed) < 2:
                raise DatasetError(f"The label set given ({', '.join(self.allowed) or 'none'}) needs at least two "
                                   "labels.")
        self.separator = label_separator or None
        self.count = 0
        self.choice_columns = [column for column, role in mapping.items() if role == "choices"]
        self.n_choices: tuple[int, str] | None = None  # multiple choice: the first row's count, and its row

    def __call__(self, row: Row) -> tuple[dict[str, Any], str | None]:
        self.count += 1
        split = self._split(row) if "split" in self.column else None
        example: dict[str, Any] = {}
        if "answers" in self.form:  # a question's id: the row's "id" field when it has one, else its number
            qid = row.values.get("id")
            example["id"] = str(self.count) if qid in (None, "") else str(qid)
        for role in self.form:
            example[role] = self._value(row, role, example)
        if "tags" in example:
            if len(example["tokens"]) != len(example["tags"]):
                raise DatasetError(f"{row.where} has {len(example['tokens'])} tokens but {len(example['tags'])} "
                                   "tags; give each token one tag.")
            self._check_allowed(row, example["tags"])
        return example, split

    # --- reading one mapped value ----------------------------------------------------------

    def _value(self, row: Row, role: str, example: dict[str, Any]) -> Any:
        """The value of one role, read as the role (and, for the label, the task's kind of label)
        says: the examples follow the roles of the mapping's form, so a task type is only its
        TaskSpec (forms and label kind), never a case here. `example` holds the roles read so far
        (answers are found in the context, a choice label among the choices: both come after them
        in their forms)."""
        if role in ("tokens", "tags"):
            return self._sequence(row, role)
        if role == "answers":
            return self._answers(row, example["context"])
        if role == "choices":
            return self._choices(row)
        if role == "messages":
            return self._messages(row)
        if role == "label":
            if self.spec.labels == "choice":
                return self._choice_label(row, example["choices"])
            return {"classes": self._class_label, "number": self._number, "multi": self._label_list}[self.spec.labels](row)
        return self._text(row, role)

    def _get(self, row: Row, role: str) -> Any:
        column = self.column[role]
        if column not in row.values:
            raise DatasetError(f'{row.where} has no "{column}" field (mapped to {role}).')
        value = row.values[column]
        if value is None:
            raise DatasetError(f'{row.where} has no {role}: "{column}" is null.')
        return value

    def _text(self, row: Row, role: str) -> str:
        value = self._get(row, role)
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise DatasetError(f'{row.where}: the {role} ("{self.column[role]}") is a JSON {json_type(value)}, '
                               "not text.")
        value = value if isinstance(value, str) else str(value)
        if not value.strip():
            raise DatasetError(f'{row.where} has an empty {role} (column "{self.column[role]}").')
        return value

    def _split(self, row: Row) -> str:
        value = self._get(row, "split")
        name = SPLIT_NAMES.get(str(value).strip().lower())
        if name is None:
            raise DatasetError(f'{row.where} has the split "{_short(str(value))}"; use train, validation (or valid, '
                               "dev) or test.")
        return name

    # --- labels ------------------------------------------------------------------------------

    def _class_label(self, row: Row) -> str:
        value = self._get(row, "label")
        if isinstance(value, (list, dict)):
            raise DatasetError(f"{row.where} has a JSON {json_type(value)} as its label; classification takes one "
                               "label per example (multi-label classification takes lists).")
        label = _label_text(value)
        if not label:
            raise DatasetError(f'{row.where} has an empty label (column "{self.column["label"]}").')
        self._check_allowed(row, [label])
        return label

    def _number(self, row: Row) -> float:
        value = self._get(row, "label")
        number = None
        if not isinstance(value, bool) and isinstance(value, (int, float, str)):
            try:
                number = float(value)
            except ValueError:
                pass
        if number is None or not math.isfinite(number):
            shown = _short(value) if isinstance(value, str) else json.dumps(value)
            raise DatasetError(f'{row.where} has the label "{shown}", which is not a number; regression needs a '
                               "number in every row.")
        return number

    def _label_list(self, row: Row) -> list[str]:
        value = self._get(row, "label")
        if isinstance(value, str) and value.strip().startswith("["):
            value = self._json(row, "label", value)
        if isinstance(value, list):
            items = value
        elif isinstance(value, str):
            separator = self.separator or next((s for s in MULTILABEL_SEPARATORS if s in value), None)
            items = value.split(separator) if separator else [value]
        else:
            items = [value]
        labels = []
        for item in items:
            if isinstance(item, (list, dict)):
                raise DatasetError(f"{row.where} has a JSON {json_type(item)} inside its label list; each label is "
                                   "a string.")
            label = _label_text(item)
            if label and label not in labels:
                labels.append(label)
        self._check_allowed(row, labels)
        return labels

    def _check_allowed(self, row: Row, labels: list[str]) -> None:
        if self.allowed is None:
            return
        for label in labels:
            if label not in self.allowed:
                shown = ", ".join(self.allowed[:12]) + (", ..." if len(self.allowed) > 12 else "")
                raise DatasetError(f'{row.where} has the label "{_short(label)}", which is not one of the labels '
                                   f"given ({shown}).")

    # --- multiple choice ---------------------------------------------------------------------

    def _choices(self, row: Row) -> list[str]:
        """Several columns (in the file's column order), or one holding a list (a JSON list, or a
        string with the choices joined by |)."""
        order = list(row.values)
        columns = sorted(self.choice_columns, key=lambda c: order.index(c) if c in order else len(order))
        if len(columns) == 1:
            value = self._get(row, "choices")
            if isinstance(value, str):
                value = self._json(row, "choices", value) if value.strip().startswith("[") else value.split("|")
            if not isinstance(value, list):
                raise DatasetError(f"{row.where}: the choices are a JSON {json_type(value)}; give a list of texts, "
                                   "or one string with the choices joined by |.")
            values = value
        else:
            for column in columns:
                if column not in row.values:
                    raise DatasetError(f'{row.where} has no "{column}" field (mapped to choices).')
            values = [row.values[column] for column in columns]
        choices = []
        for i, item in enumerate(values):
            if isinstance(item, bool) or not isinstance(item, (str, int, float)) or not str(item).strip():
                raise DatasetError(f"{row.where}: choice {i} is empty or not a text.")
            text = str(item).strip()
            if text in choices:
                raise DatasetError(f'{row.where} has the choice "{_short(text)}" twice (choices {choices.index(text)} '
                                   f"and {i}); each choice must differ, or the label cannot tell which is right.")
            choices.append(text)
        if len(choices) < 2:
            raise DatasetError(f"{row.where} has {len(choices)} choice{'' if len(choices) == 1 else 's'}; "
                               "multiple choice needs at least two per example.")
        if self.n_choices is None:
            self.n_choices = (len(choices), row.where)
        elif len(choices) != self.n_choices[0]:
            raise DatasetError(f"{row.where} has {len(choices)} choices but {self.n_choices[1].lower()} has "
                               f"{self.n_choices[0]}; give every example as many choices.")
        return choices

    def _choice_label(self, row: Row, choices: list[str]) -> int:
        """The index of the right choice: a number (from 0), a choice's text, or a letter (A = 0)."""
        value = self._get(row, "label")
        k = len(choices)
        index = None
        if isinstance(value, bool) or isinstance(value, (list, dict)):
            index = None
        elif isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
            index = int(value)
        elif isinstance(value, str):
            text = value.strip()
            if text in choices:
                return choices.index(text)
            if text.lstrip("-").isdigit():
                index = int(text)
            elif len(text) == 1 and "A" <= text.upper() <= "Z":
                index = ord(text.upper()) - ord("A")
        if index is None:
            shown = _short(value) if isinstance(value, str) else json.dumps(value)
            raise DatasetError(f'{row.where} has the label "{shown}", which is neither the index of a choice (0 to '
                               f"{k - 1}), a letter (A to {chr(ord('A') + k - 1)}) nor the text of one of its "
                               f"{k} choices.")
        if not 0 <= index < k:
            raise DatasetError(f"{row.where} has the label {index}, but its {k} choices are numbered 0 to {k - 1}; "
                               "give the index of the right choice (from 0) or its text.")
        return index

    # --- sequences, answers, chats -----------------------------------------------------------

    def _sequence(self, row: Row, role: str) -> list[str]:
        value = self._get(row, role)
        if isinstance(value, str):
            value = self._json(row, role, value) if value.strip().startswith("[") else value.split()
        if not isinstance(value, list):
            raise DatasetError(f"{row.where}: the {role} are a JSON {json_type(value)}; give a list, or one string "
                               "with the items separated by spaces.")
        items = []
        for i, item in enumerate(value, 1):
            if isinstance(item, bool) or not isinstance(item, (str, int, float)) or not str(item).strip():
                raise DatasetError(f"{row.where}: item {i} of the {role} is empty or not a string.")
            items.append(str(item).strip() if role == "tags" else str(item))
        if not items:
            raise DatasetError(f'{row.where} has no {role} (column "{self.column[role]}").')
        return items

    def _answers(self, row: Row, context: str) -> list[dict]:
        value = self._get(row, "answers")
        if isinstance(value, str):
            if not value.strip():
                return []  # an empty answer cell: no answer in the context
            if value.strip().startswith(("[", "{")):
                value = self._json(row, "answers", value)
            else:  # the answer's text alone: it is where it first occurs
                start = context.find(value)
                if start < 0:
                    raise DatasetError(f'{row.where}: the answer "{_short(value)}" does not occur in the context.')
                return [{"text": value, "answer_start": start}]
        if isinstance(value, dict) and isinstance(value.get("text"), list):  # Hugging Face's squad layout
            starts = value.get("answer_start")
            if not isinstance(starts, list) or len(starts) != len(value["text"]):
                raise DatasetError(f'{row.where}: the answers give {len(value["text"])} texts but not as many '
                                   '"answer_start" offsets.')
            value = [{"text": t, "answer_start": s} for t, s in zip(value["text"], starts)]
        elif isinstance(value, dict):
            value = [value]
        if not isinstance(value, list):
            raise DatasetError(f"{row.where}: the answers are a JSON {json_type(value)}; give a list of "
                               '{"text", "answer_start"} objects.')
        answers = []
        for answer in value:
            text = answer.get("text") if isinstance(answer, dict) else None
            start = answer.get("answer_start") if isinstance(answer, dict) else None
            if not isinstance(text, str) or not text or isinstance(start, bool) or not isinstance(start, int):
                raise DatasetError(f'{row.where} has an answer without a "text" string and an integer '
                                   '"answer_start".')
            if start < 0 or context[start : start + len(text)] != text:
                found = context.find(text)
                where_else = (f"; it occurs at {found}" if found >= 0 else "; it does not occur in the context")
                raise DatasetError(f'{row.where}: the answer "{_short(text)}" is not at answer_start {start} of the '
                                   f'context, which has "{_short(context[max(start, 0) : start + len(text)])}" '
                                   f"there{where_else}.")
            answers.append({"text": text, "answer_start": start})
        return answers

    def _messages(self, row: Row) -> list[dict[str, str]]:
        value = self._get(row, "messages")
        if isinstance(value, str):
            value = self._json(row, "messages", value)
        if not isinstance(value, list) or not value:
            raise DatasetError(f'{row.where}: the messages must be a non-empty list of {{"role", "content"}} '
                               "objects.")
        messages = []
        for i, message in enumerate(value, 1):
            if not isinstance(message, dict):
                raise DatasetError(f"{row.where}: message {i} is a JSON {json_type(message)}, not an object with "
                                   '"role" and "content".')
            role = CHAT_ROLES.get(str(message.get("role", message.get("from", ""))).strip().lower())
            content = message.get("content", message.get("value"))
            if role is None:
                raise DatasetError(f'{row.where}: message {i} has the role "{_short(str(message.get("role")))}"; use '
                                   "system, user or assistant.")
            if not isinstance(content, str) or not content.strip():
                raise DatasetError(f"{row.where}: message {i} has no content.")
            messages.append({"role": role, "content": content})
        if not any(m["role"] == "assistant" for m in messages):
            raise DatasetError(f"{row.where} has no assistant message; fine-tuning learns the assistant's turns.")
        return messages

    def _json(self, row: Row, role: str, text: str) -> Any:
        try:
            return jsonio.loads(text, subject=f'{row.where}: the {role} (column "{self.column[role]}")')
        except jsonio.JsonNestingError as e:
            raise DatasetError(str(e)) from None
        except json.JSONDecodeError as e:
            raise DatasetError(f'{row.where}: the {role} (column "{self.column[role]}") look like JSON but do not '
                               f"parse ({e.msg} at character {e.pos}).") from None


def _label_text(value: Any) -> str:
    """A label as a string: JSON true/false as "true"/"false", 1.0 as "1"."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def _short(text: str) -> str:
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 1] + "…"
