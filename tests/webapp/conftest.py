import pytest


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """The default hasher takes about a second per password; these tests check flows, not hashing."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def enqueued(monkeypatch):
    """Record train_run.apply_async calls instead of talking to the broker."""
    from webapp.runs import tasks

    calls = []
    monkeypatch.setattr(tasks.train_run, "apply_async", lambda *a, **kw: calls.append((a, kw)))
    return calls
