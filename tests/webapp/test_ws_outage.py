"""Websockets while Redis is down: the run socket is accepted and closed with 1013 (try again later)
instead of failing its handshake with a 500, and works again once Redis is back; the explorer's
generation socket needs no Redis at all. Through the real ASGI application, with a redis-server
of the test's own that is stopped and started again on the same port."""
from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator

from tests.livestack import RedisServer
from tests.webapp.runs_helpers import make_run
from webapp.server.ws_outage import TRY_AGAIN
from webapp.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)


def headers(user) -> list[tuple[bytes, bytes]]:
    from rest_framework.authtoken.models import Token

    token, _ = Token.objects.get_or_create(user=user)
    return [(b"origin", b"http://localhost"), (b"authorization", f"Token {token.key}".encode())]


def open_socket(path: str, user, first: dict | None = None):
    """(accepted, the first message: the server's JSON, or the close event), then disconnect."""
    sent = headers(user)

    async def go():
        comm = WebsocketCommunicator(application, path, headers=sent)
        connected, code = await comm.connect(timeout=10)
        if not connected:
            return False, code
        if first is not None:
            await comm.send_json_to(first)
        output = await comm.receive_output(timeout=10)
        if output["type"] == "websocket.send":
            output = json.loads(output["text"])
        await comm.disconnect()
        return True, output
    return async_to_sync(go)()


@pytest.fixture
def redis_server(tmp_path, settings):
    server = RedisServer(tmp_path / "redis").start()
    settings.CHANNEL_LAYERS = {"default": {**settings.CHANNEL_LAYERS["default"], "CONFIG": {"hosts": [server.url]}}}
    yield server
    server.stop()


def test_the_run_socket_says_try_again_while_redis_is_down_and_works_once_it_is_back(alice, redis_server):
    run = make_run(alice)
    path = f"/ws/runs/{run.id}/"
    accepted, hello = open_socket(path, alice)
    assert accepted and hello["type"] == "hello"

    redis_server.stop()
    accepted, closed = open_socket(path, alice)
    assert accepted, closed  # a handshake that failed (HTTP 500 or 403) says False here
    assert closed == {"type": "websocket.close", "code": TRY_AGAIN}

    redis_server.start()
    accepted, hello = open_socket(path, alice)
    assert accepted and hello["type"] == "hello"


def test_the_generation_socket_needs_no_redis(alice, redis_server):
    redis_server.stop()
    accepted, pong = open_socket("/ws/explore/generate/", alice, first={"type": "ping"})
    assert accepted and pong == {"type": "pong"}
