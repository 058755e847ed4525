"""Sign-up, log-in, log-out, the account page with its API token, and the token endpoint."""
from __future__ import annotations

import pytest
from django.urls import reverse
from rest_framework.authtoken.models import Token

from webapp.corpora.models import Corpus, Tokenizer
from webapp.jobs.models import JobStatus

pytestmark = pytest.mark.django_db


def test_anonymous_home_is_a_landing_page_with_signup_and_login(client):
    page = client.get(reverse("home"))
    assert page.status_code == 200
    html = page.content.decode()
    assert reverse("signup") in html and reverse("login") in html
    assert "Getting started" not in html


def test_signup_creates_the_account_logs_in_and_makes_a_token(client, django_user_model):
    response = client.post(reverse("signup"), {
        "username": "carol", "email": "", "password1": "a-long-passphrase-42", "password2": "a-long-passphrase-42",
    })
    assert response.status_code == 302 and response.url == reverse("home")
    carol = django_user_model.objects.get(username="carol")
    assert Token.objects.filter(user=carol).exists()
    home = client.get(reverse("home"))
    assert "Getting started" in home.content.decode()
    assert home.context["user"] == carol


def test_signup_shows_why_it_refused(client, django_user_model):
    page = client.post(reverse("signup"), {"username": "carol", "password1": "a-long-passphrase-42",
                                           "password2": "something-else-42"})
    assert page.status_code == 200
    assert "The two password fields didn’t match." in page.content.decode()
    assert not django_user_model.objects.filter(username="carol").exists()


def test_login_then_logout_by_post(client, alice):
    page = client.post(reverse("login"), {"username": "alice", "password": "alice-password-123"})
    assert page.status_code == 302 and page.url == reverse("home")
    assert client.get(reverse("account")).status_code == 200

    assert client.get(reverse("logout")).status_code == 405  # logging out is a POST (CSRF-protected)
    page = client.post(reverse("logout"))
    assert page.status_code == 302 and page.url == reverse("login")
    assert client.get(reverse("account")).status_code == 302


def test_login_with_a_wrong_password_says_so(client, alice):
    page = client.post(reverse("login"), {"username": "alice", "password": "nope"})
    assert page.status_code == 200
    assert "Please enter a correct username and password" in page.content.decode()


def test_account_page_needs_login(client):
    page = client.get(reverse("account"))
    assert page.status_code == 302 and page.url.startswith(reverse("login"))


def test_account_page_shows_the_token_and_regenerates_it(alice_client, alice):
    page = alice_client.get(reverse("account"))
    old = Token.objects.get(user=alice).key
    assert old in page.content.decode()

    assert alice_client.get(reverse("account-token-regenerate")).status_code == 405
    response = alice_client.post(reverse("account-token-regenerate"), follow=True)
    new = Token.objects.get(user=alice).key
    assert new != old
    html = response.content.decode()
    assert new in html and old not in html
    assert "The old one no longer works" in html


def test_token_endpoint_trades_credentials_for_the_key(anon_api, alice):
    response = anon_api.post("/api/auth/token/", {"username": "alice", "password": "alice-password-123"},
                             format="json")
    assert response.status_code == 200
    key = response.json()["token"]
    assert key == Token.objects.get(user=alice).key

    anon_api.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert anon_api.get("/api/corpora/").status_code == 200


@pytest.mark.parametrize("payload", [
    {"username": "alice", "password": "wrong"},
    {"username": "nobody", "password": "alice-password-123"},
])
def test_token_endpoint_refuses_bad_credentials_with_a_sentence(anon_api, alice, payload):
    response = anon_api.post("/api/auth/token/", payload, format="json")
    assert response.status_code == 400
    assert response.json()["error"] == "The username or password is incorrect."


def test_token_endpoint_names_missing_fields(anon_api):
    response = anon_api.post("/api/auth/token/", {}, format="json")
    assert response.status_code == 400
    assert "username: This field is required." in response.json()["error"]


def test_dashboard_ticks_the_steps_that_are_done(alice_client, alice):
    html = alice_client.get(reverse("home")).content.decode()
    assert html.count("— done") == 0
    corpus = Corpus.objects.create(owner=alice, name="Poems", status=JobStatus.READY)
    Tokenizer.objects.create(owner=alice, corpus=corpus, name="Poem pieces", status=JobStatus.PENDING)

    page = alice_client.get(reverse("home"))
    steps = page.context["dashboard"].steps
    assert [s.done for s in steps] == [True, False, False, False]
    html = page.content.decode()
    assert "Poems" in html and "Poem pieces" in html
    assert reverse("corpora:detail", args=[corpus.id]) + "#train-tokenizer" in html  # step 2 links to the form


def test_dashboard_shows_only_the_users_own_work(alice_client, bob):
    Corpus.objects.create(owner=bob, name="Bob's secret corpus", status=JobStatus.READY)
    html = alice_client.get(reverse("home")).content.decode()
    assert "Bob's secret corpus" not in html
