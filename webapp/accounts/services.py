"""Writes for accounts: signing up and managing the API token."""
from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from rest_framework.authtoken.models import Token


@transaction.atomic
def user_signup(*, username: str, password: str, email: str = "") -> AbstractBaseUser:
    """Create a user (the form has already validated the name and the password)."""
    user = get_user_model().objects.create_user(username=username, password=password, email=email)
    Token.objects.create(user=user)
    return user


@transaction.atomic
def api_token_ensure(*, user: AbstractBaseUser) -> Token:
    """The user's API token, created on first use."""
    token, _ = Token.objects.get_or_create(user=user)
    return token


@transaction.atomic
def api_token_regenerate(*, user: AbstractBaseUser) -> Token:
    """Replace the user's API token; the old key stops working at once."""
    Token.objects.filter(user=user).delete()
    return Token.objects.create(user=user)
