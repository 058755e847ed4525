"""The web process's HTTP handler: each request in one hop onto a small, lasting pool of threads.

Django's own ASGI handler gives every request a new thread (a ThreadSensitiveContext makes a
one-thread executor per request and shuts it down at the end), a new database connection (it
must not keep one: the next request has another thread), and about four hand-offs between the
event loop and that thread (the request_started signal, the middleware chain and the view, the
request_finished signal). Each hand-off is a wake-up of the event loop, which also forwards the
websockets' live events. Under load (issue 11, point 8: 30 API readers and 20 dashboards on one
run, on 2 cores) that overhead was most of a request's cost.

Here the body is read on the event loop (as Django does), then the whole synchronous request —
request_started, the synchronous middleware chain, the view, and for a response held in memory
request_finished (response.close()) — runs in one call on one of WEB_REQUEST_THREADS lasting
threads, each with its own lasting database connection (CONN_MAX_AGE, with a health check), and
the response is sent from the event loop. At most WEB_REQUEST_THREADS requests are handed to
the threads at once; the others wait on the event loop, costing nothing.

A streamed response (a file download) is consumed and closed as Django's handler does. A body
the full disk refuses while it is read is answered with 507 and a sentence, not a 500.
"""
from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor, wait

from django.conf import settings
from django.core import signals
from django.db import connections
from django.core.exceptions import RequestAborted
from django.core.handlers import base
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.http import FileResponse
from django.urls import set_script_prefix


class PooledASGIHandler(ASGIHandler):
    def __init__(self) -> None:
        base.BaseHandler.__init__(self)
        self.load_middleware(is_async=False)
        self.threads = int(settings.WEB_REQUEST_THREADS)
        self._pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="request")
        self._places: asyncio.Semaphore | None = None

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        except OSError as e:  # the body spills to a temporary file past 1 MB: the disk may refuse it
            from webapp.server.limits import _answer
            from webapp.server.storage import DISK_FULL, is_disk_full

            if not is_disk_full(e):
                raise
            await _answer(scope, send, 507, "The disk is full", DISK_FULL)
            return
        if self._places is None:
            self._places = asyncio.Semaphore(self.threads)
        loop = asyncio.get_running_loop()
        try:
            async with self._places:
                response = await loop.run_in_executor(self._pool, self._respond, scope, body_file)
            try:
                await self.send_response(response, send)
            except asyncio.CancelledError:
                pass  # the client went away while we sent
            finally:
                if response.streaming:
                    await loop.run_in_executor(self._pool, response.close)
        finally:
            body_file.close()

    def _respond(self, scope, body_file):
        """The request from start to response, in one of the pool's threads."""
        set_script_prefix(get_script_prefix(scope))
        signals.request_started.send(sender=self.__class__, scope=scope)
        request, response = self.create_request(scope, body_file)
        if request is not None:
            response = self.get_response(request)
            response._handler_class = self.__class__
            if isinstance(response, FileResponse):
                response.block_size = self.chunk_size
        if not response.streaming:
            # Its body is in memory: finish the request here, in the thread that holds its database
            # connection (request_finished closes a connection past its age or in error).
            response.close()
        return response

    def close(self) -> None:
        """Close each thread's database connections and stop the threads (tests; a server's exit
        ends them anyway). Each thread takes one of the closing calls: they wait for each other."""
        together = threading.Barrier(self.threads)

        def close_here() -> None:
            together.wait(timeout=10)
            connections.close_all()

        wait([self._pool.submit(close_here) for _ in range(self.threads)], timeout=20)
        self._pool.shutdown(wait=True)
