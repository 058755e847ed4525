"""The chat template of supervised fine-tuning (SFT): how a conversation becomes the text a
causal model reads, and which of it the model learns.

A template is one turn's text with two placeholders, {role} (system, user or assistant) and
{content} (the message); every other character is literal (braces included). A conversation
is its turns written one after the other. The loss covers each assistant turn's content and
the end-of-text token after it, nothing else; at generation time the prompt is every turn
before the last assistant's, then that turn's text up to {content}, and the model writes
until it produces end-of-text.

    pieces = render(messages, template)          # [Piece(text, trained, eos_after), ...]
    prompt = prompt_pieces(messages, template)   # what comes before the last assistant's content

No torch here: the config and the web form check templates with it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from trainer.errors import ConfigError

DEFAULT_CHAT_TEMPLATE = "<|{role}|>\n{content}\n"
CONTENT, ROLE = "{content}", "{role}"
MAX_TEMPLATE = 1000


@dataclass(frozen=True)
class Piece:
    """A stretch of the rendered conversation: trained or not; eos_after: the end-of-text token
    follows it (an assistant's content), trained with it."""

    text: str
    trained: bool = False
    eos_after: bool = False


def check_chat_template(template: object) -> str:
    """The template, or a ConfigError with a sentence saying what is wrong with it."""
    if not isinstance(template, str) or not template.strip():
        raise ConfigError(f"chat_template must be a text with {CONTENT} in it, such as {DEFAULT_CHAT_TEMPLATE!r}.")
    if len(template) > MAX_TEMPLATE:
        raise ConfigError(f"chat_template is {len(template)} characters long; keep it under {MAX_TEMPLATE}.")
    if template.count(CONTENT) != 1:
        raise ConfigError(f"chat_template must hold {CONTENT} exactly once (where each message goes); "
                          f"it holds it {template.count(CONTENT)} times.")
    return template


def messages_of(example: dict) -> list[dict[str, str]]:
    """An SFT example as a conversation: its messages, or [user: prompt, assistant: response]."""
    if "messages" in example:
        return list(example["messages"])
    return [{"role": "user", "content": example["prompt"]}, {"role": "assistant", "content": example["response"]}]


def _turn(template: str, role: str) -> tuple[str, str]:
    before, _, after = template.replace(ROLE, role).partition(CONTENT)
    return before, after


def render(messages: Sequence[dict[str, str]], template: str) -> list[Piece]:
    """The conversation as pieces: assistant contents trained (each followed by end-of-text), the
    rest not."""
    pieces: list[Piece] = []
    for message in messages:
        before, after = _turn(template, message["role"])
        if message["role"] == "assistant":
            pieces += [Piece(before), Piece(message["content"], trained=True, eos_after=True), Piece(after)]
        else:
            pieces.append(Piece(before + message["content"] + after))
    return [p for p in pieces if p.text or p.eos_after]


def last_reply(messages: Sequence[dict[str, str]]) -> int:
    """The index of the last assistant message (every stored SFT example has one)."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i]["role"] == "assistant":
            return i
    raise ValueError("the conversation has no assistant message to learn")


def prompt_pieces(messages: Sequence[dict[str, str]], template: str) -> list[Piece]:
    """What the model is given to write the last assistant message: the turns before it (earlier
    replies with their end-of-text), then that turn's text up to {content}."""
    i = last_reply(messages)
    return [*render(messages[:i], template), Piece(_turn(template, "assistant")[0])]
