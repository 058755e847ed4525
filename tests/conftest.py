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



@pytest.fixture
def eager(settings):
    """Celery tasks run in the test's process, as soon as the transaction commits, while the test
    lasts. The app's setting is read before Django's is changed: app.conf loads lazily from
    Django's settings, so reading it afterwards would take the changed value as the one to
    restore and leave every later test eager (a live-stack test then trains in-process)."""
    from webapp.celery import app

    previous = app.conf.task_always_eager
    settings.CELERY_TASK_ALWAYS_EAGER = True
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = previous
