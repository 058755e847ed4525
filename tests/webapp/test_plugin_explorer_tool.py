"""Adding an explorer tool takes its own module, its panel, its test and one registration line.

This file is the module and the test: it defines a toy tool (its request serializer and API view,
its page answer, a field of its own and its panel template), registers it with one line of
webapp.explorer.tools.REGISTRY, and sees it everywhere a tool appears: its endpoint under
/api/explore/ (checked for ownership, in the OpenAPI schema), its panel and script on the explorer
page with the endpoint the script reads, its action on the page's form (its own field, its example,
what must be typed in), its answer on the page without JavaScript and its comparison of two checkpoints. Unregistered, none of it is there.
"""
from __future__ import annotations

import importlib
import json

import pytest
from django import forms
from django.urls import clear_url_caches, reverse
from rest_framework import serializers

from tests.webapp.explorer_models_helpers import explorer_tools
from tests.webapp.test_runs_finetune import family_stub
from webapp.api.serializers import RequestSerializer
from webapp.explorer import tools
from webapp.explorer.api import CheckpointQuestionView

pytestmark = pytest.mark.django_db(transaction=False)

PANEL = """<section class="card" id="toy-reverse">
  <h2>Reverse (a test's tool)</h2>
  {{ form.toy_text }}
  <button type="submit" name="action" value="toy_reverse">Reverse</button>
  <p class="error" data-error="toy_reverse">{% for e in form.toy_text.errors %}{{ e }}{% endfor %}</p>
  {% if result.kind == "toy_reverse" %}<p id="toy-answer">{{ result.reversed }} ({{ result.label }})</p>{% endif %}
</section>
"""


class ToyRequestSerializer(RequestSerializer):
    checkpoint = serializers.UUIDField()
    text = serializers.CharField(max_length=200)


class ToyView(CheckpointQuestionView):
    request_serializer = ToyRequestSerializer

    def answer(self, checkpoint, data: dict) -> dict:
        return {"reversed": data["text"][::-1]}


def toy_page(data: dict, selected, compare_to, user) -> dict:
    return {"reversed": data["toy_text"][::-1], "label": selected.label}


TOY = tools.ExplorerTool(
    "toy_reverse", "toy/_panel.html", "js/toy_reverse.js", tools.ToolApi("toy-reverse", "toy-reverse/", ToyView),
    toy_page, fields=("toy_text",), required=(("toy_text", "Type a text to reverse."),),
    initial=(("toy_text", "stressed"),),
    compare=tools.Comparison("toy-reverse", ("text",), lambda checkpoint, inputs: {
        "reversed": (inputs.get("text") or "")[::-1] + f" by {checkpoint.label}"}),
    form_fields=lambda: {"toy_text": forms.CharField(required=False, max_length=200, label="Toy text")})


def _reload_urls() -> None:
    for name in ("webapp.explorer.api_urls", "webapp.api.urls", "webapp.urls"):
        importlib.reload(importlib.import_module(name))
    clear_url_caches()


@pytest.fixture
def registered(settings, tmp_path):
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy" / "_panel.html").write_text(PANEL)
    settings.TEMPLATES = [{**settings.TEMPLATES[0], "DIRS": [*settings.TEMPLATES[0]["DIRS"], tmp_path]}]
    tools.REGISTRY["toy_reverse"] = f"{__name__}:TOY"  # the one registration line
    _reload_urls()
    yield
    del tools.REGISTRY["toy_reverse"]
    _reload_urls()


@pytest.fixture
def checkpoint(alice):
    return family_stub(alice, "bert")


def test_its_endpoint_answers_checks_ownership_and_is_documented(registered, checkpoint, alice_api, bob_api):
    response = alice_api.post("/api/explore/toy-reverse/", {"checkpoint": str(checkpoint.id), "text": "abc"},
                              format="json")
    assert response.status_code == 200, response.content
    assert response.json() == {"checkpoint": str(checkpoint.id), "reversed": "cba"}
    assert reverse("api-explore-toy-reverse") == "/api/explore/toy-reverse/"
    # another user's checkpoint: the JSON 404; a bad request: the field named
    assert bob_api.post("/api/explore/toy-reverse/", {"checkpoint": str(checkpoint.id), "text": "abc"},
                        format="json").status_code == 404
    refused = alice_api.post("/api/explore/toy-reverse/", {"checkpoint": str(checkpoint.id)}, format="json")
    assert refused.status_code == 400 and "text" in refused.json()["fields"]
    schema = alice_api.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    assert "post" in schema["paths"]["/api/explore/toy-reverse/"]


def test_the_page_shows_its_panel_and_script_with_its_endpoint(registered, checkpoint, alice_client):
    html = alice_client.get(reverse("explorer:index") + f"?checkpoint={checkpoint.id}").content.decode()
    assert '<section class="card" id="toy-reverse">' in html
    assert 'name="toy_text"' in html  # the field it brought, with the example it starts with
    assert 'value="stressed"' in html.split('id="toy-reverse"')[1].split("</section>")[0]
    assert '<script src="/static/js/toy_reverse.js" defer></script>' in html
    # the scripts' table of endpoints and compare names (Workbench.explorerTools), the one place the page
    # names an endpoint: the form carries none of its own
    table = explorer_tools(html)
    assert table["toy_reverse"] == {"url": "/api/explore/toy-reverse/", "compare": "toy-reverse"}
    assert table["fill_mask"] == {"url": "/api/explore/fill-mask/", "compare": "fill-mask"}
    # beside the explorer's own tools, which are unchanged
    assert '<section class="card" id="fill-mask"' in html
    assert "/api/explore/toy-reverse/" not in html.replace(json.dumps(table["toy_reverse"]), "")
    assert 'data-fill-mask=' not in html and 'data-builder-url=' not in html


def test_the_form_takes_its_action_and_the_page_answers_it_without_javascript(registered, checkpoint,
                                                                              alice_client):
    url = reverse("explorer:index")
    html = alice_client.post(url, {"action": "toy_reverse", "checkpoint": str(checkpoint.id),
                                   "toy_text": "stressed", "text": "no [MASK] needed here",
                                   "top_k": "999"}).content.decode()  # another tool's mistake never blocks it
    assert f'<p id="toy-answer">desserts ({checkpoint.label})</p>' in html
    html = alice_client.post(url, {"action": "toy_reverse", "checkpoint": str(checkpoint.id),
                                   "toy_text": "  "}).content.decode()
    assert '<p class="error" data-error="toy_reverse">Type a text to reverse.</p>' in html


def test_it_compares_two_checkpoints_through_the_api(registered, checkpoint, alice, alice_api):
    other = family_stub(alice, "bert")
    body = {"checkpoints": [str(checkpoint.id), str(other.id)], "task": "toy-reverse", "inputs": {"text": "abc"}}
    response = alice_api.post("/api/explore/compare/", body, format="json")
    assert response.status_code == 200, response.content
    assert [c["result"]["reversed"] for c in response.json()["results"]] == [f"cba by {checkpoint.label}",
                                                                             f"cba by {other.label}"]
    refused = alice_api.post("/api/explore/compare/", {**body, "inputs": {}}, format="json")
    assert refused.status_code == 400 and "inputs.text" in refused.content.decode()


def test_unregistered_it_is_nowhere(checkpoint, alice_client, alice_api):
    assert "toy_reverse" not in tools.REGISTRY
    html = alice_client.get(reverse("explorer:index") + f"?checkpoint={checkpoint.id}").content.decode()
    assert "toy-reverse" not in html and "toy_reverse.js" not in html
    response = alice_api.post("/api/explore/toy-reverse/", {"checkpoint": str(checkpoint.id), "text": "abc"},
                              format="json")
    assert response.status_code == 404
    assert alice_api.post("/api/explore/compare/", {"checkpoints": [str(checkpoint.id), str(checkpoint.id)],
                                                    "task": "toy-reverse", "inputs": {"text": "abc"}},
                          format="json").status_code == 400
    page = alice_client.post(reverse("explorer:index"), {"action": "toy_reverse", "checkpoint": str(checkpoint.id),
                                                         "toy_text": "abc"}).content.decode()
    assert "desserts" not in page and "toy-answer" not in page


def test_every_registered_tool_is_complete():
    """Each tool of the registry resolves to itself, and each endpoint and panel is its own or shared."""
    for tool in tools.all_tools():
        assert tool.panel and tool.script, tool.name
        assert tool.page is not None or tool.api is not None, tool.name
        assert set(name for name, _ in tool.required) <= set(tool.fields), tool.name
        assert set(name for name, _ in (*tool.defaults, *tool.initial)) <= set(tool.fields), tool.name
    slugs = [t.api.slug for t in tools.with_api()]
    assert len(slugs) == len(set(slugs))
