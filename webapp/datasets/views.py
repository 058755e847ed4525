"""Pages for labelled datasets. Reads go through selectors, writes through services."""
from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from webapp.datasets import display, selectors, services
from webapp.datasets.forms import MAX_LENGTH_DEFAULT, DatasetUploadForm, DemoForm, LengthsForm, MappingForm
from webapp.datasets.models import Dataset
from webapp.datasets.uploads import ACCEPT_ATTRIBUTE, FILE_ACCEPT_ATTRIBUTE, FILE_SUFFIXES, WRONG_TYPE
from webapp.jobs.lifecycle import ActionRefused
from webapp.jobs.models import JobStatus
from webapp.jobs.uploads import form_errors_response, human_bytes, is_xhr
from webapp.runs import results


@login_required
def dataset_list(request: HttpRequest) -> HttpResponse:
    return render(request, "datasets/list.html", {
        "datasets": selectors.datasets_for(request.user),
        "demo_form": DemoForm(),
        "demos": display.demos_json(),
    })


@login_required
@require_http_methods(["GET", "POST"])
def dataset_upload(request: HttpRequest) -> HttpResponse:
    from trainer.errors import DatasetError

    form = DatasetUploadForm(request.POST or None, request.FILES or None)
    if request.method == "POST":
        if form.is_valid():
            uploaded = form.cleaned_data["file"]
            try:
                dataset = services.dataset_create_from_upload(
                    owner=request.user, name=form.cleaned_data["name"], uploaded_file=uploaded,
                    original_filename=uploaded.name, validation_file=form.cleaned_data["validation_file"],
                    test_file=form.cleaned_data["test_file"])
            except DatasetError as error:  # the first rows do not read: nothing was kept
                form.add_error("file", str(error))
            else:
                url = reverse("datasets:detail", args=[dataset.id])
                if is_xhr(request):
                    return JsonResponse({"id": str(dataset.id), "redirect": url}, status=201)
                messages.success(request, f"“{dataset.name}” was uploaded: check the mapping below, then confirm it.")
                return redirect(url)
        if is_xhr(request):
            return form_errors_response(form)
    return render(request, "datasets/upload.html", {
        "form": form,
        "max_bytes": settings.UPLOAD_MAX_BYTES,
        "max_human": human_bytes(settings.UPLOAD_MAX_BYTES),
        "accept": FILE_ACCEPT_ATTRIBUTE,
        "split_accept": ACCEPT_ATTRIBUTE,
        "suffixes": ",".join(FILE_SUFFIXES),
        "wrong_type": WRONG_TYPE.replace("%(name)s", "{name}"),
    }, status=400 if form.errors else 200)


@login_required
@require_POST
def dataset_demo(request: HttpRequest) -> HttpResponse:
    form = DemoForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Choose one of the demo datasets in the list.")
        return redirect("datasets:list")
    dataset = services.dataset_create_demo(owner=request.user, name=form.cleaned_data["demo"])
    messages.success(request, f"“{dataset.name}” is being built from the Python standard library's docstrings.")
    return redirect("datasets:detail", pk=dataset.id)


def _lengths(request: HttpRequest, dataset: Dataset) -> tuple[LengthsForm | None, dict | None, str]:
    """The token-length form and, when a tokenizer is chosen, the histogram (or the sentence why not)."""
    from trainer.errors import UserError

    tokenizers = selectors.ready_tokenizers_for(request.user)
    if dataset.status != JobStatus.READY or not tokenizers.exists():
        return None, None, ""
    if "tokenizer" not in request.GET:
        initial = {"tokenizer": tokenizers.first(), "max_length": MAX_LENGTH_DEFAULT}
        return LengthsForm(tokenizers=tokenizers, initial=initial), None, ""
    form = LengthsForm(request.GET, tokenizers=tokenizers)
    if not form.is_valid():
        return form, None, ""
    try:
        lengths = selectors.length_stats(dataset, form.cleaned_data["tokenizer"], form.cleaned_data["max_length"])
    except UserError as error:
        return form, None, str(error)
    lengths["share_shown"] = f"{round(100 * lengths['truncated_share'], 1):g}%"  # as datasets.js writes it
    return form, lengths, ""


def _dataset_page(request: HttpRequest, dataset: Dataset, mapping_form: MappingForm | None = None,
                  status: int = 200) -> HttpResponse:
    preview = dataset.preview or {}
    can_map = dataset.status in (JobStatus.MAPPING, JobStatus.FAILED) and bool(preview.get("columns"))
    if can_map and mapping_form is None:
        mapping_form = MappingForm(columns=preview["columns"], files=services.split_files(dataset),
                                   initial=MappingForm.initial_for(dataset))
    lengths_form, lengths, lengths_error = _lengths(request, dataset)
    return render(request, "datasets/detail.html", {
        "dataset": dataset,
        "in_flight": dataset.in_flight,
        "size": human_bytes(dataset.size_bytes),
        "mapping_form": mapping_form if can_map else None,
        "columns": preview.get("columns") or [],
        "rows": display.preview_rows(preview),
        "details": display.preview_details(preview),
        "tasks": display.tasks_json(),
        "task_title": display.tasks_json().get(dataset.task, {}).get("title", dataset.task),
        "mapping_rows": display.mapping_rows(dataset.mapping, preview.get("columns") or []),
        "split_summary": display.split_summary(dataset.split_spec),
        "splits": display.split_rows(dataset.sizes, services.split_origins(dataset)),
        "split_files": display.split_file_rows(dataset.files),
        "label_stats": display.label_stats_rows(dataset.label_stats),
        "label_chart": display.label_chart(dataset.task, dataset.label_counts, dataset.labels),
        "in_context": display.in_context(dataset.task),
        "examples": display.example_rows(dataset.examples),
        "lengths_form": lengths_form,
        "lengths": lengths,
        "lengths_error": lengths_error,
        "has_tokenizers": selectors.ready_tokenizers_for(request.user).exists(),
        "leaderboard": results.leaderboard(request.user, dataset),
    }, status=status)


@login_required
def dataset_detail(request: HttpRequest, pk) -> HttpResponse:
    return _dataset_page(request, selectors.dataset_get(request.user, pk))


@login_required
@require_POST
def dataset_mapping(request: HttpRequest, pk) -> HttpResponse:
    from trainer.errors import DatasetError

    dataset = selectors.dataset_get(request.user, pk)
    if dataset.status not in (JobStatus.MAPPING, JobStatus.FAILED):
        messages.error(request, f"“{dataset.name}” is {dataset.get_status_display().lower()}, so its mapping can no "
                                "longer change.")
        return redirect("datasets:detail", pk=dataset.id)
    form = MappingForm(request.POST, columns=(dataset.preview or {}).get("columns") or [],
                       files=services.split_files(dataset))
    if form.is_valid():
        try:
            services.dataset_confirm_mapping(dataset=dataset, **form.choices)
        except ActionRefused as refused:
            messages.error(request, str(refused))
            return redirect("datasets:detail", pk=dataset.id)
        except DatasetError as error:  # the form checks the same; the service never trusts it
            form.add_error(None, str(error))
        else:
            messages.success(request, f"Checking and storing every row of “{dataset.name}”.")
            return redirect("datasets:detail", pk=dataset.id)
    return _dataset_page(request, dataset, mapping_form=form, status=400)


@login_required
@require_http_methods(["GET", "POST"])
def dataset_delete_view(request: HttpRequest, pk) -> HttpResponse:
    dataset = selectors.dataset_get(request.user, pk)
    if request.method == "POST":
        services.dataset_delete(dataset=dataset)
        messages.success(request, f"“{dataset.name}” was deleted.")
        return redirect("datasets:list")
    return render(request, "corpora/confirm_delete.html", {
        "object": dataset, "kind": "dataset", "cancel_url": reverse("datasets:detail", args=[dataset.id]),
        "also": [], "runs": 0,
    })
