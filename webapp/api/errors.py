"""Every failure a user can cause becomes a sentence: JSON under /api/, a page elsewhere."""
from __future__ import annotations

import logging

from django.http import Http404, HttpRequest, HttpResponse, HttpResponsePermanentRedirect, JsonResponse
from django.shortcuts import render
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_default_handler

from trainer.errors import MESSAGE_LIMIT, bounded
from webapp.server.storage import DISK_FULL, is_disk_full

log = logging.getLogger(__name__)

NOT_FOUND = "Not found. It does not exist, or it is not yours."
# The Retry-After of a limit's 429 (the run limit, the server limit): when to look again, since a
# place frees when one of the user's runs or servers ends, which no one can say in advance.
LIMIT_RETRY_AFTER_S = 60


# An error body stays small whatever was sent: a 10,000-item list refused item by item gives the
# first few messages, each bounded (trainer.errors.bounded), and a count of the rest.
MESSAGES_SHOWN = 3
FIELDS_SHOWN = 20


def _flatten(detail) -> str:
    """Turn DRF's nested error detail into one readable sentence, bounded."""
    return bounded(_join(detail), 2 * MESSAGE_LIMIT)


def _join(detail) -> str:
    if isinstance(detail, dict):
        parts = []
        for field, value in list(detail.items())[:FIELDS_SHOWN]:
            text = _join(value)
            parts.append(text if field in ("non_field_errors", "detail") else f"{field}: {text}")
        if len(detail) > FIELDS_SHOWN:
            parts.append(f"(and {len(detail) - FIELDS_SHOWN:,} more fields)")
        return " ".join(parts)
    if isinstance(detail, (list, tuple)):
        items = [t for t in (_join(v) for v in detail) if t]
        shown = [bounded(t) for t in items[:MESSAGES_SHOWN]]
        if len(items) > MESSAGES_SHOWN:
            shown.append(f"(and {len(items) - MESSAGES_SHOWN:,} more)")
        return " ".join(shown)
    return bounded(str(detail))


def exception_handler(exc, context):
    from trainer.errors import UserError  # user-caused failures raised by the trainer layer

    if isinstance(exc, UserError):  # a sentence; 400 unless the error says otherwise (429: a limit)
        code = getattr(exc, "status_code", status.HTTP_400_BAD_REQUEST)
        response = Response({"error": bounded(str(exc), 2 * MESSAGE_LIMIT)}, status=code)
        if code == status.HTTP_429_TOO_MANY_REQUESTS:  # every 429 says when to look again (the schema states it)
            response["Retry-After"] = str(getattr(exc, "retry_after_s", LIMIT_RETRY_AFTER_S))
        return response
    if is_disk_full(exc):  # a write (an upload's file, a row) found no space: 507 with a sentence, not a 500
        log.warning("The disk is full: %s %s refused (%s)", context["request"].method, context["request"].path, exc)
        return Response({"error": DISK_FULL}, status=507)
    response = drf_default_handler(exc, context)
    if response is None:
        log.exception("Unhandled API error", exc_info=exc)
        return Response(
            {"error": "Something went wrong on our side. The error has been logged."},
            status=status.HTTP_500_INTERNAL_SERVER_ERROR,
        )
    if isinstance(exc, exceptions.NotAuthenticated):
        message = "Log in, or send 'Authorization: Token <key>' (POST /api/auth/token/ returns your key)."
    elif isinstance(exc, (exceptions.NotFound, Http404)):
        message = NOT_FOUND
    else:
        message = _flatten(response.data)
    body = {"error": message}
    if isinstance(exc, exceptions.ValidationError) and isinstance(response.data, dict):
        body["fields"] = field_messages(response.data)
    response.data = body
    return response


def field_messages(detail, prefix: str = "") -> dict[str, list[str]]:
    """DRF's error detail of a refused request as {field: [messages]}: one level, whatever the
    nesting, with dotted names for nested fields and list items ("split.train", "checkpoints.1"),
    so that every error body has the one shape the OpenAPI schema states (webapp.api.schema)."""
    return _cap(_field_messages(detail, prefix))


def _cap(fields: dict[str, list[str]]) -> dict[str, list[str]]:
    """At most FIELDS_SHOWN fields of MESSAGES_SHOWN bounded messages each, with a count of the rest."""
    out: dict[str, list[str]] = {}
    for name, messages in list(fields.items())[:FIELDS_SHOWN]:
        shown = [bounded(m) for m in messages[:MESSAGES_SHOWN]]
        if len(messages) > MESSAGES_SHOWN:
            shown.append(f"(and {len(messages) - MESSAGES_SHOWN:,} more)")
        out[name] = shown
    if len(fields) > FIELDS_SHOWN:
        out["non_field_errors"] = [*out.get("non_field_errors", []),
                                   f"(and {len(fields) - FIELDS_SHOWN:,} more fields refused)"]
    return out


def _field_messages(detail, prefix: str = "") -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    if isinstance(detail, dict):
        for key, value in detail.items():
            name = f"{prefix}.{key}" if prefix else str(key)
            for field, messages in _field_messages(value, name).items():
                out.setdefault(field, []).extend(messages)
    elif isinstance(detail, (list, tuple)):
        for index, item in enumerate(detail):
            if isinstance(item, (dict, list, tuple)):  # a list's items: one entry per item that was refused
                for field, messages in _field_messages(item, f"{prefix}.{index}" if prefix else str(index)).items():
                    out.setdefault(field, []).extend(messages)
            elif str(item):
                out.setdefault(prefix or "non_field_errors", []).append(str(item))
    elif str(detail):
        out.setdefault(prefix or "non_field_errors", []).append(str(detail))
    return out


@csrf_exempt  # no state changes here; a POST to no endpoint gets the 404, not a CSRF page
def api_not_found(request: HttpRequest, path: str = "") -> HttpResponse:
    """The last route under /api/: an address no endpoint has answers the API's JSON 404 (with DEBUG
    on too, where Django would show its HTML page); a GET that only lacks its trailing slash is
    sent to the address with it, as Django's APPEND_SLASH did before this route existed."""
    from django.urls import Resolver404, resolve

    if not request.path.endswith("/") and request.method in ("GET", "HEAD"):
        try:
            match = resolve(request.path + "/")
        except Resolver404:
            match = None
        if match is not None and match.func is not api_not_found:
            query = request.META.get("QUERY_STRING", "")
            return HttpResponsePermanentRedirect(request.path + "/" + (f"?{query}" if query else ""))
    return JsonResponse({"error": NOT_FOUND}, status=404)


def _wants_json(request: HttpRequest) -> bool:
    return request.path.startswith("/api/") or "application/json" in request.headers.get("Accept", "")


def _error(request: HttpRequest, code: int, title: str, message: str) -> HttpResponse:
    if _wants_json(request):
        return JsonResponse({"error": message}, status=code)
    return render(request, "error.html", {"code": code, "title": title, "message": message}, status=code)


def bad_request_page(request, exception=None):
    return _error(request, 400, "Bad request", "The request could not be understood.")


def forbidden_page(request, exception=None):
    return _error(request, 403, "Forbidden", "You are not allowed to do that.")


def not_found_page(request, exception=None):
    return _error(request, 404, "Not found", "This page does not exist, or what it shows is not yours.")


class DiskFullMiddleware:
    """A full disk is a 507 with a sentence (JSON under /api/, a page elsewhere), not a 500.

    Its process_view reads a page's form or multipart body (the upload handler writes its files
    to FILE_UPLOAD_TEMP_DIR) before CsrfViewMiddleware does: that check reads the body for its
    token, and an error raised in a process_view reaches no process_exception (a 500). Reading it
    here first (Django keeps what was read) turns the failure into the sentence; the view sees the
    same data. Its process_exception answers a full disk met by a view (a page's write)."""

    FORMS = ("multipart/form-data", "application/x-www-form-urlencoded")

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_view(self, request, view_func, view_args, view_kwargs):
        if getattr(view_func, "csrf_exempt", False):  # no CSRF check will read it (the API's views: DRF parses
            return None                               # the body itself, and its handler answers a full disk)
        if request.method == "POST" and request.content_type in self.FORMS:  # (Django parses only a POST's)
            try:
                request.POST  # noqa: B018 - parses the body (and its files) once, here
            except OSError as exc:  # Django keeps an empty body and raises; another error is left as it was
                if is_disk_full(exc):
                    return self.process_exception(request, exc)
        return None

    def process_exception(self, request, exception):
        if not is_disk_full(exception):
            return None
        log.warning("The disk is full: %s %s refused (%s)", request.method, request.path, exception)
        return _error(request, 507, "The disk is full", DISK_FULL)


def server_error_page(request):
    return _error(request, 500, "Server error", "Something went wrong on our side. The error has been logged.")
