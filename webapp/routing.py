"""Websocket URL routes of every app."""
from webapp.explorer.routing import websocket_urlpatterns as explorer_ws
from webapp.runs.routing import websocket_urlpatterns as runs_ws

websocket_urlpatterns = [*runs_ws, *explorer_ws]
