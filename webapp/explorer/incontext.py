"""GPT-3's in-context learning in the explorer: the prompt builder (one held-out example of one of
your classification datasets, k seeded demonstrations, an editable template; the exact prompt the
model reads and each label's score) and accuracy against k. The checkpoint and the dataset must
both be yours (404 otherwise); trainer.inference.incontext does the work. Each accuracy against k
is saved (InContextResult) and listed on the dataset's page beside its leaderboard.

The evaluation runs inside the web request: k_max + 1 prompts per query, one forward pass per
label each, so the largest request (200 queries, k up to 32) can hold a web worker for minutes
on a CPU. There is no job queue for it yet."""
from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from trainer.errors import InferenceError
from trainer.inference.incontext import DATASET_TASK
from webapp.datasets import selectors as dataset_selectors
from webapp.datasets.models import Dataset
from webapp.explorer import services
from webapp.explorer.api import _owned, owned_checkpoint
from webapp.explorer.models import InContextResult
from webapp.jobs.models import JobStatus
from webapp.runs.models import Checkpoint

# trainer.inference.incontext's bounds and defaults (kept here so this module imports no torch).
MAX_SHOTS = 32
MAX_QUERIES = 200  # a web request; the trainer function takes up to 1,000
MAX_TEMPLATE_CHARS = 500
DEFAULT_TEMPLATE = "Text: {text}\nLabel: {label}"
DEFAULT_SEPARATOR = "\n\n"
ERROR = OpenApiResponse(description='{"error": "<a sentence>"}')


class PromptRequestSerializer(serializers.Serializer):
    checkpoint = serializers.UUIDField(help_text="A GPT checkpoint of yours (a run's step or an imported GPT-2).")
    dataset = serializers.UUIDField(help_text="A ready classification dataset of yours.")
    template = serializers.CharField(default=DEFAULT_TEMPLATE, max_length=MAX_TEMPLATE_CHARS, trim_whitespace=False,
                                     help_text="Placeholders: {text} (or {sentence1}, {sentence2}) and {label}, "
                                               "which must come once, after the text.")
    separator = serializers.CharField(default=DEFAULT_SEPARATOR, max_length=20, trim_whitespace=False,
                                      allow_blank=True, help_text="Between demonstrations.")
    seed = serializers.IntegerField(default=0, min_value=0, max_value=2**31 - 1,
                                    help_text="Draws the demonstrations from the training split.")
    normalise = serializers.BooleanField(default=True, help_text="Score = log-likelihood / number of label tokens.")
    k = serializers.IntegerField(default=2, min_value=0, max_value=MAX_SHOTS, help_text="Demonstrations.")
    index = serializers.IntegerField(default=0, min_value=0, help_text="Which held-out example is the query.")


class AccuracyRequestSerializer(PromptRequestSerializer):
    k = None
    index = None
    k_max = serializers.IntegerField(default=4, min_value=0, max_value=MAX_SHOTS)
    n_queries = serializers.IntegerField(default=50, min_value=1, max_value=MAX_QUERIES)


def owned_dataset(request: Request, dataset_id) -> Dataset:
    return check_dataset(_owned(dataset_selectors.dataset_get, request.user, dataset_id))


def check_dataset(dataset: Dataset) -> Dataset:
    """The dataset, when in-context evaluation can read it; InferenceError with a sentence otherwise."""
    if dataset.status != JobStatus.READY:
        raise InferenceError(f"The dataset {dataset.name} is not ready yet ({dataset.get_status_display().lower()}).")
    if dataset.task != DATASET_TASK:
        raise InferenceError(f"The dataset {dataset.name} is not a classification dataset; in-context evaluation "
                             f"scores one label per text.")
    return dataset


def _settings(data: dict[str, Any]) -> dict[str, Any]:
    return {"template": data["template"], "separator": data["separator"], "seed": data["seed"],
            "normalise": data["normalise"]}


def score_prompt(*, checkpoint: Checkpoint, dataset: Dataset, settings: dict[str, Any], k: int,
                 index: int) -> dict[str, Any]:
    """One k-shot prompt of the checkpoint (yours) on the dataset (yours) and each label's score."""
    from trainer.inference import incontext  # imports torch

    check_dataset(dataset)
    out = incontext.score_prompt(services._folder(checkpoint), dataset.data_dir, k=k, index=index, **settings)
    return {"checkpoint": str(checkpoint.id), "dataset": str(dataset.id), **out}


def evaluate(*, owner, checkpoint: Checkpoint, dataset: Dataset, settings: dict[str, Any], k_max: int,
             n_queries: int) -> dict[str, Any]:
    """Accuracy against k, saved as an InContextResult of `owner` (its id is the answer's "result")."""
    from trainer.inference import incontext  # imports torch

    check_dataset(dataset)
    out = incontext.evaluate(services._folder(checkpoint), dataset.data_dir, k_max=k_max, n_queries=n_queries,
                             **settings)
    saved = InContextResult.objects.create(
        owner=owner, checkpoint=checkpoint, dataset=dataset, template=settings["template"],
        separator=settings["separator"], k_max=k_max, seed=settings["seed"], normalise=settings["normalise"],
        n_queries=out["n_queries"], accuracies=[float(a) for a in out["accuracy"]])
    return {"checkpoint": str(checkpoint.id), "dataset": str(dataset.id), "result": str(saved.id), **out}


class PromptBuilderView(APIView):
    @extend_schema(request=PromptRequestSerializer, responses={200: OpenApiResponse(description=(
        '{"checkpoint", "dataset", "prompt": the exact text the model reads before the label, "gap": the '
        'whitespace each label is prefixed with, "scores": [{"label", "tokens", "logprob", "score"}], '
        '"predicted", "gold", "k", "index"}')), 400: ERROR, 404: ERROR},
        summary="The prompt builder: one k-shot prompt and each label's score")
    def post(self, request: Request) -> Response:
        ser = PromptRequestSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        data = ser.validated_data
        ckpt = owned_checkpoint(request, data["checkpoint"])
        dataset = owned_dataset(request, data["dataset"])
        return Response(score_prompt(checkpoint=ckpt, dataset=dataset, settings=_settings(data), k=data["k"],
                                     index=data["index"]))


class IncontextAccuracyView(APIView):
    @extend_schema(request=AccuracyRequestSerializer, responses={200: OpenApiResponse(description=(
        '{"checkpoint", "dataset", "result": the saved evaluation\'s id, "k": [0, ...], "accuracy": [...], '
        '"n_queries", "labels", "first_prompt", ...}')),
        400: ERROR, 404: ERROR}, summary="Zero-, one- and few-shot accuracy against k (saved)",
        description="Evaluated in the request (up to n_queries x (k_max + 1) prompts, one forward pass per label "
                    "each), then saved: the answer's `result` is its id, and the dataset's leaderboard "
                    "(GET /api/datasets/<id>/leaderboard/, `incontext`) lists it.")
    def post(self, request: Request) -> Response:
        ser = AccuracyRequestSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        data = ser.validated_data
        ckpt = owned_checkpoint(request, data["checkpoint"])
        dataset = owned_dataset(request, data["dataset"])
        return Response(evaluate(owner=request.user, checkpoint=ckpt, dataset=dataset, settings=_settings(data),
                                 k_max=data["k_max"], n_queries=data["n_queries"]))
