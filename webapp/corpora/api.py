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
from webapp.corpora import selectors
from webapp.corpora.selectors import corpora_for, tokenizers_for
from webapp.corpora.forms import cleaning_rules
from webapp.corpora.serializers import (
    CorpusDemoSerializer,
    CorpusImportSerializer,
    CorpusSerializer,
    CorpusUploadSerializer,
    ImportListingSerializer,
    TokenizeRequestSerializer,
    TokenizeResponseSerializer,
    TokenizerCreateSerializer,
    TokenizerSerializer,
)
from webapp.corpora.services import (
    corpus_create_demo,
    corpus_create_from_import,
    corpus_create_from_upload,
    corpus_delete,
    import_listing,
    tokenizer_create,
    tokenizer_delete,
)
from webapp.jobs.lifecycle import ActionRefused
from webapp.jobs.models import JobStatus


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
        """Upload a corpus (multipart: `file`, repeated for several files, `name`, `text_field`, cleaning
        options), or `{"demo": true}` for the demo corpus.

        Processing runs in the background: poll `GET /api/corpora/<id>/` until `status` is `ready` or `failed`
        (`progress_detail` says which stage runs, how fast, and how long it has left).
        """
        if "demo" in request.data:
            CorpusDemoSerializer(data=request.data).is_valid(raise_exception=True)
            corpus = corpus_create_demo(owner=request.user)
            return Response(CorpusSerializer(corpus).data, status=status.HTTP_201_CREATED)
        upload = CorpusUploadSerializer(data=request.data)
        upload.is_valid(raise_exception=True)
        data = dict(upload.validated_data)
        files = data.pop("file")
        name = data.pop("name", "")
        text_field = data.pop("text_field", "") or "text"
        if len(files) == 1:
            corpus = corpus_create_from_upload(owner=request.user, name=name, uploaded_file=files[0],
                                               original_filename=files[0].name, options=data, text_field=text_field)
        else:
            corpus = corpus_create_from_upload(owner=request.user, name=name, uploaded_files=files, options=data,
                                               text_field=text_field)
        return Response(CorpusSerializer(corpus).data, status=status.HTTP_201_CREATED)


class CorpusImportApi(APIView):
    @extend_schema(
        request=CorpusImportSerializer,
        responses={200: ImportListingSerializer, 201: CorpusSerializer, 400: ERROR},
        tags=["corpora"],
    )
    def post(self, request: Request) -> Response:
        """Import a corpus from files on the server: a file, a folder or a glob under a folder the
        administrator allows (CORPUS_IMPORT_ROOTS). The files are read where they are, never copied.

        With `"dry_run": true`: the files found (name, format, compression, size) and their totals (200),
        nothing imported. Else the new corpus (201), processed in the background as an upload is. A path
        that is refused (no allowed folders, `..`, relative, outside the allowed folders, through a
        symlink leading out of them, inside the app's storage) is a 400 saying why.
        """
        from trainer.errors import CorpusError

        form = CorpusImportSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = dict(form.validated_data)
        try:
            if data["dry_run"]:
                return Response(import_listing(data["path"]))
            corpus = corpus_create_from_import(
                owner=request.user, spec=data["path"], name=data["name"], text_field=data["text_field"] or "text",
                options={rule.field: data[rule.field] for rule in cleaning_rules()},
            )
        except CorpusError as refused:
            raise ValidationError({"path": [str(refused)]}) from None
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
