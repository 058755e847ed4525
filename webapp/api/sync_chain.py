"""SyncMiddlewareChain: keeps Django's middleware chain synchronous under ASGI (last in MIDDLEWARE).

Under ASGI, Django runs each middleware in the mode its neighbours allow. The MiddlewareMixin
middlewares (sessions, CSRF, auth, messages, ...) can run either way; WhiteNoise is sync only.
Left alone, the chain below WhiteNoise runs async, and an async MiddlewareMixin moves each of
its process_request and process_response calls to the request's thread and back: about a
dozen thread hand-offs per request, each a wake-up of the event loop and of that thread, which
measured (bench/serve_latency.py) as most of the web server's CPU time per API request and
queued every request behind the others under load. A sync-only middleware at the bottom makes
every middleware above it run sync: one hand-off into the request's thread, the whole chain
there, and the view called from it.
"""
from __future__ import annotations


class SyncMiddlewareChain:
    sync_capable = True
    async_capable = False

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)
