"""The HTTP side of the model server: OpenAI's API for one checkpoint, on Starlette.

    GET  /health                        {"status": "ok", "model"} (no key needed)
    GET  /v1/models, /v1/models/{id}    the one model
    GET  /v1/capabilities               {"model", "endpoints": the paths this checkpoint answers}
    POST /v1/completions                T5, GPT and UniLM checkpoints (stream: server-sent events)
    POST /v1/chat/completions           GPT checkpoints of an SFT run (their chat template)
    POST /v1/embeddings                 encoders, T5's encoder, ELMo (float or base64)
    POST /v1/fill-mask                  Hugging Face's inference shapes: {"inputs", "parameters"}
    POST /v1/text-classification
    POST /v1/token-classification
    POST /v1/question-answering

Requests carry `Authorization: Bearer KEY` when the server has keys. Every failure is OpenAI's
error shape {"error": {"message", "type", "param", "code"}} with its status (400 a bad field or a
prompt that does not fit, 401 a missing or wrong key, 404 an unknown model or path, 413 a body
too large, 429 a full queue with Retry-After, 500 a bug: a sentence, never a traceback).

Starlette (the ASGI toolkit FastAPI is built on; uvicorn serves it, as it serves the web app)
gives routing, streaming responses that stop when the client disconnects, and nothing else:
the request checks below are OpenAI's, written out. Generation runs on the engine's thread
(trainer.serve.engine), embeddings on the batcher's, so the event loop stays free: /health and
/v1/models answer while a long generation runs.
"""
from __future__ import annotations

import asyncio
import base64
import hmac
import json
import logging
import math
import random
import time
import uuid
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Sequence

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from trainer.errors import MESSAGE_LIMIT, InferenceError, UserError
from trainer.inference import generate
from trainer.inference.generate import Decoding
from trainer.serve.batcher import EmbeddingBatcher
from trainer.serve.engine import Busy, Choice, Engine, Event
from trainer.serve.model import MAX_EMBEDDING_INPUTS, ServedModel

log = logging.getLogger(__name__)

MAX_BODY = 8 * 1024 * 1024
MAX_N = 8
MAX_STOP = 4
DEFAULT_MAX_TOKENS = 16  # OpenAI's default for completions
RETRY_AFTER_S = 1
OWNER = "lm-workbench"


class APIError(Exception):
    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.headers = headers or {}


def error_response(status: int, message: str, *, type: str = "invalid_request_error", param: str | None = None,
                   code: str | None = None, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message[:MESSAGE_LIMIT * 2], "type": type, "param": param,
                                   "code": code}}, status_code=status, headers=headers)


# ---------------------------------------------------------------------------- request fields
class Body:
    """A request's JSON object, read field by field with OpenAI's checks (APIError(400) naming the field)."""

    def __init__(self, data: Any, known: Sequence[str]) -> None:
        if not isinstance(data, dict):
            raise APIError(400, "The request body must be a JSON object.")
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise APIError(400, f"Unrecognized request argument supplied: {', '.join(unknown)}. This endpoint reads "
                                f"{', '.join(known)}.", param=unknown[0], code="unknown_parameter")
        self.data = data

    def get(self, name: str, default: Any = None) -> Any:
        value = self.data.get(name)
        return default if value is None else value

    def whole(self, name: str, default: int | None, low: int, high: int | None = None) -> int | None:
        value = self.get(name, default)
        if value is None:
            return None
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise APIError(400, f"{name} must be a whole number, not {value!r}.", param=name)
        if value < low or (high is not None and value > high):
            bound = f"between {low} and {high}" if high is not None else f"at least {low}"
            raise APIError(400, f"{name} must be {bound}, not {value}.", param=name)
        return value

    def number(self, name: str, default: float, low: float, high: float, *, low_open: bool = False) -> float:
        value = self.get(name, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise APIError(400, f"{name} must be a number, not {value!r}.", param=name)
        if value < low or value > high or (low_open and value == low):
            raise APIError(400, f"{name} must be {'over' if low_open else 'at least'} {low:g} and at most {high:g}, "
                                f"not {value:g}.", param=name)
        return float(value)

    def flag(self, name: str, default: bool = False) -> bool:
        value = self.get(name, default)
        if not isinstance(value, bool):
            raise APIError(400, f"{name} must be true or false, not {value!r}.", param=name)
        return value

    def unsupported(self, name: str, allowed: Any, why: str) -> None:
        value = self.data.get(name)
        if value is not None and value not in allowed:
            raise APIError(400, f"{name} is not supported by this server: {why}.", param=name,
                           code="unsupported_parameter")


async def read_json(request: Request) -> Any:
    raw = await request.body()
    if len(raw) > MAX_BODY:
        raise APIError(413, f"The request body is {len(raw):,} bytes; this server reads at most {MAX_BODY:,}.")
    try:
        return json.loads(raw or b"null")
    except ValueError as e:
        raise APIError(400, f"The request body is not valid JSON ({e}).") from None


# ---------------------------------------------------------------------------- the app
class Server:
    """The app's state: the model, its generation engine and its embedding batcher."""

    def __init__(self, served: ServedModel, *, keys: Sequence[str] = (), max_batch: int = 16,
                 max_waiting: int = 64) -> None:
        self.served = served
        self.keys = [k for k in keys if k]
        self.engine = Engine(lambda: served.loaded, max_batch=max_batch, max_waiting=max_waiting)
        self.batcher = EmbeddingBatcher(served.embed)
        self.endpoints = served.endpoints

    # ------------------------------------------------------------------------ checks
    def authorised(self, request: Request) -> bool:
        if not self.keys:
            return True
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        token = token.strip()
        return scheme.lower() == "bearer" and any(hmac.compare_digest(token.encode(), k.encode()) for k in self.keys)

    def check_model(self, name: Any, *, required: bool = True) -> None:
        if name is None and not required:
            return
        if not isinstance(name, str) or not name:
            raise APIError(400, "model is required: name the model this server serves "
                                f"({self.served.name!r}).", param="model")
        if name != self.served.name:
            raise APIError(404, f"The model {name!r} does not exist here; this server serves {self.served.name!r} "
                                f"(GET /v1/models lists it).", param="model", code="model_not_found")

    def require(self, path: str, what: str) -> None:
        if path not in self.endpoints:
            loaded = self.served.loaded
            offers = ", ".join(p for p in self.endpoints if p != "/v1/models")
            raise APIError(400, f"This {loaded.label} checkpoint cannot answer {what}; it answers {offers}.",
                           param="model", code="unsupported_endpoint")

    # ------------------------------------------------------------------------ shapes
    def model_object(self) -> dict[str, Any]:
        return {"id": self.served.name, "object": "model", "created": self.served.created, "owned_by": OWNER}

    # ------------------------------------------------------------------------ generation
    def decoding(self, body: Body, max_new: int) -> tuple[Decoding, int]:
        temperature = body.number("temperature", 1.0, 0.0, 2.0)
        top_p = body.number("top_p", 1.0, 0.0, 1.0, low_open=True)
        seed = body.whole("seed", None, 0, 2**63 - 1)
        if temperature == 0:
            return Decoding("greedy", max_new, 1, 1.0, 0, 1.0, None), 0
        if seed is None:
            seed = random.SystemRandom().randrange(2**31)
        return Decoding("sample", max_new, 1, temperature, 0, top_p, seed), seed

    def prepared(self, text: str | None, messages: list | None, max_tokens: int | None, param: str):
        """(the prompt made ready, the max_tokens it gets): APIError when the prompt or max_tokens does
        not fit the model's context (the lengths named)."""
        loaded = self.served.loaded
        context = self.served.context
        asked = max_tokens if max_tokens is not None else context
        try:
            if messages is not None:
                p = generate.chat_prompt(loaded, messages, asked)
            else:
                p = generate.prepare(loaded, text, asked)
        except InferenceError as e:
            too_long = "tokens long" in str(e)
            raise APIError(400, str(e), param=param, code="context_length_exceeded" if too_long else None) from None
        if max_tokens is not None and (p.max_new_tokens < max_tokens or max_tokens > context):
            room = min(p.max_new_tokens, context)
            prompt_part = f"the prompt is {len(p.input_ids)} tokens long and " if p.context else ""
            raise APIError(400, f"max_tokens is {max_tokens}, but {prompt_part}this model can write at most {room} "
                                f"tokens here (its context is {context} tokens). Ask for at most {room}.",
                           param="max_tokens", code="context_length_exceeded")
        if max_tokens is None:
            from dataclasses import replace

            p = replace(p, max_new_tokens=min(p.max_new_tokens, context))
        return p

    def submit(self, prompts: list, body: Body, n: int, emit) -> tuple[list[Choice], list[int]]:
        stop = stop_strings(body.data.get("stop"))
        choices, prompt_tokens = [], []
        for i, p in enumerate(prompts):
            prompt_tokens.append(len(p.input_ids))
            base, seed = self.decoding(body, p.max_new_tokens)
            for j in range(n):
                opts = base if not base.sampling else Decoding("sample", p.max_new_tokens, 1, base.temperature, 0,
                                                                base.top_p, seed + j)
                choices.append(Choice(p, opts, emit, index=i * n + j, stop=stop))
        try:
            self.engine.submit(choices)
        except Busy as e:
            raise APIError(429, str(e), type="rate_limit_error", code="rate_limit_exceeded",
                           headers={"Retry-After": str(RETRY_AFTER_S)}) from None
        return choices, prompt_tokens


def stop_strings(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise APIError(400, "stop must be a string or a list of strings.", param="stop")
    if len(value) > MAX_STOP:
        raise APIError(400, f"stop holds {len(value)} strings; give at most {MAX_STOP}.", param="stop")
    return tuple(s for s in value if s)


def prompt_texts(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(s, str) for s in value):
        return list(value)
    if isinstance(value, list) and value and all(isinstance(s, int) for s in value):
        raise APIError(400, "prompt as token ids is not supported by this server; send the text.", param="prompt")
    raise APIError(400, "prompt must be a string or a non-empty list of strings.", param="prompt")


def chat_messages(value: Any) -> list[dict[str, str]]:
    if not isinstance(value, list) or not value:
        raise APIError(400, "messages must be a non-empty list of {role, content} objects.", param="messages")
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant"):
            raise APIError(400, f"messages[{i}] must have a role of system, user or assistant.", param="messages")
        content = m.get("content")
        if isinstance(content, list):  # content parts: only text ones
            if not all(isinstance(part, dict) and part.get("type") == "text" for part in content):
                raise APIError(400, f"messages[{i}]: only text content is supported by this server.", param="messages")
            content = "".join(str(part.get("text", "")) for part in content)
        if not isinstance(content, str):
            raise APIError(400, f"messages[{i}].content must be a string.", param="messages")
        out.append({"role": m["role"], "content": content})
    return out


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def sse(data: Any) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


async def collect(request: Request, events: asyncio.Queue, choices: list[Choice]) -> dict[int, Event]:
    """Every choice's "done" event; the choices are cancelled if the client goes away first."""
    done: dict[int, Event] = {}
    try:
        while len(done) < len(choices):
            try:
                event = await asyncio.wait_for(events.get(), timeout=0.25)
            except asyncio.TimeoutError:
                if await request.is_disconnected():
                    raise asyncio.CancelledError from None
                continue
            if event.kind == "error":
                raise APIError(500, event.text, type="server_error")
            if event.kind == "done":
                done[event.index] = event
        return done
    finally:
        for choice in choices:
            choice.cancel()


def streamed(events: asyncio.Queue, choices: list[Choice], opening: list[dict], piece, closing) -> StreamingResponse:
    """Server-sent events of a request's choices: `opening` chunks, then piece(index, text, None) for
    each text piece and piece(index, "", finish_reason) as each choice ends, closing(completion
    tokens) if it gives a chunk (the usage), then [DONE]. The choices are cancelled when the client
    goes away (Starlette ends the generator)."""
    async def lines() -> AsyncIterator[str]:
        completion = 0
        try:
            for data in opening:
                yield sse(data)
            left = len(choices)
            while left:
                event = await events.get()
                if event.kind == "delta":
                    yield sse(piece(event.index, event.text, None))
                    continue
                left -= 1
                if event.kind == "done":
                    completion += event.tokens
                    yield sse(piece(event.index, "", event.finish_reason))
                else:
                    yield sse({"error": {"message": event.text, "type": "server_error", "param": None, "code": None}})
            last = closing(completion)
            if last is not None:
                yield sse(last)
            yield "data: [DONE]\n\n"
        finally:
            for c in choices:
                c.cancel()

    return StreamingResponse(lines(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


def queue_for(loop: asyncio.AbstractEventLoop) -> tuple[asyncio.Queue, Any]:
    events: asyncio.Queue = asyncio.Queue()
    return events, lambda event: loop.call_soon_threadsafe(events.put_nowait, event)


# ---------------------------------------------------------------------------- endpoints
COMPLETION_FIELDS = ("model", "prompt", "max_tokens", "temperature", "top_p", "n", "stream", "stream_options", "stop",
                     "seed", "echo", "user", "logprobs", "best_of", "suffix", "logit_bias", "presence_penalty",
                     "frequency_penalty")
CHAT_FIELDS = ("model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "n", "stream",
               "stream_options", "stop", "seed", "user", "logprobs", "top_logprobs", "logit_bias", "presence_penalty",
               "frequency_penalty", "response_format", "tools", "tool_choice", "parallel_tool_calls", "store",
               "metadata")


def _common_unsupported(body: Body) -> None:
    body.unsupported("logit_bias", ({},), "it does not bias logits")
    body.unsupported("presence_penalty", (0, 0.0), "it applies no penalties (leave it at 0)")
    body.unsupported("frequency_penalty", (0, 0.0), "it applies no penalties (leave it at 0)")


def _include_usage(body: Body) -> bool:
    options = body.data.get("stream_options")
    if options is None:
        return False
    if not isinstance(options, dict) or set(options) - {"include_usage", "include_obfuscation"}:
        raise APIError(400, "stream_options may hold include_usage only.", param="stream_options")
    if not body.flag("stream"):
        raise APIError(400, "stream_options is only allowed when stream is true.", param="stream_options")
    return bool(options.get("include_usage", False))


async def completions(request: Request) -> Response:
    server: Server = request.app.state.server
    body = Body(await read_json(request), COMPLETION_FIELDS)
    server.check_model(body.data.get("model"))
    server.require("/v1/completions", "text completions")
    _common_unsupported(body)
    body.unsupported("logprobs", (0,), "it does not return log-probabilities")
    body.unsupported("suffix", ("",), "it does not insert text")
    texts = prompt_texts(body.data.get("prompt"))
    n = body.whole("n", 1, 1, MAX_N)
    body.unsupported("best_of", (n,), "best_of must equal n")
    max_tokens = body.whole("max_tokens", DEFAULT_MAX_TOKENS, 1)
    stream, echo = body.flag("stream"), body.flag("echo")
    include_usage = _include_usage(body)
    prompts = [server.prepared(t, None, max_tokens, "prompt") for t in texts]
    events, emit = queue_for(asyncio.get_running_loop())
    choices, prompt_tokens = server.submit(prompts, body, n, emit)
    ident, created, name = f"cmpl-{uuid.uuid4().hex}", int(time.time()), server.served.name

    def chunk(choices_out: list, extra: dict | None = None) -> dict:
        return {"id": ident, "object": "text_completion", "created": created, "model": name, "choices": choices_out,
                "system_fingerprint": None, **(extra or {})}

    if stream:
        def piece(index: int, text: str, finish: str | None) -> dict:
            return chunk([{"text": text, "index": index, "logprobs": None, "finish_reason": finish}])

        opening = [piece(c.index, texts[c.index // n], None) for c in choices] if echo else []
        return streamed(events, choices, opening, piece, lambda tokens: chunk([], {"usage": usage(
            sum(prompt_tokens), tokens)}) if include_usage else None)
    done = await collect(request, events, choices)
    out = [{"text": (texts[i // n] if echo else "") + done[i].text, "index": i, "logprobs": None,
            "finish_reason": done[i].finish_reason} for i in sorted(done)]
    return JSONResponse(chunk(out, {"usage": usage(sum(prompt_tokens), sum(e.tokens for e in done.values()))}))


async def chat_completions(request: Request) -> Response:
    server: Server = request.app.state.server
    body = Body(await read_json(request), CHAT_FIELDS)
    server.check_model(body.data.get("model"))
    if "/v1/chat/completions" not in server.endpoints:
        loaded = server.served.loaded
        hint = (" Use /v1/completions to continue a text as it is." if "/v1/completions" in server.endpoints else "")
        raise APIError(400, f"This {loaded.label} checkpoint cannot chat: {generate.CHAT_REFUSAL}"
                            if loaded.family.generates else
                            f"This {loaded.label} checkpoint cannot chat: it does not generate text.{hint}",
                       param="model", code="unsupported_endpoint")
    _common_unsupported(body)
    body.unsupported("logprobs", (False,), "it does not return log-probabilities")
    body.unsupported("tools", ([],), "its models call no tools")
    body.unsupported("tool_choice", ("none",), "its models call no tools")
    fmt = body.data.get("response_format")
    if fmt is not None and fmt != {"type": "text"}:
        raise APIError(400, "response_format is not supported by this server: it writes plain text only.",
                       param="response_format", code="unsupported_parameter")
    messages = chat_messages(body.data.get("messages"))
    n = body.whole("n", 1, 1, MAX_N)
    max_tokens = body.whole("max_completion_tokens", None, 1)
    if max_tokens is None:
        max_tokens = body.whole("max_tokens", None, 1)
    stream = body.flag("stream")
    include_usage = _include_usage(body)
    prompt = server.prepared(None, messages, max_tokens, "messages")
    events, emit = queue_for(asyncio.get_running_loop())
    choices, prompt_tokens = server.submit([prompt], body, n, emit)
    ident, created, name = f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), server.served.name

    def chunk(choices_out: list, extra: dict | None = None) -> dict:
        return {"id": ident, "object": "chat.completion.chunk", "created": created, "model": name,
                "choices": choices_out, "system_fingerprint": None, **(extra or {})}

    if stream:
        def piece(index: int, text: str, finish: str | None) -> dict:
            return chunk([{"index": index, "delta": {"content": text} if finish is None else {}, "logprobs": None,
                           "finish_reason": finish}])

        opening = [chunk([{"index": c.index, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                           "finish_reason": None}]) for c in choices]
        return streamed(events, choices, opening, piece, lambda tokens: chunk([], {"usage": usage(
            sum(prompt_tokens), tokens)}) if include_usage else None)
    done = await collect(request, events, choices)
    out = [{"index": i, "message": {"role": "assistant", "content": done[i].text, "refusal": None},
            "logprobs": None, "finish_reason": done[i].finish_reason} for i in sorted(done)]
    return JSONResponse({"id": ident, "object": "chat.completion", "created": created, "model": name, "choices": out,
                         "system_fingerprint": None,
                         "usage": usage(sum(prompt_tokens), sum(e.tokens for e in done.values()))})


async def embeddings(request: Request) -> Response:
    server: Server = request.app.state.server
    body = Body(await read_json(request), ("model", "input", "encoding_format", "dimensions", "user"))
    server.check_model(body.data.get("model"))
    server.require("/v1/embeddings", "embeddings")
    value = body.data.get("input")
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        if isinstance(texts, list) and texts and all(isinstance(t, (int, list)) for t in texts):
            raise APIError(400, "input as token ids is not supported by this server; send the text.", param="input")
        raise APIError(400, "input must be a string or a non-empty list of strings.", param="input")
    if len(texts) > MAX_EMBEDDING_INPUTS:
        raise APIError(400, f"input holds {len(texts)} texts; send at most {MAX_EMBEDDING_INPUTS} at once.",
                       param="input")
    for i, t in enumerate(texts):
        if not t.strip():
            raise APIError(400, f"input[{i}] is empty; every input must hold some text.", param="input")
    fmt = body.get("encoding_format", "float")
    if fmt not in ("float", "base64"):
        raise APIError(400, f"encoding_format must be float or base64, not {fmt!r}.", param="encoding_format")
    try:
        tokens = [server.served.check_embedding_input(t) for t in texts]
    except InferenceError as e:
        raise APIError(400, str(e), param="input", code="context_length_exceeded") from None
    vectors = await server.batcher.embed(texts)
    width = int(vectors.shape[-1])
    dims = body.whole("dimensions", width, 1)
    if dims != width:
        raise APIError(400, f"This model's embeddings have {width} dimensions; dimensions cannot change that "
                            f"(leave it out or give {width}).", param="dimensions")
    data = []
    for i, row in enumerate(vectors):
        if fmt == "base64":
            embedding: Any = base64.b64encode(row.float().numpy().astype("<f4").tobytes()).decode("ascii")
        else:
            embedding = [float(x) for x in row.tolist()]
        data.append({"object": "embedding", "index": i, "embedding": embedding})
    return JSONResponse({"object": "list", "data": data, "model": server.served.name,
                         "usage": {"prompt_tokens": sum(tokens), "total_tokens": sum(tokens)}})


def _task_body(body: Any, server: Server, path: str, what: str) -> tuple[Any, dict]:
    """Hugging Face's inference body {"inputs", "parameters", "model"?} -> (inputs, parameters)."""
    checked = Body(body, ("inputs", "parameters", "model"))
    server.check_model(checked.data.get("model"), required=False)
    server.require(path, what)
    parameters = checked.get("parameters", {})
    if not isinstance(parameters, dict):
        raise APIError(400, "parameters must be a JSON object.", param="parameters")
    return checked.data.get("inputs"), parameters


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise APIError(400, f"{name} must be a non-empty string.", param=name)
    return value


async def _in_thread(fn, *args):
    return await asyncio.get_running_loop().run_in_executor(None, fn, *args)


async def fill_mask(request: Request) -> Response:
    server: Server = request.app.state.server
    inputs, parameters = _task_body(await read_json(request), server, "/v1/fill-mask", "fill-mask")
    unknown = sorted(set(parameters) - {"top_k"})
    if unknown:
        raise APIError(400, f"Unknown parameter(s) for fill-mask: {', '.join(unknown)} (it reads top_k).",
                       param=unknown[0])
    top_k = Body(parameters, ("top_k",)).whole("top_k", 5, 1)
    found = await _in_thread(server.served.fill_mask, _text(inputs, "inputs"), top_k)
    return JSONResponse(found[0] if len(found) == 1 else found)


async def text_classification(request: Request) -> Response:
    server: Server = request.app.state.server
    inputs, _ = _task_body(await read_json(request), server, "/v1/text-classification", "text classification")
    if isinstance(inputs, dict):
        text, pair = _text(inputs.get("text"), "inputs.text"), inputs.get("text_pair")
        if pair is not None and not isinstance(pair, str):
            raise APIError(400, "inputs.text_pair must be a string.", param="inputs.text_pair")
    else:
        text, pair = _text(inputs, "inputs"), None
    return JSONResponse(await _in_thread(server.served.classify, text, pair))


async def token_classification(request: Request) -> Response:
    server: Server = request.app.state.server
    inputs, _ = _task_body(await read_json(request), server, "/v1/token-classification", "token classification")
    return JSONResponse(await _in_thread(server.served.tag, _text(inputs, "inputs")))


async def question_answering(request: Request) -> Response:
    server: Server = request.app.state.server
    inputs, _ = _task_body(await read_json(request), server, "/v1/question-answering", "question answering")
    if not isinstance(inputs, dict):
        raise APIError(400, "inputs must be an object {question, context}.", param="inputs")
    question, context = _text(inputs.get("question"), "inputs.question"), _text(inputs.get("context"), "inputs.context")
    return JSONResponse(await _in_thread(server.served.answer, question, context))


async def health(request: Request) -> Response:
    server: Server = request.app.state.server
    return JSONResponse({"status": "ok", "model": server.served.name, "waiting": server.engine.waiting,
                         "generating": server.engine.active, "finished": server.engine.finished,
                         "cancelled": server.engine.cancelled})


async def models(request: Request) -> Response:
    server: Server = request.app.state.server
    return JSONResponse({"object": "list", "data": [server.model_object()]})


async def model(request: Request) -> Response:
    server: Server = request.app.state.server
    server.check_model(request.path_params["name"])
    return JSONResponse(server.model_object())


async def capabilities(request: Request) -> Response:
    server: Server = request.app.state.server
    return JSONResponse({"model": server.served.name, "family": server.served.loaded.family_name,
                         "endpoints": server.endpoints, "pooling": server.served.pooling,
                         "context": server.served.context})


# ---------------------------------------------------------------------------- wiring
class Auth:
    """ASGI middleware: a Bearer key on every path but /health (401 in OpenAI's shape otherwise)."""

    def __init__(self, app: Any, server: Server) -> None:
        self.app, self.server = app, server

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] != "/health":
            request = Request(scope)
            if not self.server.authorised(request):
                given = bool(request.headers.get("authorization"))
                message = ("Incorrect API key provided. Use the key this server was started with "
                           "(Authorization: Bearer KEY)." if given else
                           "You didn't provide an API key. Send it as Authorization: Bearer KEY.")
                response = error_response(401, message, code="invalid_api_key",
                                          headers={"WWW-Authenticate": "Bearer"})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, APIError)
    return error_response(exc.status, exc.message, type=exc.type, param=exc.param, code=exc.code, headers=exc.headers)


async def _user_error(request: Request, exc: Exception) -> Response:
    return error_response(400, str(exc))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        return error_response(404, f"There is no {request.url.path} here; GET /v1/capabilities lists what this server "
                                   f"answers.", code="not_found")
    if exc.status_code == 405:
        return error_response(405, f"{request.method} is not allowed on {request.url.path}.", code="method_not_allowed")
    return error_response(exc.status_code, str(exc.detail))


async def _bug(request: Request, exc: Exception) -> Response:
    log.exception("request failed", exc_info=exc)
    return error_response(500, "The server hit an internal error answering this request. The details are in its log; "
                               "try again.", type="server_error")


def build_app(server: Server) -> Any:
    @asynccontextmanager
    async def lifespan(app: Starlette):
        server.engine.start()
        server.batcher.start()
        try:
            yield
        finally:
            server.engine.stop()
            server.batcher.stop()

    app = Starlette(routes=[
        Route("/health", health), Route("/v1/models", models), Route("/v1/models/{name:path}", model),
        Route("/v1/capabilities", capabilities),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/embeddings", embeddings, methods=["POST"]),
        Route("/v1/fill-mask", fill_mask, methods=["POST"]),
        Route("/v1/text-classification", text_classification, methods=["POST"]),
        Route("/v1/token-classification", token_classification, methods=["POST"]),
        Route("/v1/question-answering", question_answering, methods=["POST"]),
    ], exception_handlers={APIError: _api_error, UserError: _user_error, HTTPException: _http_error,
                           Exception: _bug}, lifespan=lifespan)
    app.state.server = server
    return Auth(app, server)
