"""Websocket routes of the runs app (included by webapp/routing.py)."""
from django.urls import path

from webapp.runs.consumers import RunConsumer

websocket_urlpatterns = [
    path("ws/runs/<uuid:run_id>/", RunConsumer.as_asgi()),
]
