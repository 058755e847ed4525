import pytest


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """The default hasher takes about a second per password; these tests check flows, not hashing."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
