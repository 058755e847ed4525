"""Websocket routes of the explorer (included by webapp/routing.py)."""
from django.urls import path

from webapp.explorer.consumers import GenerateConsumer

websocket_urlpatterns = [
    path("ws/explore/generate/", GenerateConsumer.as_asgi()),
]
