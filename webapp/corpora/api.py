"""JSON API for corpora and tokenizers. Same selectors and services as the pages."""
from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from django.http import Http404
from rest_framework.exceptions import APIException, NotFound, ValidationError
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.api.parsers import JSONObjectParser
from webapp.corpora.models import JobStatus
from webapp.corpora import selectors
from webapp.corpora.selectors import corpora_for, tokenizers_for
from webapp.corpora.serializers import (
    CorpusDemoSerializer,
    CorpusSerializer,
    CorpusUploadSerializer,
    TokenizeRequestSerializer,
    TokenizeResponseSerializer,
    TokenizerCreateSerializer,
    TokenizerSerializer,
)
from webapp.corpora.services import (
    ActionRefused,
    corpus_create_demo,
    corpus_create_from_upload,
    corpus_delete,
    tokenizer_create,
    tokenizer_delete,
)


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The request conflicts with the current state."
    default_code = "conflict"


def corpus_get(user, pk):
    """The selector, with the API's own not-found error (one sentence, the same for all objects)."""
    try:
        return selectors.corpus_get(user, pk)
    except Http404:
        raise NotFound() from None


def tokenizer_get(user, pk):
    try:
        return selectors.tokenizer_get(user, pk)
    except Http404:
        raise NotFound() from None


ERROR = OpenApiResponse(description='{"error": "<a sentence>"}')


class CorpusListApi(APIView):
    parser_classes = [MultiPartParser, FormParser, JSONObjectParser]

    @extend_schema(responses={200: CorpusSerializer(many=True)}, tags=["corpora"])
    def get(self, request: Request) -> Response:
        """Your corpora, newest first."""
        return Response(CorpusSerializer(corpora_for(request.user), many=True).data)

    @extend_schema(
        request={"multipart/form-data": CorpusUploadSerializer, "application/json": CorpusDemoSerializer},
        responses={201: CorpusSerializer, 400: ERROR, 413: ERROR, 507: ERROR},
        tags=["corpora"],
    )
    def post(self, request: Request) -> Response:
        """Upload a corpus (multipart: `file`, `name`, cleaning options), or `{"demo": true}` for the demo corpus.

        Processing runs in the background: poll `GET /api/corpora/<id>/` until `status` is `ready` or `failed`.
        """
        if "demo" in request.data:
            CorpusDemoSerializer(data=request.data).is_valid(raise_exception=True)
            corpus = corpus_create_demo(owner=request.user)
            return Response(CorpusSerializer(corpus).data, status=status.HTTP_201_CREATED)
        upload = CorpusUploadSerializer(data=request.data)
        upload.is_valid(raise_exception=True)
        data = dict(upload.validated_data)
        uploaded = data.pop("file")
        name = data.pop("name", "")
        corpus = corpus_create_from_upload(
            owner=request.user, name=name, uploaded_file=uploaded, original_filename=uploaded.name, options=data,
        )
        return Response(CorpusSerializer(corpus).data, status=status.HTTP_201_CREATED)


class CorpusDetailApi(APIView):
    @extend_schema(responses={200: CorpusSerializer, 404: ERROR}, tags=["corpora"])
    def get(self, request: Request, pk) -> Response:
        """One corpus: status, progress (0-100), error, statistics, what cleaning removed, a preview."""
        return Response(CorpusSerializer(corpus_get(request.user, pk)).data)

    @extend_schema(responses={204: None, 404: ERROR, 409: ERROR}, tags=["corpora"])
    def delete(self, request: Request, pk) -> Response:
        """Delete a corpus with its tokenizers and files (refused while runs use it)."""
        try:
            corpus_delete(corpus=corpus_get(request.user, pk))
        except ActionRefused as refused:
            raise Conflict(str(refused)) from None
        return Response(status=status.HTTP_204_NO_CONTENT)


class TokenizerListApi(APIView):
    @extend_schema(responses={200: TokenizerSerializer(many=True)}, tags=["tokenizers"])
    def get(self, request: Request) -> Response:
        """Your tokenizers, newest first."""
        return Response(TokenizerSerializer(tokenizers_for(request.user), many=True).data)

    @extend_schema(request=TokenizerCreateSerializer, responses={201: TokenizerSerializer, 400: ERROR, 404: ERROR},
                   tags=["tokenizers"])
    def post(self, request: Request) -> Response:
        """Train a tokenizer on a ready corpus, then encode the corpus into token shards (in the background)."""
        form = TokenizerCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = dict(form.validated_data)
        corpus = corpus_get(request.user, data.pop("corpus"))
        try:
            tokenizer = tokenizer_create(owner=request.user, corpus=corpus, **data)
        except ActionRefused as refused:
            raise ValidationError({"corpus": [str(refused)]}) from None
        return Response(TokenizerSerializer(tokenizer).data, status=status.HTTP_201_CREATED)


class TokenizerDetailApi(APIView):
    @extend_schema(responses={200: TokenizerSerializer, 404: ERROR}, tags=["tokenizers"])
    def get(self, request: Request, pk) -> Response:
        """One tokenizer: status, progress, and statistics (vocabulary, tokens per word, unknown rate, shards)."""
        return Response(TokenizerSerializer(tokenizer_get(request.user, pk)).data)

    @extend_schema(responses={204: None, 404: ERROR, 409: ERROR}, tags=["tokenizers"])
    def delete(self, request: Request, pk) -> Response:
        """Delete a tokenizer and its files (refused while runs use it)."""
        try:
            tokenizer_delete(tokenizer=tokenizer_get(request.user, pk))
        except ActionRefused as refused:
            raise Conflict(str(refused)) from None
        return Response(status=status.HTTP_204_NO_CONTENT)


class TokenizeApi(APIView):
    @extend_schema(request=TokenizeRequestSerializer, responses={200: TokenizeResponseSerializer, 400: ERROR,
                                                                  404: ERROR}, tags=["tokenizers"])
    def post(self, request: Request, pk) -> Response:
        """Split `text` into tokens with this tokenizer: each token with its id (no special tokens added)."""
        from trainer.prep.tokenization import tokenize_preview

        tokenizer = tokenizer_get(request.user, pk)
        form = TokenizeRequestSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        if tokenizer.status != JobStatus.READY:
            raise ValidationError("The tokenizer is not ready yet; try again when its training has finished.")
        tokens = tokenize_preview(tokenizer.folder, form.validated_data["text"])
        return Response({"tokens": tokens})
