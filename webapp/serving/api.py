"""JSON API of model servers: start one on a checkpoint of yours, follow it, stop it.

    POST /api/checkpoints/<id>/serve/       start (202), or the live server it already has (200)
    GET  /api/checkpoints/<id>/serve/       the checkpoint's newest server (404 if never served)
    POST /api/checkpoints/<id>/serve/stop/  stop the checkpoint's live server
    GET  /api/servers/                      your servers, newest first
    GET  /api/servers/<id>/, POST /api/servers/<id>/stop/

Another user's checkpoint or server is a 404 on every one of them.
"""
from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.runs.api import Missing, owned_checkpoint
from webapp.serving import services
from webapp.serving.models import ServedModel
from webapp.serving.serializers import ServedModelSerializer

ERROR = OpenApiResponse(description='{"error": "<a sentence>"}')
NEVER_SERVED = "This checkpoint has not been served yet; POST /api/checkpoints/<id>/serve/ starts its server."


def owned_server(request: Request, served_id) -> ServedModel:
    try:
        return services.server_get(request.user, served_id)
    except (ServedModel.DoesNotExist, ValueError):
        raise exceptions.NotFound() from None


def _answer(served: ServedModel, code: int = status.HTTP_200_OK) -> Response:
    return Response(ServedModelSerializer(served).data, status=code)


class CheckpointServeView(APIView):
    @extend_schema(request=None, responses={200: ServedModelSerializer, 404: ERROR}, tags=["serve"],
                   summary="Where the model server of a checkpoint of yours stands",
                   description="Its newest server: status, the address (base_url, while it serves), the endpoints it "
                               "answers and, when it failed, the sentence and the server's last lines. A 404 until "
                               "it was served once.")
    def get(self, request: Request, checkpoint_id) -> Response:
        served = services.current(owned_checkpoint(request, checkpoint_id))
        if served is None:
            raise Missing(NEVER_SERVED)
        return _answer(served)

    @extend_schema(request=None, tags=["serve"],
                   responses={200: ServedModelSerializer, 202: ServedModelSerializer, 400: ERROR, 404: ERROR,
                              409: ERROR, 429: ERROR},
                   summary="Serve a checkpoint of yours over an OpenAI-compatible API (a background job)",
                   description="Queues its server on the serve worker (202) and answers where it stands; poll GET "
                               "on this address until status is serving, then send requests to base_url with "
                               "'Authorization: Bearer <your API token>'. A checkpoint with a live server gets that "
                               "server (200), never a second one; 409 while it is stopping, 429 past the servers one "
                               "user may run at once, 400 when its files are gone.")
    def post(self, request: Request, checkpoint_id) -> Response:
        served, started = services.serve_start(checkpoint=owned_checkpoint(request, checkpoint_id))
        served.refresh_from_db()
        return _answer(served, status.HTTP_202_ACCEPTED if started else status.HTTP_200_OK)


class CheckpointServeStopView(APIView):
    @extend_schema(request=None, responses={200: ServedModelSerializer, 404: ERROR}, tags=["serve"],
                   summary="Stop the model server of a checkpoint of yours",
                   description="Its server stops (stopping, then stopped once its worker has ended the process); "
                               "one that already ended is answered as it is.")
    def post(self, request: Request, checkpoint_id) -> Response:
        served = services.current(owned_checkpoint(request, checkpoint_id))
        if served is None:
            raise Missing(NEVER_SERVED)
        return _answer(services.serve_stop(served=served))


class ServerListView(APIView):
    @extend_schema(responses=ServedModelSerializer(many=True), tags=["serve"], summary="Your model servers, newest first")
    def get(self, request: Request) -> Response:
        return Response(ServedModelSerializer(services.servers_for(request.user), many=True).data)


class ServerDetailView(APIView):
    @extend_schema(responses={200: ServedModelSerializer, 404: ERROR}, tags=["serve"], summary="One model server of yours")
    def get(self, request: Request, served_id) -> Response:
        return _answer(owned_server(request, served_id))


class ServerStopView(APIView):
    @extend_schema(request=None, responses={200: ServedModelSerializer, 404: ERROR}, tags=["serve"],
                   summary="Stop a model server of yours")
    def post(self, request: Request, served_id) -> Response:
        return _answer(services.serve_stop(served=owned_server(request, served_id)))
