"""Pages: the run list, the launch form (with YAML import), the live dashboard, and actions."""
from __future__ import annotations

import json
import tempfile
import uuid
import zipfile
from importlib import resources

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from trainer.config import RunConfig
from trainer.errors import UserError
from webapp.corpora.models import Tokenizer
from webapp.jobs.models import JobStatus
from webapp.runs import capacity, exports, launch, readiness, results, retention, selectors, services
from webapp.runs.api import NO_PREDICTIONS, config_text, config_yaml_response, export_response, predictions_response
from webapp.runs.forms import FinetuneForm, RunForm, YamlImportForm
from webapp.runs.models import RunStatus
from webapp.runs.templatetags.runs_extras import run_epochs

# The class of a "queued" message: the run page's script takes it away once the run has left the queue.
QUEUED_TAG = "run-queued"


@login_required
def run_list(request: HttpRequest) -> HttpResponse:
    runs = list(selectors.runs_for(request.user))
    return render(request, "runs/list.html", {
        "runs": runs,
        "active": any(r.status in (RunStatus.QUEUED, RunStatus.RUNNING) for r in runs),
    })


@login_required
def run_new(request: HttpRequest) -> HttpResponse:
    import_form = YamlImportForm()
    if request.method == "POST" and "config_file" in request.FILES:
        import_form = YamlImportForm(request.POST, request.FILES)
        form = RunForm(user=request.user, initial=_initial_from_get(request))
        if import_form.is_valid():
            form = RunForm(user=request.user, initial={**form.initial, **_initial_from_config(
                import_form.config, import_form.name, user=request.user)})
            messages.success(request, f"Settings loaded from {import_form.cleaned_data['config_file'].name}. "
                                      "Choose the corpus and tokenizer, check the settings, then launch.")
            import_form = YamlImportForm()
    elif request.method == "POST":
        form = RunForm(request.POST, user=request.user)
        if form.is_valid():
            data = form.cleaned_data
            try:
                run = services.run_create(
                    owner=request.user, name=data["name"], corpus=data["corpus"], tokenizer=data["tokenizer"],
                    family=data["family"], preset=data["preset"], objectives=data["objectives"],
                    training=form.training_settings(), plan=form.plan,
                )
            except UserError as e:
                form.add_error(None, str(e))
            else:
                messages.success(request, f"Run “{run.name}” is queued on the {run.queue} queue.", extra_tags=QUEUED_TAG)
                return redirect("runs:detail", run_id=run.id)
    else:
        form = RunForm(user=request.user, initial=_initial_from_get(request))
    return render(request, "runs/new.html", {
        "form": form, "import_form": import_form, "registry": launch.registry_json(),
        "has_tokenizers": Tokenizer.objects.filter(owner=request.user, status=JobStatus.READY).exists(),
    })


def _initial_from_get(request: HttpRequest) -> dict:
    """?tokenizer=<id> preselects a tokenizer and its corpus; ?from=<run id> copies a run's settings."""
    initial: dict = {}
    if request.GET.get("from"):
        run = selectors.run_get(request.user, request.GET["from"])
        initial.update(_initial_from_config(RunConfig.from_dict(run.config), f"{run.name} (copy)",
                                            user=request.user))
        initial.update(corpus=run.corpus_id, tokenizer=run.tokenizer_id)
    if request.GET.get("tokenizer"):
        tokenizer = Tokenizer.objects.filter(owner=request.user, pk=_uuid_or_none(request.GET["tokenizer"])).first()
        if tokenizer is not None:
            initial.update(corpus=tokenizer.corpus_id, tokenizer=tokenizer.id)
    return initial


def _uuid_or_none(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


def _initial_from_config(config: RunConfig, name: str = "", *, user=None) -> dict:
    values, extra = launch.split_config(config)
    initial = {**values, "extra_settings": json.dumps(extra) if extra else ""}
    if name:
        initial["name"] = name
    if config.teacher_checkpoint and user is not None:  # the teacher's folder -> that checkpoint of yours
        try:
            initial["teacher_checkpoint"] = services.resolve_teacher(owner=user, value=config.teacher_checkpoint).pk
        except UserError:
            pass
    return initial


@login_required
def finetune_new(request: HttpRequest) -> HttpResponse:
    """The fine-tuning form; ?checkpoint=<id> and ?dataset=<id> preselect (from a checkpoint's row
    or a dataset's page), ?technique= picks LoRA or adapters, ?from=<run id> copies a fine-tuning
    run's choices and settings. The settings shown follow those choices (FinetuneForm); a POST with
    "refresh" (the page's "Show the settings for these choices" button, or its script as a choice
    changes) shows the form again for the posted choices, keeping the values given, and launches
    nothing."""
    if request.method == "POST" and request.POST.get("refresh"):
        form = FinetuneForm(user=request.user, initial=_posted_values(request))
    elif request.method == "POST":
        form = FinetuneForm(request.POST, user=request.user)
        if form.is_valid():
            data = form.cleaned_data
            try:
                run = services.finetune_create(owner=request.user, checkpoint=data["checkpoint"],
                                               dataset=data["dataset"], training=form.training_settings(),
                                               name=data["name"], extra_datasets=form.mix_datasets(),
                                               plan=form.plan)
            except UserError as e:
                form.add_error(None, str(e))
            else:
                messages.success(request, f"Fine-tuning run “{run.name}” is queued on the {run.queue} queue.", extra_tags=QUEUED_TAG)
                return redirect("runs:detail", run_id=run.id)
    else:
        form = FinetuneForm(user=request.user, initial=_finetune_initial(request))
    return render(request, "runs/finetune.html", {"form": form, **readiness.form_context(request.user, form)})


@login_required
@require_GET
def finetune_readiness(request: HttpRequest) -> HttpResponse:
    """The fine-tune form's readiness panel for ?checkpoint=<id>&dataset=<id> (templates/runs/
    _readiness.html alone): the form's script fetches it when either choice changes."""
    form = FinetuneForm(user=request.user, initial={k: request.GET.get(k) for k in ("checkpoint", "dataset")})
    return render(request, "runs/_readiness.html", {**readiness.form_context(request.user, form), "fragment": True})


def _posted_values(request: HttpRequest) -> dict:
    """A refreshed form's values: what was posted (the checked extra datasets as a list)."""
    settings = launch.finetune_json()["settings"]
    values = {k: v for k, v in request.POST.items() if k not in ("csrfmiddlewaretoken", "refresh", "shown")}
    values["extra_datasets"] = request.POST.getlist("extra_datasets")
    values.update({n: request.POST.getlist(n) for n, spec in settings.items() if spec.get("multiple")})
    # A box that was shown and is not posted was unticked (not left at its default).
    boxes = [n for n in request.POST.get("shown", "").split() if n not in values]
    values.update({n: False for n in boxes if settings.get(n, {}).get("type") == "bool"})
    return values


def _finetune_initial(request: HttpRequest) -> dict:
    initial: dict = {}
    if request.GET.get("then"):  # ?then=<multi-task run>&dataset=<one of its datasets>: "Fine-tune on one"
        run = selectors.run_get(request.user, request.GET["then"])
        task = next((t for t in services.mix_datasets(run) if t["id"] == request.GET.get("dataset")), None)
        checkpoint = services.handed_on_checkpoint(run)
        if task is not None and task["dataset"] is not None and checkpoint is not None:
            initial.update(services.finetune_on_one_settings(run, task))
            initial.update(checkpoint=checkpoint.pk, dataset=task["dataset"].pk,
                           name=f"{run.name}, then {task['dataset'].name}")
        return initial
    if request.GET.get("from"):
        run = selectors.run_get(request.user, request.GET["from"])
        if run.is_finetune:
            initial.update({k: run.config[k] for k in services.finetune_fields() if k in run.config})
            initial.update(checkpoint=run.base_checkpoint_id, dataset=run.dataset_id, name=f"{run.name} (copy)")
            extras = [e for e in run.config.get("extra_datasets") or [] if isinstance(e, dict)]
            if extras:  # a multi-task run: its extra datasets still yours, with their prefixes
                from webapp.datasets.selectors import datasets_for

                rows = {str(d.pk): d for d in datasets_for(request.user).filter(pk__in=[e.get("id") for e in extras])}
                kept = [(rows[str(e.get("id"))], str(e.get("prefix") or "")) for e in extras if str(e.get("id")) in rows]
                initial["extra_datasets"] = [d.pk for d, _ in kept]
                initial["extra_prefixes"] = "\n".join(f"{d.name} = {prefix.strip()}" for d, prefix in kept)
    for key in ("checkpoint", "dataset"):
        if request.GET.get(key) and _uuid_or_none(request.GET[key]):
            initial[key] = _uuid_or_none(request.GET[key])
    if request.GET.get("technique"):
        initial["technique"] = request.GET["technique"]
    return initial


def batch_summary(config: dict) -> str:
    """"effective batch 64 (16 x 2 x 2 devices)": sequences per update, as the run page shows it."""
    batch, accum, devices = config.get("batch_size"), config.get("grad_accum", 1), config.get("devices", 1)
    if not isinstance(batch, int):
        return ""
    if not isinstance(devices, int):  # "all": known once a worker starts it
        return f"effective batch {batch * accum:,} per device ({batch} x {accum}) x every GPU"
    parts = f"{batch} x {accum}" + (f" x {devices} devices" if devices > 1 else "")
    return f"effective batch {batch * accum * devices:,} ({parts})"


@login_required
def run_detail(request: HttpRequest, run_id) -> HttpResponse:
    run = selectors.run_get(request.user, run_id)
    checkpoints = retention.annotate(run, list(run.checkpoints.order_by("step")))  # size, holds, pinned
    keep_last = retention.keep_last(run)
    log_lines = selectors.log_tail(run)
    charts, stats = selectors.dashboard_specs(run)
    baseline = results.baseline_verdict(run)
    base_record = readiness.record(run.base_checkpoint) if run.is_finetune and run.base_checkpoint_id else None
    return render(request, "runs/detail.html", {
        "run": run,
        "charts": charts,
        "stats": stats,
        "checkpoints": checkpoints,
        "log_lines": log_lines,
        "test_metrics": selectors.test_metrics(run),
        "baseline": baseline,
        "baseline_reference": results.baseline_reference(run),
        "base_record": base_record,
        "advice": results.below_baseline_advice(run, base_record) if baseline and not baseline.get("beats") else [],
        "test_report": selectors.test_report(run),
        "has_predictions": selectors.predictions_file(run, "jsonl") is not None,
        "tracker_logs": selectors.tracker_logs(run),
        "shows_samples": selectors.shows_samples(run),
        "mix_tasks": services.mix_datasets(run),
        "handed_on": services.handed_on_checkpoint(run) if run.config.get("extra_datasets") else None,
        "follow_ups": selectors.follow_ups(run),
        "latest_samples": (selectors.validation_samples(run) or [None])[-1],
        "config_yaml": config_text(run, shown=True),
        "batch": batch_summary(run.config),
        "can_resume": run.status in services.RESUMABLE_STATES and bool(checkpoints),
        "keep_last": keep_last,
        "waiting": capacity.waiting(run),
        "dashboard": {
            "run_id": str(run.id), "status": run.status, "status_label": run.get_status_display(),
            "step": run.current_step, "max_steps": run.max_steps, "error": run.error,
            "epochs": run_epochs(run), "cancel_requested": run.cancel_requested, "finished": run.is_finished,
            "objectives": run.objectives, "last_log_id": log_lines[-1].id if log_lines else 0,
            "keep_last": keep_last,
        },
    })


@login_required
@require_POST
def run_finetune_on(request: HttpRequest, run_id) -> HttpResponse:
    """"Fine-tune on one": a multi-task run's checkpoint fine-tuned on one of its datasets alone."""
    run = selectors.run_get(request.user, run_id)
    try:
        child = services.finetune_on_one(owner=request.user, run=run, dataset_id=request.POST.get("dataset", ""))
    except UserError as e:
        messages.error(request, str(e))
        return redirect("runs:detail", run_id=run.id)
    messages.success(request, f"Fine-tuning run “{child.name}” is queued on the {child.queue} queue.", extra_tags=QUEUED_TAG)
    return redirect("runs:detail", run_id=child.id)


@login_required
@require_POST
def run_cancel(request: HttpRequest, run_id) -> HttpResponse:
    run = selectors.run_get(request.user, run_id)
    try:
        run = services.run_cancel(run=run)
    except UserError as e:
        messages.error(request, str(e))
    else:
        if run.status == RunStatus.CANCELLED:
            messages.success(request, "The run was cancelled before it started.")
        else:
            messages.success(request, "Cancel requested: the run saves a checkpoint and stops.")
    return redirect("runs:detail", run_id=run.id)


@login_required
@require_POST
def checkpoint_pin(request: HttpRequest, checkpoint_id) -> HttpResponse:
    """Pin (pin=1) or unpin (pin=0) a run's checkpoint: retention never removes a pinned one."""
    checkpoint = selectors.checkpoint_get(request.user, checkpoint_id)
    pinned = request.POST.get("pin", "1") != "0"
    try:
        retention.set_pinned(checkpoint, pinned)
    except UserError as e:
        messages.error(request, str(e))
    else:
        messages.success(request, f"Step {checkpoint.step:,} is pinned: it stays whatever keep_last says."
                         if pinned else f"Step {checkpoint.step:,} is no longer pinned: the run's retention may "
                         f"remove it at its next save.")
    if checkpoint.run_id is None:
        return redirect("explorer:index")
    return redirect("runs:detail", run_id=checkpoint.run_id)


@login_required
@require_POST
def run_resume(request: HttpRequest, run_id) -> HttpResponse:
    run = selectors.run_get(request.user, run_id)
    try:
        services.run_resume(run=run)
    except UserError as e:
        messages.error(request, str(e))
    else:
        messages.success(request, "The run is queued again and continues from its last checkpoint.", extra_tags=QUEUED_TAG)
    return redirect("runs:detail", run_id=run.id)


@login_required
@require_POST
def run_clone(request: HttpRequest, run_id) -> HttpResponse:
    run = selectors.run_get(request.user, run_id)
    try:
        clone = services.run_clone(run=run, owner=request.user, name=request.POST.get("name") or None)
    except UserError as e:
        messages.error(request, f"Could not clone the run: {e}")
        return redirect("runs:detail", run_id=run.id)
    messages.success(request, f"Cloned into “{clone.name}”, queued on the {clone.queue} queue.", extra_tags=QUEUED_TAG)
    return redirect("runs:detail", run_id=clone.id)


@login_required
@require_GET
def run_config_yaml(request: HttpRequest, run_id) -> HttpResponse:
    return config_yaml_response(selectors.run_get(request.user, run_id))


@login_required
@require_GET
def run_compare(request: HttpRequest) -> HttpResponse:
    """Two to six of the user's runs (?run=ID&run=ID...): settings side by side, curves overlaid."""
    ids = list(dict.fromkeys(request.GET.getlist("run")))
    runs = [selectors.run_get(request.user, run_id) for run_id in ids]  # another user's id: a 404
    try:
        comparison = results.compare(runs)
    except results.CompareError as e:
        return render(request, "runs/compare.html", {"error": str(e), "runs": runs}, status=400)
    everything = request.GET.get("settings") == "all"  # ?settings=all: the shared settings too
    toggle = request.GET.copy()
    if everything:
        toggle.pop("settings", None)
    else:
        toggle["settings"] = "all"
    shown = results.shown_settings(comparison["settings"], everything=everything)
    return render(request, "runs/compare.html", {
        "comparison": comparison, "runs": runs, "settings": shown, "everything": everything,
        "hidden_settings": len(comparison["settings"]) - len(shown), "toggle_url": f"?{toggle.urlencode()}",
        # the sentence about tokenizers, when a metric on offer is counted per token (the page's
        # script shows it while such a metric is drawn)
        "tokenizer_note": comparison["tokenizer_note"] if any(m["per_token"] for m in comparison["metrics"]) else "",
    })


@login_required
@require_http_methods(["GET", "POST"])
def checkpoint_export(request: HttpRequest, checkpoint_id) -> HttpResponse:
    """A checkpoint's exports, one per format (Hugging Face, ONNX, GGUF): where each stands (a live
    progress bar while a worker makes it), its download once ready, the sentence when it failed or
    why the format cannot hold this checkpoint; POST (format, license) starts one."""
    from webapp.server.storage import StorageFullError

    checkpoint = selectors.checkpoint_get(request.user, checkpoint_id)  # another user's: a 404
    if request.method == "POST":
        fmt, license = request.POST.get("format", "hf"), request.POST.get("license", "other")
        try:
            _, started = exports.export_start(checkpoint=checkpoint, fmt=fmt, license=license)
        except UserError as e:
            messages.error(request, str(e))
            status = 507 if isinstance(e, StorageFullError) else 400
            return render(request, "runs/export.html", _export_context(checkpoint, fmt, license), status=status)
        if started:
            messages.success(request, "The export is queued; this page follows it.")
        return redirect("runs:checkpoint-export", checkpoint_id=checkpoint.id)
    return render(request, "runs/export.html", _export_context(checkpoint, request.GET.get("fmt", "")))


def _export_context(checkpoint, fmt: str = "", license: str = "") -> dict:
    from trainer.model_card import LICENSES

    formats = exports.formats_offered(checkpoint)
    offered = [f["format"] for f in formats if not f["refusal"]]
    return {"checkpoint": checkpoint, "formats": formats,
            "selected": fmt if fmt in offered else (offered[0] if offered else ""),
            "licenses": list(LICENSES.items()), "license": license if license in LICENSES else "other",
            "any_in_flight": any(f["export"] is not None and f["export"].in_flight for f in formats),
            "files_present": (checkpoint.folder / "model.safetensors").is_file()}


@login_required
@require_GET
def checkpoint_export_download(request: HttpRequest, checkpoint_id) -> HttpResponse:
    """The ready export's zip (?fmt=, default hf); while it is not ready, its page (which says
    why) instead."""
    checkpoint = selectors.checkpoint_get(request.user, checkpoint_id)
    fmt = request.GET.get("fmt", "hf")
    try:
        archive = exports.ready_archive(checkpoint, fmt)
    except UserError as e:
        messages.info(request, str(e))
        return redirect("runs:checkpoint-export", checkpoint_id=checkpoint.id)
    return export_response(checkpoint, archive, fmt)


@login_required
@require_GET
def run_predictions(request: HttpRequest, run_id, fmt: str) -> HttpResponse:
    response = predictions_response(selectors.run_get(request.user, run_id), fmt)
    if response is None:
        return render(request, "error.html", {"code": 404, "title": "No predictions", "message": NO_PREDICTIONS},
                      status=404)
    return response


@login_required
@require_GET
def run_tracker_logs(request: HttpRequest, run_id, name: str) -> HttpResponse:
    """What one of the run's trackers (report_to) wrote, as a zip of its folder."""
    run = selectors.run_get(request.user, run_id)
    folder = selectors.tracker_folder(run, name)
    if folder is None:
        return render(request, "error.html", {"code": 404, "title": "No tracker logs",
                                              "message": f"This run has no {name} logs: its report_to did not name "
                                                         f"{name}, or nothing was written yet."}, status=404)
    return FileResponse(zip_folder(folder), content_type="application/zip", as_attachment=True,
                        filename=f"run-{run.id}-{folder.name}.zip")


def zip_folder(folder) -> tempfile.SpooledTemporaryFile:
    """A zip of `folder`, its files under the folder's own name, rewound for reading (in memory
    up to 16 MB, then in a temporary file)."""
    out = tempfile.SpooledTemporaryFile(max_size=16 * 2**20)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_file() and not path.is_symlink():
                archive.write(path, arcname=str(path.relative_to(folder.parent)))
    out.seek(0)
    return out


@require_GET
def plotly_js(request: HttpRequest) -> FileResponse:
    """plotly.js from the plotly Python package's own bundle (no CDN); the URL carries the version."""
    bundle = resources.files("plotly") / "package_data" / "plotly.min.js"
    if not bundle.is_file():
        raise Http404("plotly.js is not bundled with the installed plotly package.")
    response = FileResponse(bundle.open("rb"), content_type="text/javascript; charset=utf-8")
    response["Cache-Control"] = "public, max-age=31536000, immutable"
    return response
