"""Explorer pages: ask checkpoints questions (alone or two side by side), look at a run's masked
batches, import Hugging Face models.

The page shows the tools that fit the chosen checkpoint's family: fill-mask and sentence pairs
for encoders, UniLM's seq2seq, T5's text-to-text and span filling, GPT's generation (streamed
over /ws/explore/generate/) and prompt builder, ELMo's word similarity, the attention viewer for
all but ELMo; for fine-tuned checkpoints classify, tag and answer; for any encoder sentence
embeddings and nearest neighbours within a dataset. With JavaScript the pages ask the JSON API
and draw the answers in place; without it the forms post here and the same answers are rendered
on the page, UniLM's source -> target generation too (the attention heatmaps, XLNet's panel,
charts and streaming need JavaScript).
"""
from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from trainer.errors import UserError
from trainer.finetune import tasks_for_family as finetune_tasks_for
from webapp.corpora.uploads import human_bytes
from webapp.datasets.selectors import dataset_get
from webapp.explorer import imports, incontext, neighbours, services
from webapp.explorer.forms import (
    EXAMPLE_SENTENCE_A, EXAMPLE_SENTENCE_B, EXAMPLE_SPANS, EXAMPLE_WORD, ExploreForm, ImportForm, form_decoding,
)
from webapp.explorer.models import ImportStatus
from webapp.runs.models import Checkpoint
from webapp.runs.selectors import checkpoint_get, checkpoints_for, latest_checkpoint, objective_labels, run_get, runs_for

EXAMPLE_TEXT = "The capital of France is [MASK]."
INSPECT_EXAMPLES = 4
# What the fine-tuned panels start with: like the demo datasets' examples (stdlib docstrings).
DOWNSTREAM_EXAMPLES = {
    "classify": "Return a new dictionary initialized from an optional positional argument.",
    "choose_context": "Return the current working directory as a string.",
    "choices": "getcwd\nchdir\nlistdir\nmkdir",
    "tag": "Use os.path.join to build the path, and catch FileNotFoundError when it is missing.",
    "question": "What does getcwd return?",
    "context": "getcwd() returns a string representing the current working directory. It raises OSError "
               "when the directory has been removed.",
    "sentences": "Return the absolute path of a file.\nGive back the full path of the file.\nOpen a network "
                 "socket to the server.",
    "query": "Return the absolute path of a file.",
}


@login_required
def index(request: HttpRequest) -> HttpResponse:
    selected = compare_to = None
    result = None
    error = ""
    if request.method == "POST":
        form = ExploreForm(request.POST)
        if form.is_valid():
            data = form.cleaned_data
            selected = checkpoint_get(request.user, data["checkpoint"])  # 404 for another user's
            if data.get("compare_with"):
                compare_to = checkpoint_get(request.user, data["compare_with"])
            try:
                result = _answer(data, selected, compare_to, request.user)
            except UserError as e:
                error = str(e)
        elif form.cleaned_data.get("checkpoint"):
            selected = checkpoint_get(request.user, form.cleaned_data["checkpoint"])
    else:
        if request.GET.get("checkpoint"):
            selected = checkpoint_get(request.user, request.GET["checkpoint"])
        else:
            selected = latest_checkpoint(request.user)
        if request.GET.get("compare"):
            compare_to = checkpoint_get(request.user, request.GET["compare"])
        form = ExploreForm(initial={"text": EXAMPLE_TEXT, "top_k": 5,
                                    "checkpoint": selected.id if selected else None,
                                    "compare_with": compare_to.id if compare_to else None,
                                    "prompt": services.checkpoint_prefix(selected) if selected else "",
                                    "span_text": EXAMPLE_SPANS, "sentence_a": EXAMPLE_SENTENCE_A,
                                    "sentence_b": EXAMPLE_SENTENCE_B, "word": EXAMPLE_WORD,
                                    "classify_text": DOWNSTREAM_EXAMPLES["classify"],
                                    "tag_text": DOWNSTREAM_EXAMPLES["tag"],
                                    "choose_context": DOWNSTREAM_EXAMPLES["choose_context"],
                                    "choose_choices": DOWNSTREAM_EXAMPLES["choices"],
                                    "qa_question": DOWNSTREAM_EXAMPLES["question"],
                                    "qa_context": DOWNSTREAM_EXAMPLES["context"], "qa_n_best": 5,
                                    "embed_sentences": DOWNSTREAM_EXAMPLES["sentences"], "embed_pooling": "mean",
                                    "nn_pooling": "mean", "nn_k": 5, "nn_text": DOWNSTREAM_EXAMPLES["query"],
                                    "icl_template": incontext.DEFAULT_TEMPLATE, "icl_k": 2, "icl_index": 0,
                                    "icl_seed": 0, "icl_normalise": True, "icl_kmax": 4, "icl_queries": 20})
    family = services.checkpoint_family(selected) if selected else ""
    kind = services.family_kind(family) if selected else ""
    task = services.checkpoint_task(selected) if selected else ""
    return render(request, "explorer/index.html", {
        "kind": kind,
        # any family with a task to fine-tune on (trainer.finetune.tasks_for_family), not a list of kinds
        "finetunes": bool(family) and bool(finetune_tasks_for(family)),
        "task": task,
        "about": services.checkpoint_about(kind, task),
        "selected_prefix": services.checkpoint_prefix(selected) if selected else "",
        "tool": services.checkpoint_tool(selected) if selected else "",
        "examples": DOWNSTREAM_EXAMPLES,
        "attention_max_tokens": services.ATTENTION_MAX_TOKENS,
        "decoding_fields": [form[name] for name in ExploreForm.DECODING_FIELDS],
        "form": form,
        "groups": _grouped(checkpoints_for(request.user)),
        "selected": selected,
        "compare_to": compare_to,
        "selected_problem": services.checkpoint_problem(selected) if selected else "",
        "result": result,
        "action": request.POST.get("action", ""),
        "error": error,
        "icl_datasets": _classification_datasets(request.user),  # the prompt builder's (GPT checkpoints)
        "nn_datasets": list(neighbours.searchable_datasets(request.user)),
        "nn_indexes": list(neighbours.indexes_for(request.user, selected)) if selected else [],
        "nn_max_texts": neighbours.max_texts(),
    })


def _answer(data: dict, selected: Checkpoint, compare_to: Checkpoint | None, user) -> dict[str, Any]:
    """{"kind": action, "columns": [{"label", "result", "error"}], ...the first answer's keys when alone}."""
    action = data["action"]
    if action == "classify":
        return {"kind": action, **_classify(data, selected, compare_to)}
    if action in DOWNSTREAM_ACTIONS:
        return {"kind": action, **DOWNSTREAM_ACTIONS[action](data, selected, user)}
    if action not in ExploreForm.TASKS:  # generation and ELMo: the first checkpoint only
        return {"kind": action, **_single(action, data, selected)}
    inputs = {k: data.get(k) for k in ("text", "top_k", "text_a", "text_b")}
    if compare_to is None:
        if action == "fill_mask":
            answer = {"masks": services.fill_mask(checkpoint=selected, text=data["text"], top_k=data["top_k"])}
        elif action == "next_sentence":
            answer = services.next_sentence(checkpoint=selected, text_a=data["text_a"], text_b=data["text_b"])
        else:
            answer = services.sentence_order(checkpoint=selected, text_a=data["text_a"], text_b=data["text_b"])
        return {"kind": action, **answer,
                "columns": [{"checkpoint": str(selected.id), "label": selected.label, "result": answer, "error": None}]}
    columns = services.compare(checkpoints=[selected, compare_to], task=ExploreForm.TASKS[action], inputs=inputs)
    return {"kind": action, "columns": columns}


def _single(action: str, data: dict, selected: Checkpoint) -> dict[str, Any]:
    """The answer to a question the compare columns do not cover."""
    decoding = form_decoding(data)
    if action == "text_to_text":
        return services.generate(checkpoint=selected, prompt=data["prompt"], decoding=decoding)
    if action == "generate":
        # The box is offered (and ticked) for SFT checkpoints only; elsewhere a ticked box is not a question.
        chat = bool(data.get("gen_chat")) and services.checkpoint_tool(selected) == "chat"
        out = services.generate(checkpoint=selected, prompt=data["gen_prompt"], decoding=decoding, chat=chat)
        return {**out, "prompt": data["gen_prompt"].strip(), "chat": chat}
    if action == "generate_seq2seq":  # UniLM's target for a source, decoded as the Decoding card says
        return services.generate_target(checkpoint=selected, source=data["source"], decoding=decoding)
    if action == "fill_spans":
        return services.fill_spans(checkpoint=selected, text=data["span_text"], decoding=decoding)
    return services.word_similarity(checkpoint=selected, sentence_a=data["sentence_a"],
                                    sentence_b=data["sentence_b"], word=data["word"])


# ---------------------------------------------------------------------------- fine-tuned and encoder panels
# Without JavaScript their forms post here and the answers are drawn by the template: probabilities
# as a table, entities and the answer marked in the text, similarities as a table.
def _classify(data: dict, selected: Checkpoint, compare_to: Checkpoint | None) -> dict[str, Any]:
    if compare_to is not None:
        return {"columns": services.compare(checkpoints=[selected, compare_to], task="classify", inputs={
            "text": data["classify_text"], "text_b": data.get("classify_text_b") or ""})}
    out = services.classify(checkpoint=selected, text=data["classify_text"], text_b=data.get("classify_text_b") or "")
    return {**out, "columns": [{"checkpoint": str(selected.id), "label": selected.label, "result": out, "error": None}]}


def marked(text: str, spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The text cut into pieces [{"text", "mark": bool, "type"}], the spans (sorted by start, any
    that overlaps an earlier one left out) marked: what the template wraps in <mark>."""
    pieces, at = [], 0
    for span in sorted(spans, key=lambda s: s["start"]):
        start, end = int(span["start"]), int(span["end"])
        if start < at or end <= start:
            continue
        if start > at:
            pieces.append({"text": text[at:start], "mark": False, "type": ""})
        pieces.append({"text": text[start:end], "mark": True, "type": span.get("type", "")})
        at = end
    if at < len(text):
        pieces.append({"text": text[at:], "mark": False, "type": ""})
    return pieces


def _choose(data: dict, selected: Checkpoint, user) -> dict[str, Any]:
    return services.choose(checkpoint=selected, context=data["choose_context"],
                           choices=data["choose_choices"].splitlines())


def _tag(data: dict, selected: Checkpoint, user) -> dict[str, Any]:
    text = data["tag_text"].strip()
    out = services.tag(checkpoint=selected, text=text)
    return {**out, "pieces": marked(text, out["entities"])}


def _qa(data: dict, selected: Checkpoint, user) -> dict[str, Any]:
    context = data["qa_context"].strip()
    out = services.answer(checkpoint=selected, question=data["qa_question"], context=context,
                          n_best=data["qa_n_best"])
    found = out["answer"]
    return {**out, "pieces": marked(context, [found] if found["text"] else [])}


def _embed(data: dict, selected: Checkpoint, user) -> dict[str, Any]:
    out = services.embed(checkpoint=selected, sentences=data["embed_sentences"].splitlines(),
                         pooling=data["embed_pooling"])
    return {**out, "rows": [{"sentence": s, "cells": row} for s, row in zip(out["sentences"], out["similarity"])]}


def _neighbours_index(data: dict, selected: Checkpoint, user) -> dict[str, Any]:
    dataset = dataset_get(user, data["nn_dataset"])  # 404 for another user's
    index = neighbours.index_start(owner=user, checkpoint=selected, dataset=dataset, pooling=data["nn_pooling"])
    index.refresh_from_db()
    return {"index": index}


def _neighbours(data: dict, selected: Checkpoint, user) -> dict[str, Any]:
    dataset = dataset_get(user, data["nn_dataset"])  # 404 for another user's
    return {**neighbours.search(checkpoint=selected, dataset=dataset, pooling=data["nn_pooling"],
                                text=data["nn_text"], k=data["nn_k"]), "dataset_name": dataset.name}


def _icl_settings(data: dict) -> dict[str, Any]:
    return {"template": data["icl_template"], "separator": incontext.DEFAULT_SEPARATOR, "seed": data["icl_seed"],
            "normalise": bool(data.get("icl_normalise"))}


def _prompt_builder(data: dict, selected: Checkpoint, user) -> dict[str, Any]:
    dataset = dataset_get(user, data["icl_dataset"])  # 404 for another user's
    return incontext.score_prompt(checkpoint=selected, dataset=dataset, settings=_icl_settings(data),
                                  k=data["icl_k"], index=data["icl_index"])


def _incontext_accuracy(data: dict, selected: Checkpoint, user) -> dict[str, Any]:
    dataset = dataset_get(user, data["icl_dataset"])  # 404 for another user's
    out = incontext.evaluate(owner=user, checkpoint=selected, dataset=dataset, settings=_icl_settings(data),
                             k_max=data["icl_kmax"], n_queries=data["icl_queries"])
    return {**out, "rows": [(k, f"{100 * a:.1f}%") for k, a in zip(out["k"], out["accuracy"])]}


DOWNSTREAM_ACTIONS = {"choose": _choose, "tag": _tag, "answer": _qa, "embed": _embed,
                      "neighbours_index": _neighbours_index,
                      "neighbours": _neighbours, "prompt_builder": _prompt_builder,
                      "incontext_accuracy": _incontext_accuracy}


def _grouped(checkpoints) -> list[dict[str, Any]]:
    """Option groups for the checkpoint selects: each run (newest first) with its steps (newest
    first), then the imported models. Each option says what the model can answer."""
    groups: dict[Any, dict[str, Any]] = {}
    for ckpt in checkpoints:
        if ckpt.run_id is not None:
            run = ckpt.run
            group = groups.setdefault(run.id, {
                "label": f"{run.name} ({run.get_status_display().lower()}, {run.preset}, "
                         f"{' + '.join(objective_labels(run))})", "imported": False, "items": []})
            objectives = list(run.objectives or [])
        else:
            group = groups.setdefault("imported", {"label": "Imported models", "imported": True, "items": []})
            objectives = services.checkpoint_objectives(ckpt)
        family = services.checkpoint_family(ckpt)
        kind, task = services.family_kind(family), services.checkpoint_task(ckpt)
        group["items"].append({
            "family": family,
            "kind": kind,
            "about": services.checkpoint_about(kind, task),  # the sentence under the select, once chosen
            "checkpoint": ckpt,
            "pair": services.pair_head(objectives),
            "mlm": "mlm" in objectives,
            "task": task,
            "tool": services.checkpoint_tool(ckpt),
            "prefix": services.checkpoint_prefix(ckpt),
            "origin_name": ckpt.run.name if ckpt.run_id else ckpt.label,
            "origin_url": _origin_url(ckpt),
        })
    return list(groups.values())


def _origin_url(ckpt: Checkpoint) -> str:
    if ckpt.run_id is not None:
        return reverse("runs:detail", args=[ckpt.run_id])
    return reverse("explorer:import")


# ---------------------------------------------------------------------------- masking inspector
@login_required
def inspect(request: HttpRequest) -> HttpResponse:
    runs = list(runs_for(request.user))
    run = None
    sample = None
    error = ""
    try:
        seed = max(0, min(int(request.GET.get("seed", 0)), 2**31 - 2))
    except ValueError:
        seed = 0
    if request.GET.get("run"):
        run = run_get(request.user, request.GET["run"])  # 404 for another user's
    elif runs:
        run = runs[0]
    if run is not None:
        try:
            sample = services.inspect_run(run=run, seed=seed, n_examples=INSPECT_EXAMPLES)
        except UserError as e:
            error = str(e)
    return render(request, "explorer/inspect.html", {
        "runs": runs, "run": run, "seed": seed, "sample": sample, "error": error,
        "examples": [{**ex, "groups": _chip_groups(ex["tokens"])} for ex in (sample or {}).get("examples", [])],
        "n_examples": INSPECT_EXAMPLES,
    })


def _chip_groups(tokens: list[dict]) -> list[dict[str, Any]]:
    """Tokens in drawing order: runs of one span (outlined together), single tokens, and a
    boundary marker where the segment changes (static/js/explorer_inspect.js does the same)."""
    groups: list[dict[str, Any]] = []
    for i, tok in enumerate(tokens):
        if i and tok["segment"] != tokens[i - 1]["segment"]:
            groups.append({"boundary": True})
        last = groups[-1] if groups else None
        if tok["span"] is not None and last and last.get("span") == tok["span"]:
            last["tokens"].append(tok)
        else:
            groups.append({"span": tok["span"], "tokens": [tok]})
    return groups


# ---------------------------------------------------------------------------- imports
@login_required
@require_http_methods(["GET", "POST"])
def import_model(request: HttpRequest) -> HttpResponse:
    form = ImportForm(request.POST or None, request.FILES or None)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            upload = form.cleaned_data["file"]
            job = imports.import_create(owner=request.user, name=form.cleaned_data["name"], uploaded_file=upload,
                                        original_filename=upload.name)
            if job.status == ImportStatus.READY:
                messages.success(request, f"“{job.name}” was imported. Ask it something below.")
                return redirect(f"{reverse('explorer:index')}?checkpoint={job.checkpoint_id}")
            if job.status == ImportStatus.FAILED:
                messages.error(request, f"“{job.name}” could not be imported: {job.error}")
            else:
                messages.success(request, f"“{job.name}” was uploaded and is being imported.")
            return redirect("explorer:import")
        status = 400
    from trainer.inference.importing import supported_model_types

    max_bytes = imports.max_archive_bytes()
    return render(request, "explorer/import.html", {
        "supported": supported_model_types(),
        "form": form,
        "imports": imports.imports_for(request.user),
        "max_human": human_bytes(max_bytes),
        "max_bytes": max_bytes,
        "accept": imports.ACCEPT_ATTRIBUTE,
    }, status=status)


@login_required
@require_POST
def import_delete(request: HttpRequest, pk) -> HttpResponse:
    job = imports.import_get(request.user, pk)
    try:
        imports.import_delete(model_import=job)
    except UserError as e:
        messages.error(request, str(e))
    else:
        messages.success(request, f"“{job.name}” was deleted.")
    return redirect("explorer:import")


def _classification_datasets(user):
    """The user's ready classification datasets, newest first: what the prompt builder reads."""
    from webapp.datasets.models import DatasetStatus
    from webapp.datasets.selectors import datasets_for

    from trainer.inference.incontext import DATASET_TASK

    return list(datasets_for(user).filter(status=DatasetStatus.READY, task=DATASET_TASK))
