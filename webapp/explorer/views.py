"""The explorer page: pick a checkpoint of your runs, fill masks, score sentence pairs.

With JavaScript the page asks the JSON API and draws the answers in place; without it the
form posts here and the same answers are rendered on the page.
"""
from __future__ import annotations

from collections import OrderedDict

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from trainer.errors import UserError
from webapp.explorer import services
from webapp.explorer.forms import ExploreForm
from webapp.runs.selectors import checkpoint_get, checkpoints_for, latest_checkpoint

EXAMPLE_TEXT = "The capital of France is [MASK]."


@login_required
def index(request: HttpRequest) -> HttpResponse:
    selected = None
    result = None
    error = ""
    if request.method == "POST":
        form = ExploreForm(request.POST)
        if form.is_valid():
            data = form.cleaned_data
            selected = checkpoint_get(request.user, data["checkpoint"])  # 404 for another user's
            try:
                if data["action"] == "fill_mask":
                    result = {"kind": "fill_mask",
                              "masks": services.fill_mask(checkpoint=selected, text=data["text"], top_k=data["top_k"])}
                else:
                    result = {"kind": "next_sentence", **services.next_sentence(
                        checkpoint=selected, text_a=data["text_a"], text_b=data["text_b"])}
            except UserError as e:
                error = str(e)
        elif form.cleaned_data.get("checkpoint"):
            selected = checkpoint_get(request.user, form.cleaned_data["checkpoint"])
    else:
        if request.GET.get("checkpoint"):
            selected = checkpoint_get(request.user, request.GET["checkpoint"])
        else:
            selected = latest_checkpoint(request.user)
        form = ExploreForm(initial={"text": EXAMPLE_TEXT, "top_k": 5,
                                    "checkpoint": selected.id if selected else None})
    return render(request, "explorer/index.html", {
        "form": form,
        "groups": _grouped(checkpoints_for(request.user)),
        "selected": selected,
        "selected_gone": bool(selected) and not (selected.folder / "model_config.json").is_file(),
        "result": result,
        "action": request.POST.get("action", ""),
        "error": error,
    })


def _grouped(checkpoints) -> list[tuple]:
    """[(run, [checkpoints, newest first])], runs newest first."""
    groups: OrderedDict = OrderedDict()
    for ckpt in checkpoints:
        groups.setdefault(ckpt.run_id, (ckpt.run, []))[1].append(ckpt)
    return list(groups.values())
