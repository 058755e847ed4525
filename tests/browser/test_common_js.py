"""static/js/common.js in the system Chromium: every page has Workbench.el and Workbench.postJSON,
which sends Django's CSRF token and turns every failure into a sentence a person can read."""
from __future__ import annotations

import pytest
from django.urls import reverse

from tests.webapp.runs_helpers import make_data
from webapp.jobs.models import JobStatus

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

POST = """async ([url, body]) => {
    try { return { ok: true, data: await Workbench.postJSON(url, body) }; }
    catch (e) { return { ok: false, message: e.message, status: e.status || null }; } }"""


@pytest.fixture
def tokenizers(alice, bob):
    """Alice's tokenizer still training, and Bob's."""
    _, training = make_data(alice, status=JobStatus.PROCESSING)
    _, bobs = make_data(bob, name="bob's")
    return {"training": reverse("api-tokenizer-tokenize", args=[training.id]),
            "bobs": reverse("api-tokenizer-tokenize", args=[bobs.id])}


def test_post_json_sends_the_csrf_token_and_says_what_went_wrong(tokenizers, alice_cookie, live_server_page):
    page = live_server_page
    page.context.add_cookies([alice_cookie])
    page.goto("/corpora/")  # any page: base.html loads common.js

    assert page.evaluate("() => Workbench.el('span', 'chip', 'x').outerHTML") == '<span class="chip">x</span>'
    assert page.evaluate("() => Workbench.el('p').outerHTML") == "<p></p>"

    # The request passes Django's CSRF check (a session POST without the header gets a 403) and
    # the API's own sentence comes back as the message.
    assert page.evaluate(POST, [tokenizers["training"], {"text": "hello"}]) == {
        "ok": False, "status": 400,
        "message": "The tokenizer is not ready yet; try again when its training has finished."}
    assert page.evaluate(POST, [tokenizers["bobs"], {"text": "hello"}]) == {
        "ok": False, "status": 404, "message": "Not found. It does not exist, or it is not yours."}

    # Without the cookie Django refuses the POST; its reason still reads as a sentence.
    page.evaluate("() => { document.cookie = 'csrftoken=; expires=Thu, 01 Jan 1970 00:00:00 GMT; path=/'; }")
    refused = page.evaluate(POST, [tokenizers["training"], {"text": "hello"}])
    assert refused["status"] == 403
    assert refused["message"].startswith("CSRF Failed") and refused["message"].endswith(".")

    # A proxy's HTML error page, and no answer at all.
    page.route("**/api/broken/", lambda route: route.fulfill(status=502, body="<html>Bad gateway</html>",
                                                              content_type="text/html"))
    page.route("**/api/unreachable/", lambda route: route.abort())
    assert page.evaluate(POST, ["/api/broken/", {}]) == {
        "ok": False, "status": 502, "message": "The server could not answer (HTTP 502). Try again in a moment."}
    assert page.evaluate(POST, ["/api/unreachable/", {}]) == {
        "ok": False, "status": None, "message": "Could not reach the server. Check your connection and try again."}
