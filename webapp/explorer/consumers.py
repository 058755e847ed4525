"""The explorer's generation socket: /ws/explore/generate/ streams a T5, GPT or UniLM checkpoint's
text token by token.

Protocol (JSON messages):
  client -> {"type": "generate", "checkpoint": id, "prompt": ..., and the decoding fields of
            POST /api/explore/generate/ (strategy, max_new_tokens, num_beams, temperature,
            top_k, top_p, seed)}
  server -> {"type": "start", "checkpoint": id}, then {"type": "token", "text": piece} per token,
            then {"type": "done", "text", "tokens", "stopped", "family", "prompt_tokens",
            "decoding"} ("text" is the whole generated text: show it in place of the pieces)
  client -> {"type": "stop"}: ends the generation; "done" then says "stopped": "cancelled"
  server -> {"type": "error", "message": a sentence} for a bad request, a checkpoint that is not
            yours (or no longer exists), or a model that cannot generate
  client -> {"type": "ping"} -> {"type": "pong"}

Only signed-in users connect (session cookie or API token); others are closed with 4403. Every
request is checked against the checkpoint's owner. The model runs in a worker thread (never on
the event loop), one generation per socket at a time.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.http import Http404

from trainer import jsonio
from trainer.errors import UserError
from webapp.explorer import services
from webapp.explorer.serializers import GenerateRequestSerializer, decoding_of
from webapp.runs.selectors import checkpoint_get

log = logging.getLogger(__name__)

FORBIDDEN = 4403
NOT_YOURS = "Not found. It does not exist, or it is not yours."


class _Unreadable(str):
    """A message that could not be read, as the sentence that answers it."""
OOPS = "Something went wrong on our side. The error has been logged."


class GenerateConsumer(AsyncJsonWebsocketConsumer):
    channel_layer_alias = None  # no channel layer: generating needs no Redis, so it works while Redis is down
    task: asyncio.Task | None = None
    stop: threading.Event | None = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=FORBIDDEN)
            return
        await self.accept()

    async def disconnect(self, code) -> None:
        if self.stop is not None:
            self.stop.set()  # the worker thread ends at its next token
        if self.task is not None and not self.task.done():
            self.task.cancel()

    @classmethod
    async def decode_json(cls, text_data: str) -> Any:
        """Messages go through the bounded reader: one nested too deep, or not JSON at all, is
        answered with a sentence (receive_json gets it as an _Unreadable), not a crash."""
        try:
            return jsonio.loads(text_data, subject="The message")
        except ValueError as e:
            return _Unreadable(str(e) if isinstance(e, jsonio.JsonNestingError) else "The message is not valid JSON.")

    async def receive_json(self, content: Any, **kwargs) -> None:
        if isinstance(content, _Unreadable):
            await self._error(str(content))
            return
        kind = content.get("type") if isinstance(content, dict) else None
        if kind == "ping":
            await self.send_json({"type": "pong"})
        elif kind == "stop":
            if self.stop is not None:
                self.stop.set()
        elif kind == "generate":
            if self.task is not None and not self.task.done():
                await self._error("One generation at a time: wait for this one to finish, or stop it first.")
                return
            self.stop = threading.Event()
            self.task = asyncio.create_task(self._generate(content, self.stop))
        else:
            await self._error('Unknown message: send {"type": "generate", "checkpoint": ..., "prompt": ...}, '
                              '{"type": "stop"} or {"type": "ping"}.')

    async def _error(self, message: str) -> None:
        await self.send_json({"type": "error", "message": message})

    async def _generate(self, content: dict, stop: threading.Event) -> None:
        try:
            checked = await self._checked(content)
            if isinstance(checked, str):
                await self._error(checked)
                return
            checkpoint, data = checked
            await self.send_json({"type": "start", "checkpoint": str(checkpoint.id)})
            await self._stream(checkpoint, data, stop)
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug: logged, and the page still gets a sentence
            log.exception("Streaming generation failed")
            await self._error(OOPS)

    @database_sync_to_async
    def _checked(self, content: dict) -> tuple[Any, dict] | str:
        """(the user's checkpoint, validated fields), or the sentence that refuses the request."""
        ser = GenerateRequestSerializer(data={k: v for k, v in content.items() if k != "type"})
        if not ser.is_valid():
            return _sentence(ser.errors)
        try:
            checkpoint = checkpoint_get(self.scope["user"], ser.validated_data["checkpoint"])
        except Http404:
            return NOT_YOURS
        return checkpoint, ser.validated_data

    async def _stream(self, checkpoint, data: dict, stop: threading.Event) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()

        def put(item: tuple[str, Any]) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, item)

        def work() -> None:
            """Runs in a worker thread: the model's steps, each piece handed to the event loop."""
            shown = []
            try:
                pieces = services.stream_generate(checkpoint=checkpoint, prompt=data["prompt"],
                                                  decoding=decoding_of(data), chat=data["chat"])
                while True:
                    if stop.is_set():
                        pieces.close()
                        put(("done", {"text": "".join(shown), "stopped": "cancelled"}))
                        return
                    try:
                        piece = next(pieces)
                    except StopIteration as end:
                        put(("done", end.value))
                        return
                    shown.append(piece)
                    put(("token", piece))
            except UserError as e:
                put(("error", str(e)))
            except Exception:
                log.exception("Streaming generation failed")
                put(("error", OOPS))

        worker = loop.run_in_executor(None, work)
        try:
            while True:
                kind, value = await queue.get()
                if kind == "token":
                    await self.send_json({"type": "token", "text": value})
                    continue
                if kind == "error":
                    await self._error(value)
                else:
                    await self.send_json({"type": "done", **{k: value[k] for k in (
                        "text", "tokens", "stopped", "family", "prompt_tokens", "decoding") if k in value}})
                break
        finally:
            stop.set()
            await asyncio.shield(worker)


def _sentence(errors: Any) -> str:
    """A serializer's errors as one sentence: "max_new_tokens: Ensure this value is ..."."""
    if isinstance(errors, dict):
        return " ".join(f"{field}: {_sentence(value)}" if field != "non_field_errors" else _sentence(value)
                        for field, value in errors.items())
    if isinstance(errors, (list, tuple)):
        return " ".join(_sentence(e) for e in errors)
    return str(errors)
