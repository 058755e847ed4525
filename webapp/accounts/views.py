from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from webapp.accounts.forms import SignupForm
from webapp.accounts.selectors import dashboard_for
from webapp.accounts.services import api_token_ensure, api_token_regenerate, user_signup


def home(request: HttpRequest) -> HttpResponse:
    if not request.user.is_authenticated:
        return render(request, "home.html", {"landing": True})
    return render(request, "home.html", {"dashboard": dashboard_for(request.user)})


def signup(request: HttpRequest) -> HttpResponse:
    if request.user.is_authenticated:
        return redirect("home")
    form = SignupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user = user_signup(
            username=form.cleaned_data["username"],
            password=form.cleaned_data["password1"],
            email=form.cleaned_data.get("email") or "",
        )
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        messages.success(request, f"Welcome, {user.get_username()}! Start by adding a corpus.")
        return redirect("home")
    return render(request, "accounts/signup.html", {"form": form})


@login_required
def account(request: HttpRequest) -> HttpResponse:
    token = api_token_ensure(user=request.user)
    return render(request, "accounts/account.html", {"token": token})


@login_required
@require_POST
def account_token_regenerate(request: HttpRequest) -> HttpResponse:
    api_token_regenerate(user=request.user)
    messages.success(request, "A new API token was created. The old one no longer works.")
    return redirect("account")
