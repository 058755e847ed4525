"""Embedding requests batched together: one thread runs the encoder on every text that arrived
within a few milliseconds of the first (up to MAX_TEXTS), and each request gets its own rows.

A request's vectors are its texts' rows of that batch; the encoder masks the padding, so a text's
vector does not depend on what it was batched with (beyond float rounding).
"""
from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from typing import Any, Callable, Sequence

log = logging.getLogger(__name__)

MAX_TEXTS = 64
WINDOW_S = 0.004


class EmbeddingBatcher:
    def __init__(self, embed: Callable[[Sequence[str]], Any], *, max_texts: int = MAX_TEXTS,
                 window_s: float = WINDOW_S) -> None:
        self._embed = embed  # texts -> (N, D) tensor
        self.max_texts = max_texts
        self.window_s = window_s
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="embeddings", daemon=True)

    def start(self) -> "EmbeddingBatcher":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=10)

    async def embed(self, texts: list[str]) -> Any:
        """The texts' vectors (N, D), computed with whatever else is waiting."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._queue.put((texts, future, loop))
        return await future

    def _loop(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            jobs, count = [first], len(first[0])
            deadline = time.monotonic() + self.window_s
            while count < self.max_texts:
                try:
                    job = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if job is None:
                    self._queue.put(None)
                    break
                jobs.append(job)
                count += len(job[0])
            self._run(jobs)

    def _run(self, jobs: list) -> None:
        texts = [t for job in jobs for t in job[0]]
        try:
            vectors = self._embed(texts)
        except Exception as e:  # noqa: BLE001 (each waiting request hears it)
            for _, future, loop in jobs:
                loop.call_soon_threadsafe(_settle, future, None, e)
            return
        start = 0
        for batch_texts, future, loop in jobs:
            rows = vectors[start:start + len(batch_texts)]
            start += len(batch_texts)
            loop.call_soon_threadsafe(_settle, future, rows, None)


def _settle(future: asyncio.Future, value: Any, error: BaseException | None) -> None:
    if future.done():  # the client went away
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)
