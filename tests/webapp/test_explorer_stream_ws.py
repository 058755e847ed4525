"""The generation socket (/ws/explore/generate/) through the real ASGI application: tokens
streamed as they are produced, the same text as the API, ownership, clear errors, stopping."""
from __future__ import annotations

import time

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator

from tests.webapp.explorer_models_helpers import family_checkpoint
from tests.webapp.test_ws import ORIGIN, session_headers, token_headers
from webapp.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)

PATH = "/ws/explore/generate/"


def converse(headers, *messages, until=("done", "error"), count=1):
    """Connect, send each message, collect replies until `count` replies of a type in `until`.
    -> (connected, close code or the replies)."""
    async def go():
        comm = WebsocketCommunicator(application, PATH, headers=headers)
        connected, code = await comm.connect(timeout=5)
        if not connected:
            return False, code
        replies, ends = [], 0
        for message in messages:
            await comm.send_json_to(message)
        while ends < count:
            reply = await comm.receive_json_from(timeout=30)
            replies.append(reply)
            ends += reply["type"] in until
        await comm.disconnect()
        return True, replies
    return async_to_sync(go)()


def test_anonymous_visitors_are_closed_with_4403():
    assert converse([ORIGIN]) == (False, 4403)
    assert converse([ORIGIN, (b"authorization", b"Token not-a-token")]) == (False, 4403)


def test_gpt_tokens_stream_and_add_up_to_the_apis_text(alice, alice_client, alice_api):
    gpt = family_checkpoint(alice, "gpt")
    request = {"type": "generate", "checkpoint": str(gpt.id), "prompt": "the cat sat", "max_new_tokens": 12}
    connected, replies = converse(session_headers(alice_client), request)
    assert connected
    assert replies[0] == {"type": "start", "checkpoint": str(gpt.id)}
    tokens, done = replies[1:-1], replies[-1]
    assert done["type"] == "done" and all(t["type"] == "token" and t["text"] for t in tokens)
    api = alice_api.post("/api/explore/generate/", {"checkpoint": str(gpt.id), "prompt": "the cat sat",
                                                    "max_new_tokens": 12}, format="json").json()
    assert "".join(t["text"] for t in tokens) == done["text"] == api["text"]
    assert done["tokens"] == api["tokens"] and done["stopped"] == api["stopped"] and done["family"] == "gpt"
    assert len(tokens) >= 1


def test_t5_streams_with_an_api_token_and_sampling(alice):
    t5 = family_checkpoint(alice, "t5")
    request = {"type": "generate", "checkpoint": str(t5.id), "prompt": "summarize: the cat", "strategy": "sample",
               "seed": 5, "max_new_tokens": 6}
    connected, replies = converse(token_headers(alice), request)
    assert connected and replies[-1]["type"] == "done" and replies[-1]["decoding"]["seed"] == 5


@pytest.mark.parametrize("change, message", [
    ({"max_new_tokens": 0}, "max_new_tokens: Ensure this value is greater than or equal to 1."),
    ({"temperature": -1}, "temperature: Must be greater than 0."),
    ({"prompt": ""}, "prompt: This field may not be blank."),
    ({"checkpoint": "not-a-uuid"}, "checkpoint: Must be a valid UUID."),
])
def test_bad_requests_get_an_error_sentence(alice, alice_client, change, message):
    gpt = family_checkpoint(alice, "gpt")
    request = {"type": "generate", "checkpoint": str(gpt.id), "prompt": "the cat", **change}
    connected, replies = converse(session_headers(alice_client), request)
    assert connected and replies == [{"type": "error", "message": message}]


def test_another_users_checkpoint_is_not_found_and_the_socket_stays_usable(alice, bob_client):
    gpt = family_checkpoint(alice, "gpt")
    request = {"type": "generate", "checkpoint": str(gpt.id), "prompt": "the cat"}
    connected, replies = converse(session_headers(bob_client), request, {"type": "ping"},
                                  until=("error", "pong"), count=2)
    assert connected
    assert replies == [{"type": "error", "message": "Not found. It does not exist, or it is not yours."},
                       {"type": "pong"}] or replies == [{"type": "pong"}, {"type": "error", "message":
                                                        "Not found. It does not exist, or it is not yours."}]


def test_models_that_do_not_generate_and_unknown_messages_are_refused(alice, alice_client):
    bert = family_checkpoint(alice, "bert")
    connected, replies = converse(session_headers(alice_client), {"type": "generate", "checkpoint": str(bert.id),
                                                                  "prompt": "the cat"})
    assert replies[0]["type"] == "start" and replies[-1]["type"] == "error"
    assert "does not generate text" in replies[-1]["message"]
    connected, replies = converse(session_headers(alice_client), {"type": "dance"})
    assert replies[0]["type"] == "error" and "Unknown message" in replies[0]["message"]


def test_stop_ends_a_generation_with_what_was_shown(alice, alice_client, monkeypatch):
    from webapp.explorer import services

    def slow(*, checkpoint, prompt, decoding=None, chat=False):
        def pieces():
            for i in range(200):
                time.sleep(0.02)
                yield f" w{i}"
            return {"text": "never", "tokens": [], "stopped": "length"}
        return pieces()

    monkeypatch.setattr(services, "stream_generate", slow)
    gpt = family_checkpoint(alice, "gpt")

    async def go():
        comm = WebsocketCommunicator(application, PATH, headers=session_headers(alice_client))
        assert (await comm.connect(timeout=5))[0]
        await comm.send_json_to({"type": "generate", "checkpoint": str(gpt.id), "prompt": "the cat"})
        assert (await comm.receive_json_from(timeout=5))["type"] == "start"
        shown = [await comm.receive_json_from(timeout=5) for _ in range(3)]
        await comm.send_json_to({"type": "generate", "checkpoint": str(gpt.id), "prompt": "again"})
        await comm.send_json_to({"type": "stop"})
        replies = []
        while not replies or replies[-1]["type"] != "done":
            replies.append(await comm.receive_json_from(timeout=5))
        await comm.disconnect()
        return shown, replies

    shown, replies = async_to_sync(go)()
    assert [m["type"] for m in shown] == ["token"] * 3
    busy = [r for r in replies if r["type"] == "error"]
    assert busy and "One generation at a time" in busy[0]["message"]
    tokens = [r["text"] for r in shown + replies if r["type"] == "token"]
    assert replies[-1] == {"type": "done", "text": "".join(tokens), "stopped": "cancelled"}
    assert len(tokens) < 200
