"""Deep JSON is a 400, not a 500 (issue 22, point 3): request bodies, dataset uploads and the
generation socket all go through trainer.jsonio, which names the nesting limit."""
from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.core.files.uploadedfile import SimpleUploadedFile

from tests.webapp.test_ws import session_headers
from trainer import jsonio
from webapp.asgi import application

LIMIT = f"{jsonio.MAX_DEPTH} levels is the nesting limit"
DEEP_BODY = '{"name": ' + "[" * 50_000 + "]" * 50_000 + "}"


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["/api/finetune/", "/api/runs/", "/api/sweeps/", "/api/explore/fill-mask/",
                                 "/api/tokenizers/"])
def test_a_body_nested_50000_deep_is_a_400_naming_the_limit(alice_api, url):
    response = alice_api.post(url, DEEP_BODY, content_type="application/json")
    assert response.status_code == 400, response.content[:300]
    assert response.json()["error"] == (f"The JSON body is nested more than {jsonio.MAX_DEPTH} levels deep (lists or "
                                        f"objects inside one another); {LIMIT}.")


@pytest.mark.django_db
def test_a_body_inside_the_limit_still_reads(alice_api):
    response = alice_api.post("/api/tokenizers/", '{"corpus": ' + "[" * 10 + "]" * 10 + "}",
                              content_type="application/json")
    assert response.status_code == 400 and "nesting limit" not in response.json()["error"]


@pytest.mark.django_db
@pytest.mark.parametrize("text", [
    '{"version":"v2.0","data":[' + "[" * 10_000 + "]" * 10_000 + "]}",
    '{"version":"v2.0",\n"data":[\n' + "[" * 10_000 + "]" * 10_000 + "]}",
], ids=["one-line", "multi-line"])
def test_a_squad_upload_nested_10000_deep_is_a_400_naming_the_limit(alice_api, text):
    from webapp.datasets.models import Dataset

    upload = SimpleUploadedFile("deep.json", text.encode(), content_type="application/json")
    response = alice_api.post("/api/datasets/", {"file": upload}, format="multipart")
    assert response.status_code == 400, response.content[:300]
    assert response.json()["error"].startswith("The JSON file is nested more than") and LIMIT in response.json()["error"]
    assert not Dataset.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_socket_message_nested_too_deep_is_answered_with_the_sentence(alice_client):
    async def go():
        comm = WebsocketCommunicator(application, "/ws/explore/generate/", headers=session_headers(alice_client))
        assert (await comm.connect(timeout=5))[0]
        await comm.send_to(text_data='{"type": ' + "[" * 50_000 + "]" * 50_000 + "}")
        deep = await comm.receive_json_from(timeout=5)
        await comm.send_to(text_data="{not json")
        broken = await comm.receive_json_from(timeout=5)
        await comm.send_json_to({"type": "ping"})
        pong = await comm.receive_json_from(timeout=5)  # the socket is still open and answering
        await comm.disconnect()
        return deep, broken, pong

    deep, broken, pong = async_to_sync(go)()
    assert deep == {"type": "error", "message": f"The message is nested more than {jsonio.MAX_DEPTH} levels deep "
                                                f"(lists or objects inside one another); {LIMIT}."}
    assert broken == {"type": "error", "message": "The message is not valid JSON."} and pong == {"type": "pong"}


def test_the_launch_form_s_yaml_import_nested_too_deep_is_a_sentence():
    from trainer.errors import ConfigError
    from webapp.runs.launch import parse_config_yaml

    with pytest.raises(ConfigError, match="^The YAML is nested too deeply to read"):
        parse_config_yaml("max_steps: " + "[" * 5000 + "]" * 5000)
