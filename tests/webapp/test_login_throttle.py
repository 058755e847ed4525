"""Failed sign-ins are throttled per account and per client address, on the login form and on
POST /api/auth/token/ (issue 29, point 4): a sentence that says when to try again (a page, or
JSON with a 429 and Retry-After), a record in the admin, and a cool-off rather than a lock."""
from __future__ import annotations

import re
from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.urls import reverse

pytestmark = pytest.mark.django_db

PASSWORD = "a-long-passphrase-42"
LIMIT = settings.LOGIN_FAILURE_LIMIT


@pytest.fixture
def alice(django_user_model):
    return django_user_model.objects.create_user("alice", password=PASSWORD)


def form_login(client, username, password, ip="10.0.0.1"):
    return client.post(reverse("login"), {"username": username, "password": password}, REMOTE_ADDR=ip)


def api_login(client, username, password, ip="10.0.0.1"):
    return client.post(reverse("api-auth-token"), {"username": username, "password": password},
                       content_type="application/json", REMOTE_ADDR=ip)


def logged_in(response) -> bool:
    return response.status_code == 302 and response.url == reverse(settings.LOGIN_REDIRECT_URL)


def age_failures(by: timedelta) -> None:
    """As if the failures recorded so far had happened `by` earlier."""
    for attempt in AccessAttempt.objects.all():
        AccessAttempt.objects.filter(pk=attempt.pk).update(attempt_time=attempt.attempt_time - by)


def test_the_defaults_are_a_limit_and_a_short_cool_off():
    assert LIMIT == 10 and settings.AXES_COOLOFF_TIME == timedelta(minutes=5)
    assert settings.AXES_LOCKOUT_PARAMETERS == ["username", "ip_address"]
    assert settings.AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT is False


def test_guessing_one_accounts_password_on_the_form_is_refused_with_when_to_try_again(client, alice):
    for _ in range(LIMIT - 1):
        page = form_login(client, "alice", "wrong")
        assert page.status_code == 200 and "Please enter a correct username and password" in page.content.decode()
    page = form_login(client, "alice", "wrong")
    assert page.status_code == 429
    refused = form_login(client, "alice", PASSWORD)  # the right password is not even checked now
    html = refused.content.decode()
    assert refused.status_code == 429 and int(refused["Retry-After"]) <= 300
    assert "Too many failed sign-ins for this account or from this address. Try again in 5 minutes" in html
    assert 'name="username"' in html  # the login form itself, with the sentence above it
    assert "_auth_user_id" not in client.session
    record = AccessAttempt.objects.get(username="alice")
    assert record.failures_since_start == LIMIT and record.ip_address == "10.0.0.1"
    assert PASSWORD not in record.post_data and "wrong" not in record.post_data  # passwords are masked


def test_the_api_door_counts_too_and_answers_429_json(client, alice):
    for _ in range(LIMIT):
        response = api_login(client, "alice", "wrong", ip="10.0.0.7")
    assert response.status_code == 429
    refused = api_login(client, "alice", PASSWORD, ip="10.0.0.7")
    assert refused.status_code == 429 and refused["Content-Type"] == "application/json"
    assert re.fullmatch(r"Too many failed sign-ins .* Try again in \d+ minutes?; nothing was checked meanwhile\.",
                        refused.json()["error"])
    assert int(refused["Retry-After"]) > 0
    # per account: the account is refused from any address, and on the form as well
    assert form_login(client, "alice", PASSWORD, ip="10.9.9.9").status_code == 429


def test_one_address_guessing_many_accounts_is_refused_for_every_account(client, alice, django_user_model):
    django_user_model.objects.create_user("bob", password=PASSWORD)
    for i in range(LIMIT):
        api_login(client, f"nobody-{i}", "wrong", ip="10.0.0.9")
    assert api_login(client, "bob", PASSWORD, ip="10.0.0.9").status_code == 429  # per address
    assert logged_in(form_login(client, "bob", PASSWORD, ip="10.0.0.10"))  # another address is not


def test_the_lock_is_a_cool_off_that_refused_attempts_do_not_extend(client, alice):
    for _ in range(LIMIT):
        form_login(client, "alice", "wrong")
    age_failures(timedelta(minutes=3))
    for _ in range(5):  # an attacker keeps trying during the cool-off: it is not extended
        assert form_login(client, "alice", "wrong").status_code == 429
    refused = form_login(client, "alice", PASSWORD)
    assert refused.status_code == 429 and "Try again in 2 minutes" in refused.content.decode()
    age_failures(timedelta(minutes=2, seconds=1))
    assert logged_in(form_login(client, "alice", PASSWORD))


def test_a_correct_sign_in_clears_the_count(client, alice):
    for _ in range(LIMIT - 1):
        form_login(client, "alice", "wrong")
    assert logged_in(form_login(client, "alice", PASSWORD))
    client.post(reverse("logout"))
    for _ in range(LIMIT - 1):  # the count started again
        assert form_login(client, "alice", "wrong").status_code == 200
    assert api_login(client, "alice", PASSWORD).status_code == 200


def test_the_admin_lists_the_attempts(client, alice, django_user_model):
    for _ in range(3):
        form_login(client, "alice", "wrong", ip="10.0.0.3")
    staff = django_user_model.objects.create_superuser("root", password=PASSWORD)
    client.force_login(staff)
    page = client.get(reverse("admin:axes_accessattempt_changelist"))
    assert page.status_code == 200 and "alice" in page.content.decode() and "10.0.0.3" in page.content.decode()
