"""Every failure a user can cause becomes a sentence: JSON under /api/, a page elsewhere."""
from __future__ import annotations

import logging

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_default_handler

log = logging.getLogger(__name__)


def _flatten(detail) -> str:
    """Turn DRF's nested error detail into one readable sentence."""
    if isinstance(detail, dict):
        parts = []
        for field, value in detail.items():
            text = _flatten(value)
            parts.append(text if field in ("non_field_errors", "detail") else f"{field}: {text}")
        return " ".join(parts)
    if isinstance(detail, (list, tuple)):
        return " ".join(_flatten(v) for v in detail)
    return str(detail)


def exception_handler(exc, context):
    from trainer.errors import UserError  # user-caused failures raised by the trainer layer

    if isinstance(exc, UserError):  # a sentence; 400 unless the error says otherwise (429: a limit)
        return Response({"error": str(exc)}, status=getattr(exc, "status_code", status.HTTP_400_BAD_REQUEST))
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
        message = "Not found. It does not exist, or it is not yours."
    else:
        message = _flatten(response.data)
    body = {"error": message}
    if isinstance(response.data, dict) and not isinstance(exc, (exceptions.NotFound, Http404, exceptions.NotAuthenticated)):
        body["fields"] = response.data
    response.data = body
    return response


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


def server_error_page(request):
    return _error(request, 500, "Server error", "Something went wrong on our side. The error has been logged.")
