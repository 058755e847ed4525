"""Websockets opened while Redis (the channel layer) is down: a clean close with 1013, "Try Again Later".

A consumer with a channel layer subscribes in Redis before its connect() runs (Channels makes its
channel in the consumer's __call__), and the run socket joins its group in connect(); with Redis
down either raises redis's ConnectionError, which the ASGI server answers with an HTTP 500 at the
handshake. TryAgainOnOutage accepts such a socket and closes it at once with TRY_AGAIN, so a client
knows to come back later (the dashboard reconnects with a growing delay); a socket already answered
is the consumer's to handle.
"""
from __future__ import annotations

import logging

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

log = logging.getLogger(__name__)

TRY_AGAIN = 1013  # RFC 6455: "Try Again Later"
LAYER_DOWN = (RedisConnectionError, RedisTimeoutError)


class TryAgainOnOutage:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "websocket":
            return await self.app(scope, receive, send)
        seen = {"connect": False, "answered": False}

        async def receive_seen():
            message = await receive()
            seen["connect"] = seen["connect"] or message["type"] == "websocket.connect"
            return message

        async def send_seen(message):
            seen["answered"] = seen["answered"] or message["type"] in ("websocket.accept", "websocket.close")
            await send(message)

        try:
            return await self.app(scope, receive_seen, send_seen)
        except LAYER_DOWN as exc:
            if seen["answered"]:
                raise
            log.warning("Websocket %s closed with %s (try again later): the channel layer's Redis is unreachable (%s)",
                        scope.get("path"), TRY_AGAIN, exc)
        if not seen["connect"] and (await receive())["type"] != "websocket.connect":
            return  # the client left before its handshake
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.close", "code": TRY_AGAIN})
