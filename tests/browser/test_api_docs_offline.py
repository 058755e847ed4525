"""The API page renders with no internet (issue 31, point 3): Swagger UI's files come from the
installed drf-spectacular-sidecar package, served by the app, and nothing is asked of another host."""
from __future__ import annotations

from urllib.parse import urlsplit

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_api_page_renders_offline(alice, alice_cookie, live_server, live_server_page):
    page = live_server_page
    here = urlsplit(live_server.url).netloc
    elsewhere: list[str] = []

    def offline(route):  # the machine has no internet: any other host is unreachable
        if urlsplit(route.request.url).netloc == here:
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort("internetdisconnected")

    page.context.route("**/*", offline)
    page.context.add_cookies([alice_cookie])
    page.goto("/api/docs/")
    page.wait_for_selector(".swagger-ui .opblock-tag", timeout=30_000)
    assert page.locator(".swagger-ui .info .title").inner_text().startswith("LM Workbench API")
    assert page.locator(".swagger-ui .opblock").count() > 20  # the operations, from /api/schema/
    assert page.locator('.swagger-ui [data-path="/api/auth/token/"]').count() == 1
    assert elsewhere == []
