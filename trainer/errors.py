"""Errors whose message is safe to show a person.

Code in ``trainer`` raises a :class:`UserError` subclass when the cause is something the
user can fix (a bad upload, an impossible setting, a missing checkpoint). The message is
one or two plain sentences that say what is wrong and, where possible, what to do.
Any other exception is a bug and is reported as such by the caller.
"""


class UserError(Exception):
    """A problem the user caused and can fix; ``str(error)`` is shown to them as is."""

    @property
    def message(self) -> str:
        return str(self)


class CorpusError(UserError):
    """The uploaded corpus cannot be used (unreadable, wrong format, too small, ...)."""


class TokenizerError(UserError):
    """The tokenizer cannot be trained, loaded or used with the given settings or files."""


class ConfigError(UserError):
    """A run configuration is invalid or its settings do not go together."""


class InferenceError(UserError):
    """An explorer request cannot be answered (no [MASK], text too long, checkpoint missing)."""


class ExportError(UserError):
    """A checkpoint cannot be exported as asked (its format, its license, its model); the message says why."""


class DatasetError(UserError):
    """A labelled (fine-tuning) dataset cannot be used: unreadable, a bad row, a mapping that
    does not fit the task, too few classes. The message names the row or line at fault."""


MESSAGE_LIMIT = 400  # characters of one error sentence shown anywhere (page, API, socket, CLI)


def bounded(text: str, limit: int = MESSAGE_LIMIT, *, keep_end: int = 0) -> str:
    """``text`` cut to about ``limit`` characters, saying how much was left out: a value the user
    pasted (a 100,000-entry list) must not make the sentence about it as long. ``keep_end`` keeps
    that many characters of the end (the advice that follows the quoted value)."""
    text = str(text)
    if len(text) <= limit:
        return text
    tail = text[-keep_end:] if keep_end else ""
    head = text[: max(0, limit - len(tail))].rstrip()
    return f"{head} … ({len(text) - len(head) - len(tail):,} more characters) {tail}".rstrip()
