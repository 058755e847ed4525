"""The explorer's tools: each question the explorer can ask a checkpoint is one ExplorerTool, the only
owner of what the page, the form and the JSON API need to know about it.

Adding a tool is its module (its API view and serializers, its page answer, its ExplorerTool), its
panel template and script, its test, and one line in REGISTRY below. From the registry:
- the JSON API's URLs (api_urls.py: /api/explore/<api.path>, named api-explore-<api.slug>) and
  their OpenAPI entries (the views' @extend_schema);
- the explorer page's panels (index.html includes each tool's `panel`, once, in registry order),
  its scripts (each `script` once) and the page's explorer-tools table (each tool's endpoint and
  compare task, views.index), which the scripts read (Workbench.explorerTools, static/js/common.js);
- the page form (forms.ExploreForm): the actions it accepts, the fields each reads (the others'
  mistakes never block it), what must be typed in, the defaults, the fields a tool brings, and what
  the fields start with (views.index: tools.initial());
- the answer without JavaScript (views.index calls the tool's `page`);
- the comparisons (services.compare, /api/explore/compare/'s tasks): each tool's `compare`.

Which checkpoints a panel shows for is the panel's own (data-kinds, data-tool), as the family's
explorer_kind and the fine-tuning task's explorer_action say.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# name -> "module:ATTRIBUTE" of its ExplorerTool, in the page's order.
REGISTRY: dict[str, str] = {
    "fill_mask": "webapp.explorer.builtin_tools:FILL_MASK",
    "next_sentence": "webapp.explorer.builtin_tools:NEXT_SENTENCE",
    "sentence_order": "webapp.explorer.builtin_tools:SENTENCE_ORDER",
    "generate_seq2seq": "webapp.explorer.builtin_tools:GENERATE_SEQ2SEQ",
    "classify": "webapp.explorer.builtin_tools:CLASSIFY",
    "choose": "webapp.explorer.builtin_tools:CHOOSE",
    "tag": "webapp.explorer.builtin_tools:TAG",
    "answer": "webapp.explorer.builtin_tools:ANSWER",
    "embed": "webapp.explorer.builtin_tools:EMBED",
    "neighbours_index": "webapp.explorer.builtin_tools:NEIGHBOURS_INDEX",
    "neighbours": "webapp.explorer.builtin_tools:NEIGHBOURS",
    "permutation": "webapp.explorer.builtin_tools:PERMUTATION",
    "text_to_text": "webapp.explorer.builtin_tools:TEXT_TO_TEXT",
    "fill_spans": "webapp.explorer.builtin_tools:FILL_SPANS",
    "generate": "webapp.explorer.builtin_tools:GENERATE",
    "word_similarity": "webapp.explorer.builtin_tools:WORD_SIMILARITY",
    "prompt_builder": "webapp.explorer.builtin_tools:PROMPT_BUILDER",
    "incontext_accuracy": "webapp.explorer.builtin_tools:INCONTEXT_ACCURACY",
    "attention": "webapp.explorer.builtin_tools:ATTENTION",
}

# (data, selected checkpoint, compare_to or None, user) -> what the panel draws
PageAnswer = Callable[[dict, Any, Any, Any], dict]


@dataclass(frozen=True)
class ToolApi:
    """A tool's JSON endpoint: POST /api/explore/<path>, named api-explore-<slug>; the page's
    explorer-tools table carries its URL under the tool's name for the tool's script."""
    slug: str
    path: str
    view: type  # a rest_framework APIView (webapp.explorer.api.CheckpointQuestionView for most)

    @property
    def url_name(self) -> str:
        return f"api-explore-{self.slug}"


@dataclass(frozen=True)
class Comparison:
    """How a tool asks each checkpoint of a comparison (POST /api/explore/compare/, and the page's
    columns when "Compare with" is set): `task` is the compare API's name for it, `needs` the
    inputs that must be typed in, `ask(checkpoint, inputs)` what the tool's own endpoint answers
    (without "checkpoint"), or a UserError saying why that checkpoint cannot."""
    task: str
    needs: tuple[str, ...]
    ask: Callable[[Any, dict], dict]


@dataclass(frozen=True)
class ExplorerTool:
    """One question the explorer asks a checkpoint.

    `page` answers the form's action `name` without JavaScript (None: the panel works only with its
    script, as the attention viewer); `fields` are the form fields it reads, `required` the ones that
    must be typed in with the sentence saying so, `defaults` what an empty field means, `initial`
    what its fields start with on the page besides the defaults (an example to try);
    `form_fields()` gives fields of the tool's own to add to the form; `clean(data, form)` checks or
    completes what the rest cannot (T5's task prefix); `compare` says how it asks several checkpoints
    side by side (None: the first checkpoint alone)."""
    name: str
    panel: str
    script: str = ""
    api: ToolApi | None = None
    page: PageAnswer | None = None
    fields: tuple[str, ...] = ()
    required: tuple[tuple[str, str], ...] = ()
    defaults: tuple[tuple[str, Any], ...] = ()
    initial: tuple[tuple[str, Any], ...] = ()
    form_fields: Callable[[], dict[str, Any]] | None = None
    clean: Callable[[dict, Any], None] | None = None
    compare: Comparison | None = None


def get(name: str) -> ExplorerTool:
    module, _, attr = REGISTRY[name].partition(":")
    tool = getattr(importlib.import_module(module), attr)
    if tool.name != name:
        raise ValueError(f"REGISTRY[{name!r}] names the tool {tool.name!r}.")
    return tool


def all_tools() -> list[ExplorerTool]:
    return [get(name) for name in REGISTRY]


def action(name: str) -> ExplorerTool | None:
    """The tool answering the form's action `name`, or None."""
    tool = get(name) if name in REGISTRY else None
    return tool if tool is not None and tool.page is not None else None


def actions() -> list[str]:
    return [t.name for t in all_tools() if t.page is not None]


def with_api() -> list[ExplorerTool]:
    return [t for t in all_tools() if t.api is not None]


def comparisons() -> dict[str, Comparison]:
    """The compare API's tasks (Comparison.task) -> how each asks, in registry order."""
    return {t.compare.task: t.compare for t in all_tools() if t.compare is not None}


def initial() -> dict[str, Any]:
    """What the page's form starts with: every tool's defaults and examples (the first tool to name a
    field gives its value)."""
    values: dict[str, Any] = {}
    for tool in all_tools():
        for name, value in (*tool.defaults, *tool.initial):
            values.setdefault(name, value)
    return values


def _once(values) -> list[str]:
    return list(dict.fromkeys(v for v in values if v))


def panels() -> list[str]:
    """The panel templates, once each, in registry order (several tools may share one)."""
    return _once(t.panel for t in all_tools())


def scripts() -> list[str]:
    """The static scripts, once each; js/explorer.js (checkpoint choice, comparisons) first."""
    return _once(["js/explorer.js", *(t.script for t in all_tools())])
