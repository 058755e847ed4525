"""Websocket URL routes of every app."""
from webapp.runs.routing import websocket_urlpatterns as runs_ws

websocket_urlpatterns = [*runs_ws]
