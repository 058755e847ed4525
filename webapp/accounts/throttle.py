"""Failed sign-ins are throttled by django-axes (issue 29, point 4): per account and per client
address, on the login form and on POST /api/auth/token/ alike, since both call Django's
authenticate() with the request.

After LOGIN_FAILURE_LIMIT failures for one username, or from one address, within the cool-off,
further attempts are refused without checking the password, until LOGIN_COOLOFF_MINUTES have
passed since the last counted failure: a cool-off, never a permanent lock, and attempts made
while refused do not extend it (AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT is off), so an
attacker cannot keep a user out longer than one cool-off per LOGIN_FAILURE_LIMIT guesses. A
correct sign-in clears the count. Every failure is an AccessAttempt in the admin, where a staff
user can also clear one; `manage.py axes_reset` clears them all.

This module answers a refused attempt: a sentence saying when to try again, as JSON with a 429
and Retry-After under /api/, or as the login page with that sentence (also 429).
"""
from __future__ import annotations

import math
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone


def cooloff_left(request: HttpRequest) -> timedelta:
    """How long until the refused client may try again: the cool-off after the latest failure
    counted against this username or this address (the whole cool-off when none is found)."""
    from axes.helpers import get_client_username
    from axes.models import AccessAttempt

    cooloff = settings.AXES_COOLOFF_TIME
    username = get_client_username(request) or None
    ip = getattr(request, "axes_ip_address", None)
    latest = None
    for field, value in (("username", username), ("ip_address", ip)):
        if value:
            row = AccessAttempt.objects.filter(**{field: value}).order_by("-attempt_time").first()
            if row and (latest is None or row.attempt_time > latest):
                latest = row.attempt_time
    if latest is None:
        return cooloff
    return max(timedelta(seconds=1), latest + cooloff - timezone.now())


def lockout_sentence(left: timedelta) -> str:
    minutes = max(1, math.ceil(left.total_seconds() / 60))
    when = "in a minute" if minutes == 1 else f"in {minutes} minutes"
    return (f"Too many failed sign-ins for this account or from this address. Try again {when}; "
            "nothing was checked meanwhile.")


def lockout_response(request: HttpRequest, *_ignored) -> HttpResponse:
    """AXES_LOCKOUT_CALLABLE. (django-axes calls it with (request, response, credentials), and
    from its async middleware with (request, credentials): only the request is read.)"""
    left = cooloff_left(request)
    sentence = lockout_sentence(left)
    retry_after = str(max(1, math.ceil(left.total_seconds())))
    if request.path.startswith("/api/"):
        response: HttpResponse = JsonResponse({"error": sentence}, status=429)
    else:
        form = AuthenticationForm(request, initial={"username": request.POST.get("username", "")})
        response = render(request, "accounts/login.html", {"form": form, "locked": sentence,
                                                           "next": request.POST.get("next", "")}, status=429)
    response["Retry-After"] = retry_after
    return response
