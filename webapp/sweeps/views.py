"""Pages: the sweep list, the sweep form, a sweep's page (trials, charts, best checkpoint), cancel."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from trainer.errors import UserError
from webapp.runs.models import Run
from webapp.sweeps import selectors, services
from webapp.sweeps import space as spaces
from webapp.sweeps.forms import SweepForm


@login_required
def sweep_list(request: HttpRequest) -> HttpResponse:
    return render(request, "sweeps/list.html", {"sweeps": list(selectors.sweeps_for(request.user))})


@login_required
def sweep_new(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        form = SweepForm(request.POST, user=request.user)
        if form.is_valid():
            data = dict(form.cleaned_data)
            try:
                kind, base = services.base_from_run(owner=request.user, run=data.pop("base_run"))
                space = spaces.parse_text(data.pop("space"))
                sweep = services.sweep_create(owner=request.user, kind=kind, base=base, space=space, **data)
            except UserError as e:
                form.add_error(None, str(e))
            else:
                messages.success(request, f"Sweep “{sweep.name}” started: its first trials are queued.")
                return redirect("sweeps:detail", sweep_id=sweep.id)
    else:
        initial = {}
        run = Run.objects.filter(owner=request.user, pk=_uuid(request.GET.get("from"))).first()
        if run is not None:
            initial["base_run"] = run.pk
        form = SweepForm(user=request.user, initial=initial)
    return render(request, "sweeps/new.html", {"form": form, "has_runs": Run.objects.filter(owner=request.user).exists()})


def _uuid(value):
    import uuid

    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


@login_required
def sweep_detail(request: HttpRequest, sweep_id) -> HttpResponse:
    sweep = selectors.sweep_get(request.user, sweep_id)
    trials = selectors.trials_of(sweep)
    names = [e["name"] for e in sweep.space]
    return render(request, "sweeps/detail.html", {
        "sweep": sweep, "rows": [(t, [t.params.get(n, "") for n in names]) for t in trials],
        "best": selectors.best_checkpoint(sweep, trials), "space_text": spaces.to_text(sweep.space), "settings": names,
    })


@login_required
@require_POST
def sweep_cancel(request: HttpRequest, sweep_id) -> HttpResponse:
    sweep = selectors.sweep_get(request.user, sweep_id)
    try:
        services.sweep_cancel(sweep=sweep)
    except UserError as e:
        messages.error(request, str(e))
    else:
        messages.success(request, "Sweep cancelled: no new trial starts, running trials stop after a checkpoint.")
    return redirect("sweeps:detail", sweep_id=sweep.id)
