"""How the web process stays quick with many requests at once (issue 11, point 8).

SyncMiddlewareChain (last in MIDDLEWARE) keeps Django's middleware chain synchronous under
ASGI; RequestThreadLimit (first) bounds how many requests run at once.

Under ASGI, Django runs each middleware in the mode its neighbours allow. The MiddlewareMixin
middlewares (sessions, CSRF, auth, messages, ...) can run either way; WhiteNoise is sync only.
Left alone, the chain below WhiteNoise runs async, and an async MiddlewareMixin moves each of
its process_request and process_response calls to the request's thread and back: about a
dozen thread hand-offs per request, each a wake-up of the event loop (which also forwards the
websockets' live events) and of that thread. A sync-only middleware at the bottom makes
every middleware above it run sync: one hand-off into the request's thread, the whole chain
there, and the view called from it.
"""
from __future__ import annotations

import threading


class SyncMiddlewareChain:
    sync_capable = True
    async_capable = False

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)


class RequestThreadLimit:
    """First in MIDDLEWARE: at most settings.WEB_REQUEST_THREADS requests run their (sync) middleware
    and view at once in this process; the others wait on a lock, which costs no CPU.

    Django under ASGI gives every request a thread of its own. With thirty API readers that is
    thirty threads taking turns at the one GIL, and the event loop that forwards the websockets'
    live events is only one of thirty-one: an event waited for dozens of those turns. A few
    threads at a time keep the work the same and the event loop's wait short. More than one, so
    that a request waiting on the database (SQLite's busy timeout) does not hold up the rest.
    A response's body is streamed after this returns, so a slow download holds no place.
    """

    sync_capable = True
    async_capable = False

    def __init__(self, get_response) -> None:
        from django.conf import settings

        self.get_response = get_response
        self.places = threading.BoundedSemaphore(max(1, int(settings.WEB_REQUEST_THREADS)))

    def __call__(self, request):
        with self.places:
            return self.get_response(request)
