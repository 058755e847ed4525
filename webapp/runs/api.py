"""JSON API for runs: launch, list, follow (metrics, checkpoints), cancel, resume, clone, export."""
from __future__ import annotations

from django.http import FileResponse, Http404, HttpResponse
from django.urls import reverse
from django.utils.text import slugify
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.corpora.models import Corpus, Tokenizer
from webapp.runs import exports, launch, readiness, results, selectors, services
from webapp.runs.models import Checkpoint, Run
from webapp.runs.serializers import (
    CheckpointExportSerializer, CheckpointSerializer, ExportFormatQuerySerializer, ExportStartSerializer, FinetuneCreateSerializer, FinetuneOnSerializer,
    LogLineSerializer, LogQuerySerializer, MetricPointSerializer, MetricsQuerySerializer, MetricsSerializer,
    ReadinessQuerySerializer, RunCloneSerializer, RunCreateSerializer, RunSamplesSerializer, RunSerializer,
    finetune_create_serializer,
)

ERROR = OpenApiResponse(description='{"error": "<a sentence>"}')


# The body is a YAML document: one mapping, the run's config (RunConfig's fields, or a fine-tuning
# run's FinetuneConfig fields), with comments. A YAML-reading client gets an object.
CONFIG_YAML = OpenApiResponse(
    response={"type": "object", "additionalProperties": True,
              "description": "The run's config as a YAML mapping: RunConfig's fields (family, preset, objectives, "
                             "max_steps, ...) or, for a fine-tuning run, FinetuneConfig's."},
    description="A YAML document (re-importable by the launch form, POST /api/runs/ config_yaml and the CLI).")


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The run is not in a state that allows this."


class Missing(exceptions.APIException):
    """A 404 whose sentence says what is missing (NotFound's is replaced by the generic one)."""

    status_code = status.HTTP_404_NOT_FOUND
    default_detail = "Not found."


def owned_run(request: Request, run_id) -> Run:
    """The user's run, or a 404 in the API's words."""
    try:
        return selectors.run_get(request.user, run_id)
    except Http404:
        raise exceptions.NotFound() from None


def _state_change(action, run: Run) -> Run:
    try:
        return action(run=run)
    except services.RunStateError as e:
        raise Conflict(str(e)) from None


def _owned(model, user, pk, field: str):
    if pk is None:
        return None
    obj = model.objects.filter(pk=pk, owner=user).first()
    if obj is None:
        raise exceptions.ValidationError({field: f"No {field} of yours has the id {pk}."})
    return obj


class RunListCreateView(APIView):
    @extend_schema(responses=RunSerializer(many=True), summary="Your runs, newest first")
    def get(self, request: Request) -> Response:
        return Response(RunSerializer(selectors.runs_for(request.user), many=True).data)

    @extend_schema(request=RunCreateSerializer,
                   responses={201: RunSerializer, 400: ERROR, 429: ERROR, 507: ERROR},
                   summary="Launch a run (429: you have the most runs queued or running one user may have)")
    def post(self, request: Request) -> Response:
        ser = RunCreateSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        data = dict(ser.validated_data)
        values, yaml_name = launch.launch_values(data, config_yaml=data.get("config_yaml", ""))
        run = services.run_create(
            owner=request.user, name=data.get("name") or yaml_name,
            corpus=_owned(Corpus, request.user, data.get("corpus"), "corpus"),
            tokenizer=_owned(Tokenizer, request.user, data["tokenizer"], "tokenizer"),
            family=values.pop("family"), preset=values.pop("preset"),
            objectives=values.pop("objectives"), training=values,
        )
        return Response(RunSerializer(run).data, status=status.HTTP_201_CREATED)


class FinetuneCreateView(APIView):
    @extend_schema(
        request=FinetuneCreateSerializer,
        responses={
            201: RunSerializer,
            400: OpenApiResponse(description='{"error": "<a sentence>"}: a field out of its bounds, a checkpoint or '
                                             'dataset id that is not one of yours, a dataset not ready, a '
                                             'checkpoint of a family the task does not train (a T5 or GPT checkpoint for '
                                             'a task head, an encoder for text to text or SFT), a setting that '
                                             'does not apply to the checkpoint\'s family, the task and the technique'),
            429: OpenApiResponse(description='{"error": "<a sentence>"}: you have the most runs queued or running '
                                             'one user may have'),
            507: OpenApiResponse(description='{"error": "<a sentence>"}: the server\'s storage is nearly full'),
        },
        summary="Fine-tune one of your checkpoints on one of your ready datasets (a run of kind \"finetune\")")
    def post(self, request: Request) -> Response:
        ser = finetune_create_serializer()(data=request.data)
        ser.is_valid(raise_exception=True)
        data = dict(ser.validated_data)
        from webapp.datasets.models import Dataset

        checkpoint = _owned(Checkpoint, request.user, data.pop("checkpoint"), "checkpoint")
        dataset = _owned(Dataset, request.user, data.pop("dataset"), "dataset")
        extras = [{**dict(e), "dataset": _owned(Dataset, request.user, e["dataset"], "extra_datasets")}
                  for e in data.pop("extra_datasets", None) or []]
        run = services.finetune_create(owner=request.user, checkpoint=checkpoint, dataset=dataset,
                                       name=data.pop("name", ""), training=data, extra_datasets=extras,
                                       only_applicable=True)
        return Response(RunSerializer(run).data, status=status.HTTP_201_CREATED)


class RunDetailView(APIView):
    @extend_schema(responses={200: RunSerializer, 404: ERROR}, summary="One run")
    def get(self, request: Request, run_id) -> Response:
        return Response(RunSerializer(owned_run(request, run_id)).data)


class RunMetricsView(APIView):
    @extend_schema(parameters=[MetricsQuerySerializer], responses={200: MetricsSerializer, 404: ERROR},
                   summary="Metric points after a step (both splits, ordered by step)")
    def get(self, request: Request, run_id) -> Response:
        run = owned_run(request, run_id)
        query = MetricsQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        points = list(selectors.metrics_since(run, query.validated_data.get("since"),
                                              after=query.validated_data.get("after")))
        return Response({
            "status": run.status, "current_step": run.current_step, "max_steps": run.max_steps,
            "last_step": points[-1].step if points else None,
            "points": MetricPointSerializer(points, many=True).data,
        })


class RunLogView(APIView):
    @extend_schema(parameters=[LogQuerySerializer], responses={200: LogLineSerializer(many=True), 404: ERROR},
                   summary="The run's log lines after an id (the newest 500 at most)")
    def get(self, request: Request, run_id) -> Response:
        run = owned_run(request, run_id)
        query = LogQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        return Response(LogLineSerializer(selectors.log_after(run, query.validated_data["after"]), many=True).data)


class RunCheckpointsView(APIView):
    @extend_schema(responses={200: CheckpointSerializer(many=True), 404: ERROR}, summary="A run's checkpoints")
    def get(self, request: Request, run_id) -> Response:
        run = owned_run(request, run_id)
        return Response(CheckpointSerializer(run.checkpoints.order_by("step"), many=True).data)


class RunCancelView(APIView):
    @extend_schema(request=None, responses={200: RunSerializer, 404: ERROR, 409: ERROR},
                   summary="Cancel (a running run stops after saving a checkpoint)")
    def post(self, request: Request, run_id) -> Response:
        run = _state_change(services.run_cancel, owned_run(request, run_id))
        return Response(RunSerializer(run).data)


class RunResumeView(APIView):
    @extend_schema(request=None, responses={200: RunSerializer, 404: ERROR, 409: ERROR, 429: ERROR, 507: ERROR},
                   summary="Resume a cancelled, crashed or failed run from its last checkpoint")
    def post(self, request: Request, run_id) -> Response:
        run = _state_change(services.run_resume, owned_run(request, run_id))
        return Response(RunSerializer(run).data)


class RunCloneView(APIView):
    @extend_schema(request=RunCloneSerializer,
                   responses={201: RunSerializer, 400: ERROR, 404: ERROR, 429: ERROR, 507: ERROR},
                   summary="Launch a new run with the same data and config")
    def post(self, request: Request, run_id) -> Response:
        run = owned_run(request, run_id)
        ser = RunCloneSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        clone = services.run_clone(run=run, owner=request.user, name=ser.validated_data.get("name") or None)
        return Response(RunSerializer(clone).data, status=status.HTTP_201_CREATED)


class RunFinetuneOnView(APIView):
    @extend_schema(request=FinetuneOnSerializer,
                   responses={201: RunSerializer, 400: ERROR, 404: ERROR, 409: ERROR, 429: ERROR, 507: ERROR},
                   summary="Fine-tune a multi-task run's checkpoint on one of its datasets alone",
                   description="T5's multi-task training, then fine-tuning on one task (Raffel et al. 2020, "
                               "section 3.5.3): a new fine-tuning run from the run's best checkpoint (early "
                               "stopping's) or else its last, on that dataset as text to text with the task's "
                               "prefix and the run's settings. Its base_checkpoint is the multi-task run's. 400 "
                               "for a run that is not multi-task or a dataset that is not one of its tasks; 409 "
                               "while the run has no checkpoint.")
    def post(self, request: Request, run_id) -> Response:
        run = owned_run(request, run_id)
        ser = FinetuneOnSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        data = dict(ser.validated_data)
        dataset_id, name = data.pop("dataset"), data.pop("name", "")
        try:
            child = services.finetune_on_one(owner=request.user, run=run, dataset_id=dataset_id, training=data,
                                             name=name)
        except services.RunStateError as e:
            raise Conflict(str(e)) from None
        return Response(RunSerializer(child).data, status=status.HTTP_201_CREATED)


class RunConfigYamlView(APIView):
    @extend_schema(responses={(200, "application/yaml"): CONFIG_YAML, 404: ERROR},
                   summary="The run's config as YAML (re-importable)")
    def get(self, request: Request, run_id) -> HttpResponse:
        return config_yaml_response(owned_run(request, run_id))


class RunCompareView(APIView):
    @extend_schema(parameters=[OpenApiParameter("run", OpenApiTypes.UUID, many=True, required=True,
                                                description="2 to 6 run ids, the parameter repeated")],
                   responses={200: OpenApiTypes.OBJECT, 400: ERROR, 404: ERROR},
                   summary="Two to six of your runs side by side: settings (family, preset, tokenizer, corpus, "
                           "base checkpoint and dataset first, then the config's, the differing ones first; "
                           "`lead` marks the first six, `differs` the differing ones), the curves of every "
                           "metric they share (`per_token` where the runs' tokenizers differ and the metric "
                           "counts tokens) and `tokenizer_note`, the sentence saying so")
    def get(self, request: Request) -> Response:
        runs = [owned_run(request, run_id) for run_id in dict.fromkeys(request.query_params.getlist("run"))]
        try:
            return Response(results.compare(runs))
        except results.CompareError as e:
            raise exceptions.ValidationError(str(e)) from None


class RunPredictionsView(APIView):
    @extend_schema(responses={(200, "text/csv"): OpenApiTypes.STR, (200, "application/x-ndjson"): OpenApiTypes.STR,
                              404: ERROR},
                   operation_id="runs_predictions_retrieve",
                   parameters=[OpenApiParameter("fmt", str, OpenApiParameter.PATH, enum=["csv", "jsonl"])],
                   summary="A fine-tuning run's test predictions (.csv or .jsonl): input, gold, predicted, score, "
                           "correct; the errors first")
    def get(self, request: Request, run_id, fmt: str) -> HttpResponse:
        run = owned_run(request, run_id)
        if fmt not in selectors.PREDICTION_FILES:
            raise Missing(f"Predictions come as .csv or .jsonl, not .{fmt}.")
        response = predictions_response(run, fmt)
        if response is None:
            raise Missing(NO_PREDICTIONS)
        return response


class RunSamplesView(APIView):
    @extend_schema(responses={200: RunSamplesSerializer, 404: ERROR},
                   summary="A text-to-text or SFT run's generated samples at each validation",
                   description="For each validation (oldest first, the newest 50 kept): the step and a few validation "
                               "examples' input, the text the model generated and the reference. Empty before the "
                               "first validation, and for runs that generate no text. Live on the run's websocket "
                               "as {\"type\": \"samples\", \"step\", \"samples\"}.")
    def get(self, request: Request, run_id) -> Response:
        run = owned_run(request, run_id)
        return Response(RunSamplesSerializer({"validations": selectors.validation_samples(run)}).data)


class RunTestReportView(APIView):
    @extend_schema(responses={200: OpenApiTypes.OBJECT, 404: ERROR},
                   summary="A fine-tuning run's test split: its metrics, confusion matrix and per-class table "
                           "(classification per label, NER per entity type), and how it stands against the "
                           "dataset's lexical baseline (baseline: {baseline, metric, split, run, baseline_value, "
                           "beats, higher_is_better}, null without one)")
    def get(self, request: Request, run_id) -> Response:
        run = owned_run(request, run_id)
        metrics = dict(selectors.test_metrics(run))
        if not metrics:
            raise Missing("This run has not scored a test split: a fine-tuning run does so after its "
                                      "last step.")
        report = selectors.test_report(run) or {}
        return Response({"metrics": metrics, "confusion": report.get("confusion"),
                         "per_class": report.get("per_class"), "level": report.get("level"),
                         "baseline": results.baseline_verdict(run),
                         "predictions": {fmt: reverse("api-run-predictions", args=[run.id, fmt])
                                         for fmt in selectors.PREDICTION_FILES
                                         if selectors.predictions_file(run, fmt) is not None}})


def owned_checkpoint(request: Request, checkpoint_id) -> Checkpoint:
    """The user's checkpoint, or a 404 in the API's words."""
    try:
        return selectors.checkpoint_get(request.user, checkpoint_id)
    except Http404:
        raise exceptions.NotFound() from None


class CheckpointReadinessView(APIView):
    @extend_schema(parameters=[ReadinessQuerySerializer], responses={200: OpenApiTypes.OBJECT, 400: ERROR, 404: ERROR},
                   summary="Is a checkpoint likely to help fine-tuning? Its pre-training record and, with a dataset, "
                           "how alike its sentence vectors of 64 of the dataset's examples are")
    def get(self, request: Request, checkpoint_id) -> Response:
        """{"record": {"imported", "steps", "tokens_seen", "valid_loss", "valid_accuracy", "notes": [sentences]},
        "probe": {"examples", "pooling", "mean_cosine", "collapsed", "within_class", "between_class", "separation"}
        or {"error": sentence} or null (no ready dataset given), "collapsed", "warn": whether the checkpoint is
        unlikely to help, "importer_url"}. The probe is computed once per checkpoint and dataset, then cached."""
        from webapp.datasets.selectors import dataset_get

        checkpoint = owned_checkpoint(request, checkpoint_id)
        query = ReadinessQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        dataset = None
        if "dataset" in query.validated_data:
            try:
                dataset = dataset_get(request.user, query.validated_data["dataset"])
            except Http404:
                raise exceptions.NotFound() from None
        return Response({**readiness.check(checkpoint, dataset), "importer_url": reverse("explorer:import")})


def _query_format(request: Request) -> str:
    if request.query_params.get("fmt", None) == "":
        raise exceptions.ValidationError({"fmt": ["Name the export's format (?fmt=hf, onnx or gguf), or leave fmt "
                                                  "out for hf."]})
    query = ExportFormatQuerySerializer(data=request.query_params)
    query.is_valid(raise_exception=True)
    return exports.check_format(query.validated_data["fmt"])


class CheckpointExportJobView(APIView):
    @extend_schema(parameters=[ExportFormatQuerySerializer], request=None,
                   responses={200: CheckpointExportSerializer, 400: ERROR, 404: ERROR},
                   summary="Where an export (Hugging Face, ONNX or GGUF) of a checkpoint of yours stands",
                   description="?fmt= hf (default), onnx or gguf. status (pending, processing, ready, failed), "
                               "progress (0-100), the error sentence of a failed export, and download_url once it "
                               "is ready. A 404 until an export in that format was started.")
    def get(self, request: Request, checkpoint_id) -> Response:
        checkpoint = owned_checkpoint(request, checkpoint_id)
        fmt = _query_format(request)
        export = exports.export_of(checkpoint, fmt)
        if export is None:
            raise Missing(f"This checkpoint has not been exported as {fmt} yet; POST to this address (with "
                          f'{{"format": "{fmt}"}}) starts the export.')
        return Response(CheckpointExportSerializer(export).data)

    @extend_schema(request=ExportStartSerializer,
                   responses={200: CheckpointExportSerializer, 202: CheckpointExportSerializer,
                              400: ERROR, 404: ERROR, 507: ERROR},
                   summary="Export a checkpoint of yours as Hugging Face transformers, ONNX or GGUF (a background "
                           "job)",
                   description="Body: {\"format\": \"hf\" | \"onnx\" | \"gguf\", \"license\": an id of "
                               "trainer.model_card.LICENSES}, both optional (hf, other). Queues the export on the "
                               "short-jobs queue (202) and answers where it stands; poll GET on this address with "
                               "?fmt=, then download download_url (a zip of the format's folder with its model "
                               "card README.md: for hf config.json, model.safetensors and the tokenizer files; a "
                               "fine-tuned checkpoint as ...ForSequenceClassification / ForTokenClassification / "
                               "ForQuestionAnswering with id2label). An export under way, or a ready one with the "
                               "same license made after the weights were last written, is answered as it is (200). "
                               "400 with a sentence for an unknown format or license, a checkpoint whose files are "
                               "gone or that the format cannot hold (ELMo; bottleneck adapters; GGUF: not GPT-2), "
                               "507 when the server's storage is nearly full.")
    def post(self, request: Request, checkpoint_id) -> Response:
        checkpoint = owned_checkpoint(request, checkpoint_id)
        body = ExportStartSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        export, started = exports.export_start(checkpoint=checkpoint, fmt=body.validated_data["format"],
                                               license=body.validated_data["license"])
        export.refresh_from_db()
        return Response(CheckpointExportSerializer(export).data,
                        status=status.HTTP_202_ACCEPTED if started else status.HTTP_200_OK)


class CheckpointExportView(APIView):
    @extend_schema(parameters=[ExportFormatQuerySerializer],
                   responses={(200, "application/zip"): OpenApiTypes.BINARY, 400: ERROR, 404: ERROR, 409: ERROR},
                   summary="Download an export of a checkpoint of yours (a zip; ?fmt= hf, onnx or gguf)",
                   description="Once the export (POST /api/checkpoints/<id>/export/) is ready; 409 with a sentence "
                               "while it is under way, when it failed, was never started or is out of date.")
    def get(self, request: Request, checkpoint_id) -> HttpResponse:
        checkpoint = owned_checkpoint(request, checkpoint_id)
        fmt = _query_format(request)
        return export_response(checkpoint, exports.ready_archive(checkpoint, fmt), fmt)


class RegistryView(APIView):
    @extend_schema(responses={200: OpenApiTypes.OBJECT},
                   summary="What can be trained: families, presets, objectives, field defaults and bounds")
    def get(self, request: Request) -> Response:
        return Response({**launch.registry_json(), "launch_defaults": launch.launch_defaults()})


def config_text(run: Run, *, shown: bool = False) -> str:
    """The run's config as YAML: a RunConfig's (re-importable by the launch form and the CLI), or
    a fine-tuning run's FinetuneConfig fields (`python -m trainer finetune` reads the same names).
    shown: as the run page shows it, its server folders named instead (selectors.shown_config)."""
    config = selectors.shown_config(run) if shown else run.config
    if run.is_finetune:
        import yaml

        return yaml.safe_dump(config, sort_keys=False, allow_unicode=True)
    from trainer.config import RunConfig

    return RunConfig.from_dict(config).to_yaml()


def config_yaml_response(run: Run) -> HttpResponse:
    text = f"# LM Workbench run “{run.name}” ({run.id})\n" + config_text(run)
    response = HttpResponse(text, content_type="application/yaml; charset=utf-8")
    filename = f"{slugify(run.name) or 'run'}.yaml"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


NO_PREDICTIONS = ("This run has no test predictions: a fine-tuning run writes them when it scores its test split, "
                  "after its last step (a pre-training run has none).")


def predictions_response(run: Run, fmt: str) -> FileResponse | None:
    """The run's test predictions as a download, errors first (None when it has none)."""
    path = selectors.predictions_file(run, fmt)
    if path is None:
        return None
    content_type = "text/csv; charset=utf-8" if fmt == "csv" else "application/x-ndjson; charset=utf-8"
    name = f"{slugify(run.name) or 'run'}-test-predictions.{fmt}"
    return FileResponse(path.open("rb"), content_type=content_type, as_attachment=True, filename=name)




def export_response(checkpoint: Checkpoint, archive, fmt: str = "hf") -> FileResponse:
    return FileResponse(archive.open("rb"), content_type="application/zip", as_attachment=True,
                        filename=exports.download_name(checkpoint, fmt))
