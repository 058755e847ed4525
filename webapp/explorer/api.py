"""JSON API of the explorer: fill-mask and next-sentence prediction on a checkpoint of yours."""
from __future__ import annotations

from django.http import Http404
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.explorer import services
from webapp.explorer.serializers import (
    FillMaskRequestSerializer, FillMaskResponseSerializer, NextSentenceRequestSerializer,
    NextSentenceResponseSerializer,
)
from webapp.runs import selectors
from webapp.runs.models import Checkpoint

def owned_checkpoint(request: Request, checkpoint_id) -> Checkpoint:
    try:
        return selectors.checkpoint_get(request.user, checkpoint_id)
    except Http404:
        raise exceptions.NotFound() from None


ERROR = OpenApiResponse(description='{"error": "<a sentence>"}')


class FillMaskView(APIView):
    @extend_schema(request=FillMaskRequestSerializer,
                   responses={200: FillMaskResponseSerializer, 400: ERROR, 404: ERROR},
                   summary="Top-k tokens for each [MASK]")
    def post(self, request: Request) -> Response:
        ser = FillMaskRequestSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        ckpt = owned_checkpoint(request, ser.validated_data["checkpoint"])
        masks = services.fill_mask(checkpoint=ckpt, text=ser.validated_data["text"],
                                   top_k=ser.validated_data["top_k"])
        return Response({"checkpoint": str(ckpt.id), "masks": masks})


class NextSentenceView(APIView):
    @extend_schema(request=NextSentenceRequestSerializer,
                   responses={200: NextSentenceResponseSerializer, 400: ERROR, 404: ERROR},
                   summary="Probability that sentence B follows sentence A")
    def post(self, request: Request) -> Response:
        ser = NextSentenceRequestSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        ckpt = owned_checkpoint(request, ser.validated_data["checkpoint"])
        scores = services.next_sentence(checkpoint=ckpt, text_a=ser.validated_data["text_a"],
                                        text_b=ser.validated_data["text_b"])
        return Response({"checkpoint": str(ckpt.id), **scores})
