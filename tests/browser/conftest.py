"""The browser tests' pages: the system Chromium driven by Playwright, against the live stack or,
for `live_server_page`, against Django in a thread of the test process."""
from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
SHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"


def chromium_executable() -> str:
    """The system Chromium to drive. Without one the test fails rather than skips: a skipped
    browser test would let a run without any browser check pass."""
    if Path(CHROMIUM).exists():
        return CHROMIUM
    found = shutil.which("chromium")
    if not found:
        pytest.fail(f"No system Chromium at {CHROMIUM} or on PATH: install the 'chromium' package "
                    f"(scripts/ensure_chromium.sh does as root) or set CHROMIUM_PATH.", pytrace=False)
    return found


@contextlib.contextmanager
def _chromium_page(base_url: str | None):
    """A Playwright page in the system Chromium; fails the test if a page threw a JavaScript error."""
    executable = chromium_executable()
    from playwright import sync_api  # in requirements-test.txt; missing is an error, not a skip
    # Playwright's sync API runs an event loop in this thread; the test itself never touches the database.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "1"
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=executable,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        context = browser.new_context(base_url=base_url, viewport={"width": 1280, "height": 900})
        pg = context.new_page()
        errors: list[str] = []
        pg.on("pageerror", lambda exc: errors.append(str(exc)))
        pg.set_default_timeout(60_000)
        yield pg
        browser.close()
        assert not errors, f"JavaScript errors on the pages: {errors}"


@pytest.fixture
def page(live_stack):
    with _chromium_page(live_stack.url) as pg:
        yield pg


@pytest.fixture
def live_server_page(live_server):
    """A page on pytest-django's live_server: Django in a thread of this process (no worker, no
    websockets), so a test can monkeypatch what the views read. Needs django_db(transaction=True);
    create data in fixtures listed before this one: the test body runs inside Playwright's loop."""
    with _chromium_page(live_server.url) as pg:
        yield pg


@pytest.fixture
def alice_cookie(alice, live_server):
    """Alice's session cookie for live_server_page (page.context.add_cookies([alice_cookie]))."""
    from django.conf import settings
    from django.test import Client

    client = Client()
    client.force_login(alice)
    return {"name": settings.SESSION_COOKIE_NAME, "value": client.cookies[settings.SESSION_COOKIE_NAME].value,
            "url": live_server.url}


@pytest.fixture
def shots() -> Path:
    """Where screenshots go (test-artifacts/screenshots/; the README's pictures come from there)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    return SHOTS


# The first steps every browser session takes, as a person does them on the pages.
@pytest.fixture
def sign_up(page):
    def run(username: str) -> None:
        page.goto("/signup/")
        page.fill("#id_username", username)
        page.fill("#id_password1", f"a-long-Passw0rd-for-{username}")
        page.fill("#id_password2", f"a-long-Passw0rd-for-{username}")
        page.click("form button[type=submit]")
        page.wait_for_url(lambda url: "/signup/" not in url)
    return run


@pytest.fixture
def create_demo_corpus(page):
    def run() -> None:
        page.goto("/corpora/")
        page.click("text=Create a demo corpus")
        page.wait_for_selector(".badge.ready", timeout=120_000)
    return run


@pytest.fixture
def train_tokenizer(page):
    """On a corpus page: train its default tokenizer with this vocabulary size and wait for it."""
    def run(vocab_size: int) -> None:
        page.fill("#id_vocab_size", str(vocab_size))
        page.click("text=Train tokenizer")
        page.wait_for_selector(".badge.ready", timeout=120_000)
    return run

