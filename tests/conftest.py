"""Shared fixtures: three personas (Alice owns things, Bob is another user, an anonymous visitor)."""
from __future__ import annotations

import pytest

pytest_plugins = ["tests.livestack",  # live_stack: a real Celery worker and web server
                  "tests.skip_guard"]  # with LMWB_FAIL_ON_SKIP=1 (.ci/run) a skipped test fails the run


@pytest.fixture
def alice(django_user_model):
    return django_user_model.objects.create_user(username="alice", password="alice-password-123")


@pytest.fixture
def bob(django_user_model):
    return django_user_model.objects.create_user(username="bob", password="bob-password-123")


@pytest.fixture
def alice_client(client, alice):
    client.force_login(alice)
    return client


@pytest.fixture
def bob_client(alice, bob):
    from django.test import Client

    c = Client()
    c.force_login(bob)
    return c


@pytest.fixture
def alice_api(alice):
    """A DRF client authenticated with Alice's API token."""
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    token, _ = Token.objects.get_or_create(user=alice)
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return c


@pytest.fixture
def bob_api(bob):
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    token, _ = Token.objects.get_or_create(user=bob)
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return c


@pytest.fixture
def anon_api():
    from rest_framework.test import APIClient

    return APIClient()

