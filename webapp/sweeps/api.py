"""JSON API for sweeps: create, list, follow (trials, best checkpoint), cancel."""
from __future__ import annotations

from typing import Any

from django.http import Http404
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from trainer.errors import ConfigError
from webapp.api.schema import error
from webapp.runs import launch
from webapp.runs.models import Run
from webapp.runs.serializers import FinetuneCreateSerializer, RunCreateSerializer
from webapp.sweeps import selectors, services
from webapp.sweeps import space as spaces
from webapp.sweeps.models import Sweep, SweepKind
from webapp.sweeps.serializers import SweepCreateSerializer, SweepListSerializer, SweepSerializer

ERROR = error('{"error": "<a sentence>"}')


def owned_sweep(request: Request, sweep_id) -> Sweep:
    try:
        return selectors.sweep_get(request.user, sweep_id)
    except Http404:
        raise exceptions.NotFound() from None


def base_from_fields(data: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(kind, base) from `base` as POST /api/finetune/ (it names a checkpoint) or POST /api/runs/ takes it."""
    if "checkpoint" in data:
        ser = FinetuneCreateSerializer(data=data)
        if not ser.is_valid():
            raise exceptions.ValidationError({"base": ser.errors})
        fields = dict(ser.validated_data)
        fields.pop("name", None)
        checkpoint, dataset = fields.pop("checkpoint"), fields.pop("dataset")
        return SweepKind.FINETUNE, {"checkpoint": str(checkpoint), "dataset": str(dataset),
                                    "training": {k: v for k, v in fields.items() if v is not None}}
    ser = RunCreateSerializer(data=data)
    if not ser.is_valid():
        raise exceptions.ValidationError({"base": ser.errors})
    fields = dict(ser.validated_data)
    values, _ = launch.launch_values(fields, config_yaml=fields.get("config_yaml", ""))
    return SweepKind.PRETRAIN, {
        "tokenizer": str(fields["tokenizer"]), "corpus": str(fields["corpus"]) if fields.get("corpus") else None,
        "family": values.pop("family"), "preset": values.pop("preset"), "objectives": list(values.pop("objectives")),
        "training": values,
    }


def space_from(value: Any) -> list:
    if isinstance(value, str):
        return spaces.parse_text(value)
    if not isinstance(value, list):
        raise ConfigError("The space is a list of settings (or the form's text, one setting a line).")
    return value


class SweepListCreateView(APIView):
    @extend_schema(responses=SweepListSerializer(many=True), summary="Your sweeps, newest first")
    def get(self, request: Request) -> Response:
        return Response(SweepListSerializer(selectors.sweeps_for(request.user), many=True).data)

    @extend_schema(request=SweepCreateSerializer, responses={
                       201: SweepSerializer,
                       400: error('{"error": "<a sentence>"}: a setting the space cannot vary, a bad range, a base run or '
                                  'tokenizer that is not yours, a grid smaller than the trials, ...')},
                   summary="Start a hyperparameter sweep (its first trials are queued at once)")
    def post(self, request: Request) -> Response:
        ser = SweepCreateSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        data = dict(ser.validated_data)
        if "base_run" in data:
            run = Run.objects.filter(owner=request.user, pk=data.pop("base_run")).first()
            kind, base = services.base_from_run(owner=request.user, run=run)
        else:
            kind, base = base_from_fields(data.pop("base"))
        sweep = services.sweep_create(owner=request.user, kind=kind, base=base, space=space_from(data.pop("space")),
                                      **data)
        sweep.refresh_from_db()
        return Response(SweepSerializer(sweep).data, status=status.HTTP_201_CREATED)


class SweepDetailView(APIView):
    @extend_schema(responses={200: SweepSerializer, 404: ERROR}, summary="One sweep with its trials")
    def get(self, request: Request, sweep_id) -> Response:
        return Response(SweepSerializer(owned_sweep(request, sweep_id)).data)


class SweepCancelView(APIView):
    @extend_schema(request=None, responses={200: SweepSerializer,
                                            400: error('{"error": "<a sentence>"}: the sweep has already ended.'),
                                            404: ERROR},
                   summary="Cancel a sweep: no new trial starts, running ones stop")
    def post(self, request: Request, sweep_id) -> Response:
        sweep = services.sweep_cancel(sweep=owned_sweep(request, sweep_id))
        return Response(SweepSerializer(sweep).data)
