"""T5's task-prefix picker in the explorer keeps showing the prefix the input starts with: picking
one puts it in front of the input and stays picked (it used to fall back to "none" at once, so
after a run it said no prefix beside an input that had one), and it follows the input as edited."""
from __future__ import annotations

import pytest

from tests.webapp.test_runs_finetune import family_stub

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_picker_keeps_the_prefix_the_input_starts_with(alice, alice_cookie, live_server_page):
    t5 = family_stub(alice, "t5")
    page = live_server_page
    page.context.add_cookies([alice_cookie])
    page.goto(f"/explore/?checkpoint={t5.id}")
    assert page.is_visible("#text-to-text")
    page.fill("#id_prompt", "The weather was cold.")
    page.select_option("#id_task_prefix", "summarize: ")
    assert page.input_value("#id_prompt") == "summarize: The weather was cold."
    assert page.input_value("#id_task_prefix") == "summarize: "  # still picked
    page.fill("#id_prompt", "The weather was cold.")
    page.dispatch_event("#id_prompt", "input")
    assert page.input_value("#id_task_prefix") == ""  # the input lost it: "none"
    page.fill("#id_prompt", "summarize: the coat")
    page.dispatch_event("#id_prompt", "input")
    assert page.input_value("#id_task_prefix") == "summarize: "
