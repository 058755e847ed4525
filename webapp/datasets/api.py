"""JSON API for labelled datasets. Same selectors and services as the pages.

Every failure answers {"error": "<a sentence>"} (webapp.api.errors): 400 for a request or data
that cannot be used (a bad row is named), 404 for what does not exist or is not yours, 409 for
what the dataset's state does not allow now, 413 for an upload over UPLOAD_MAX_BYTES.
"""
from __future__ import annotations

from django.http import Http404
from django.urls import reverse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import NotFound
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.api.parsers import JSONObjectParser
from webapp.corpora import selectors as corpora_selectors
from webapp.corpora.api import Conflict
from webapp.datasets import selectors, services
from webapp.datasets.serializers import (
    DatasetSerializer,
    DatasetUploadSerializer,
    DemoCreateSerializer,
    DemoSerializer,
    ErrorSerializer,
    LeaderboardSerializer,
    MappingSerializer,
    StatsQuerySerializer,
    StatsSerializer,
)
from webapp.jobs.lifecycle import ActionRefused
from webapp.jobs.models import JobStatus
from webapp.runs import results

TAGS = ["datasets"]


def _error(description: str) -> OpenApiResponse:
    return OpenApiResponse(response=ErrorSerializer, description=description)


NOT_FOUND = _error('{"error": "Not found. It does not exist, or it is not yours."}: no such dataset (or tokenizer), '
                   "or another user's.")
BAD_UPLOAD = _error('{"error": "<a sentence>", "fields": {...}}: no file, a type the upload does not read, an '
                    "empty file or one over the size limit, an unknown field, split files in different formats, an "
                    "archive with split files beside it or holding other files; or the first rows do not read (the "
                    "sentence names the line or row).")
TOO_LARGE = _error('{"error": "The upload is ... MB; the largest accepted is ... MB ..."}: refused from the '
                   "Content-Length before the body is read.")
STORAGE_FULL = _error('{"error": "The server\'s storage is nearly full ..."}: the upload would leave less than '
                      "STORAGE_MIN_FREE_BYTES free; refused before the body is read.")
BAD_MAPPING = _error('{"error": "<a sentence>"}: the task, mapping or split does not fit the upload (a role the '
                     "task needs is missing, a column that is not in the file, fractions that do not add up to 1, "
                     "...).")
WRONG_STATE = _error('{"error": "<a sentence>"}: the dataset is ready (its mapping no longer changes) or is being '
                     "processed.")
NOT_READY = _error('{"error": "<a sentence>"}: the dataset is not ready, or the tokenizer is not.')
BAD_QUERY = _error('{"error": "<a sentence>"}: max_length or tokenizer is not valid.')


def dataset_get(user, pk):
    """The selector, with the API's own not-found error."""
    try:
        return selectors.dataset_get(user, pk)
    except Http404:
        raise NotFound() from None


class DatasetListApi(APIView):
    parser_classes = [MultiPartParser, FormParser]

    @extend_schema(responses={200: DatasetSerializer(many=True)}, tags=TAGS, summary="Your datasets")
    def get(self, request: Request) -> Response:
        """Your labelled datasets, newest first."""
        return Response(DatasetSerializer(selectors.datasets_for(request.user), many=True).data)

    @extend_schema(request={"multipart/form-data": DatasetUploadSerializer},
                   responses={201: DatasetSerializer, 400: BAD_UPLOAD, 413: TOO_LARGE, 507: STORAGE_FULL}, tags=TAGS,
                   summary="Upload a dataset")
    def post(self, request: Request) -> Response:
        """Upload a labelled dataset (multipart: `file`, `name`, and optionally `validation_file` and `test_file`):
        CSV, TSV, JSONL, CoNLL or SQuAD JSON, optionally gzip-compressed. The splits may come as files: `file` is
        then the train file, beside `validation_file` and/or `test_file` in the same format; or `file` is a .zip
        holding train, validation (or dev, valid) and test files. Such a dataset is split by its files.

        The first rows of every file are read at once: the answer has `status` "mapping", `files` (the file of each
        split) and a `preview` of the train file with the columns, the first rows and the suggested task and
        mapping. Confirm them with POST /api/datasets/<id>/mapping/. A field other than these is refused.
        """
        upload = DatasetUploadSerializer(data=request.data)
        upload.is_valid(raise_exception=True)
        uploaded = upload.validated_data["file"]
        dataset = services.dataset_create_from_upload(owner=request.user, name=upload.validated_data["name"],
                                                      uploaded_file=uploaded, original_filename=uploaded.name,
                                                      validation_file=upload.validated_data.get("validation_file"),
                                                      test_file=upload.validated_data.get("test_file"))
        return Response(DatasetSerializer(dataset).data, status=status.HTTP_201_CREATED)


class DatasetDetailApi(APIView):
    @extend_schema(responses={200: DatasetSerializer, 404: NOT_FOUND}, tags=TAGS, summary="One dataset")
    def get(self, request: Request, pk) -> Response:
        """One dataset: status, progress (0-100), error, the preview, the confirmed choices, and once ready its
        sizes, labels and label counts."""
        return Response(DatasetSerializer(dataset_get(request.user, pk)).data)

    @extend_schema(responses={204: None, 404: NOT_FOUND}, tags=TAGS, summary="Delete a dataset")
    def delete(self, request: Request, pk) -> Response:
        """Delete a dataset with its upload and its stored splits."""
        services.dataset_delete(dataset=dataset_get(request.user, pk))
        return Response(status=status.HTTP_204_NO_CONTENT)


class DatasetMappingApi(APIView):
    parser_classes = [JSONObjectParser, FormParser, MultiPartParser]

    def _confirm(self, request: Request, pk, *, partial: bool) -> Response:
        dataset = dataset_get(request.user, pk)
        form = MappingSerializer(data=request.data, partial=partial)
        form.is_valid(raise_exception=True)
        choices = {**services.current_choices(dataset), **form.validated_data} if partial else form.validated_data
        try:
            dataset = services.dataset_confirm_mapping(dataset=dataset, **choices)
        except ActionRefused as refused:
            raise Conflict(str(refused)) from None
        return Response(DatasetSerializer(dataset).data)

    @extend_schema(request=MappingSerializer, responses={200: DatasetSerializer, 400: BAD_MAPPING, 404: NOT_FOUND,
                                                         409: WRONG_STATE}, tags=TAGS, summary="Confirm the mapping")
    def post(self, request: Request, pk) -> Response:
        """Confirm the task, the {column: role} mapping and the split of a dataset waiting for its mapping (or
        failed: it is mapped again from the kept upload). The answer has `status` "pending"; the ingest runs in
        the background: poll GET /api/datasets/<id>/ until `status` is "ready" or "failed"."""
        return self._confirm(request, pk, partial=False)

    @extend_schema(request=MappingSerializer, responses={200: DatasetSerializer, 400: BAD_MAPPING, 404: NOT_FOUND,
                                                         409: WRONG_STATE}, tags=TAGS,
                   summary="Confirm the mapping, changing some of the suggestions")
    def patch(self, request: Request, pk) -> Response:
        """As POST, but every field may be left out: it keeps the value confirmed before, else the preview's
        suggestion (`{}` confirms the suggested task and mapping with the default split)."""
        return self._confirm(request, pk, partial=True)


class DatasetStatsApi(APIView):
    @extend_schema(parameters=[StatsQuerySerializer],
                   responses={200: StatsSerializer, 400: BAD_QUERY, 404: NOT_FOUND, 409: NOT_READY}, tags=TAGS,
                   summary="A dataset's statistics")
    def get(self, request: Request, pk) -> Response:
        """Sizes per split, the label counts per split (the bar chart), and with `tokenizer` the token-length
        histogram and the share of examples `max_length` truncates (at most the first 20,000 examples)."""
        dataset = dataset_get(request.user, pk)
        query = StatsQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        tokenizer = None
        if "tokenizer" in query.validated_data:
            try:
                tokenizer = corpora_selectors.tokenizer_get(request.user, query.validated_data["tokenizer"])
            except Http404:
                raise NotFound() from None
        if dataset.status != JobStatus.READY:
            raise Conflict(f"“{dataset.name}” is not ready ({dataset.get_status_display().lower()}); its statistics "
                           "exist once it is ingested.")
        if tokenizer is not None and tokenizer.status != JobStatus.READY:
            raise Conflict(f"The tokenizer “{tokenizer.name}” is not ready; try again when its training has finished.")
        stats = selectors.dataset_stats(dataset, tokenizer=tokenizer, max_length=query.validated_data["max_length"])
        return Response(StatsSerializer(stats).data)


class DatasetLeaderboardApi(APIView):
    @extend_schema(responses={200: LeaderboardSerializer, 404: NOT_FOUND}, tags=TAGS,
                   summary="Every fine-tuning run of yours on a dataset, best first, and your in-context evaluations")
    def get(self, request: Request, pk) -> Response:
        """The task's primary metric (and whether higher is better), the settings in which the runs differ, and
        per run: its base checkpoint, status, those settings, the best validation value of the primary metric
        (and its step) and its test metrics. Sorted by the test metric, then the best validation value. Beside them
        (`incontext`), the zero-, one- and few-shot evaluations of yours saved on the dataset: the checkpoint,
        the settings, accuracy per k and the best k."""
        board = results.leaderboard(request.user, dataset_get(request.user, pk))
        rows = [{k: v for k, v in row.items() if k != "run"} for row in board["rows"]]
        for row in rows:
            row["dashboard_url"] = reverse("runs:detail", args=[row["id"]])
        return Response(LeaderboardSerializer({**board, "rows": rows}).data)


class DatasetDemoApi(APIView):
    parser_classes = [JSONObjectParser, FormParser]

    @extend_schema(responses={200: DemoSerializer(many=True)}, tags=TAGS, summary="The demo datasets")
    def get(self, request: Request) -> Response:
        """The demo datasets, one per task type (and pair classification), made from Python's docstrings."""
        from trainer.prep.labelled import DEMOS

        return Response(DemoSerializer([
            {"name": d.name, "label": services.demo_label(d.name), "task": d.task, "filename": d.filename,
             "rows": d.rows, "description": d.how} for d in DEMOS.values()], many=True).data)

    @extend_schema(request=DemoCreateSerializer,
                   responses={201: DatasetSerializer, 400: _error('{"error": "name: ..."}: not a demo\'s name.')},
                   tags=TAGS, summary="Create a demo dataset")
    def post(self, request: Request) -> Response:
        """Write a demo dataset and ingest it in one go (its own task, the mapping its header suggests, a random
        0.8 / 0.1 / 0.1 split): the answer has `status` "pending"."""
        form = DemoCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        dataset = services.dataset_create_demo(owner=request.user, name=form.validated_data["name"])
        return Response(DatasetSerializer(dataset).data, status=status.HTTP_201_CREATED)
