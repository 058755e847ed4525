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
from webapp.explorer import imports, neighbours, services, tools
from webapp.explorer.forms import ExploreForm, ImportForm
from webapp.jobs.models import JobStatus
from webapp.jobs.uploads import human_bytes
from webapp.runs.models import Checkpoint
from webapp.runs.selectors import checkpoint_get, checkpoints_for, latest_checkpoint, objective_labels, run_get, runs_for

INSPECT_EXAMPLES = 4


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
                tool = tools.action(data["action"])
                result = {"kind": tool.name, **tool.page(data, selected, compare_to, request.user)}
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
        form = ExploreForm(initial={**tools.initial(),  # each tool's defaults and examples
                                    "checkpoint": selected.id if selected else None,
                                    "compare_with": compare_to.id if compare_to else None,
                                    "prompt": services.checkpoint_prefix(selected) if selected else ""})
    family = services.checkpoint_family(selected) if selected else ""
    kind = services.family_kind(family) if selected else ""
    task = services.checkpoint_task(selected) if selected else ""
    return render(request, "explorer/index.html", {
        "kind": kind,
        # any family with a task to fine-tune on (trainer.finetune.tasks_for_family), not a list of kinds
        "finetunes": bool(family) and bool(finetune_tasks_for(family)),
        "task": task,
        "about": services.checkpoint_about(family, task),
        "selected_prefix": services.checkpoint_prefix(selected) if selected else "",
        "tool": services.checkpoint_tool(selected) if selected else "",
        "tool_panels": tools.panels(),  # each tool's panel and script (webapp.explorer.tools)
        "tool_scripts": tools.scripts(),
        # the scripts' table of each tool's endpoint and compare API task (tools.Comparison.task)
        "tool_data": {t.name: {"url": reverse(t.api.url_name), "compare": t.compare.task if t.compare else None}
                      for t in tools.with_api()},
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
            "about": services.checkpoint_about(family, task),  # the sentence under the select, once chosen
            "checkpoint": ckpt,
            "pair": services.pair_head(objectives),
            "judges_next": services.judges_next_sentence(objectives),
            "fills_masks": services.fills_masks(objectives),
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
            if job.status == JobStatus.READY:
                messages.success(request, f"“{job.name}” was imported. Ask it something below.")
                return redirect(f"{reverse('explorer:index')}?checkpoint={job.checkpoint_id}")
            if job.status == JobStatus.FAILED:
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
    from webapp.datasets.selectors import datasets_for

    from trainer.inference.incontext import DATASET_TASK

    return list(datasets_for(user).filter(status=JobStatus.READY, task=DATASET_TASK))
