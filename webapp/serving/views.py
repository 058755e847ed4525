"""The page of a checkpoint's model server: Serve, where it stands (followed live by
js/serving.js, which polls the API and reloads the page when the status changes), its address,
the key to send, curl and openai snippets for what it answers, and Stop. All its state is the
row's, so a reload shows the same."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from trainer.errors import UserError
from webapp.accounts.services import api_token_ensure
from webapp.runs import selectors
from webapp.serving import services
from webapp.serving.endpoints import expected_endpoints, shown_endpoints
from webapp.serving.snippets import snippets
from webapp.serving.supervisor import fingerprint


@login_required
@require_http_methods(["GET", "POST"])
def serve_page(request: HttpRequest, checkpoint_id) -> HttpResponse:
    checkpoint = selectors.checkpoint_get(request.user, checkpoint_id)  # another user's: a 404
    if request.method == "POST":
        try:
            _, started = services.serve_start(checkpoint=checkpoint)
        except UserError as e:
            messages.error(request, str(e))
            return render(request, "serving/serve.html", _context(request, checkpoint),
                          status=getattr(e, "status_code", 400))
        messages.success(request, "The server is starting; this page follows it." if started
                         else "This checkpoint's server is already running: here it is.")
        return redirect("serving:page", checkpoint_id=checkpoint.id)
    return render(request, "serving/serve.html", _context(request, checkpoint))


@login_required
@require_POST
def serve_stop(request: HttpRequest, checkpoint_id) -> HttpResponse:
    checkpoint = selectors.checkpoint_get(request.user, checkpoint_id)
    served = services.current(checkpoint)
    if served is not None and served.is_live:
        services.serve_stop(served=served)
        messages.success(request, "The server is stopping.")
    return redirect("serving:page", checkpoint_id=checkpoint.id)


def _context(request: HttpRequest, checkpoint) -> dict:
    served = services.current(checkpoint)
    key = api_token_ensure(user=request.user).key
    endpoints, reported = shown_endpoints(served)
    if not reported:
        endpoints = expected_endpoints(checkpoint)
    base_url = served.base_url if served is not None else ""
    model = served.model_name if served is not None else services.model_name(checkpoint)
    return {
        "checkpoint": checkpoint, "served": served, "token": key, "endpoints": endpoints,
        "endpoints_reported": reported, "base_url": base_url,
        "snippets": snippets(base_url=base_url, key=key, model=model, endpoints=endpoints) if base_url else [],
        "files_present": (checkpoint.folder / "model_config.json").is_file(),
        "key_changed": bool(served is not None and served.is_live and served.key_fingerprint
                            and served.key_fingerprint != fingerprint(key)),
    }
