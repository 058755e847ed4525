"""API shapes of runs, metric points and checkpoints (also the OpenAPI schema's components)."""
from __future__ import annotations

from django.urls import reverse
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from webapp.api.serializers import BuiltOnceFields, QuerySerializer, RequestSerializer
from webapp.jobs.serializers import JobStatusField
from webapp.runs import capacity, launch
from webapp.runs.fields import api_field
from webapp.runs.models import Checkpoint, CheckpointExport, LogLine, MetricPoint, Run


class CheckpointSerializer(BuiltOnceFields, serializers.ModelSerializer):
    run = serializers.UUIDField(source="run_id", read_only=True)
    files_present = serializers.SerializerMethodField()
    explore_url = serializers.SerializerMethodField()
    finetune_url = serializers.SerializerMethodField()
    export_url = serializers.SerializerMethodField()
    serve_url = serializers.SerializerMethodField(help_text="The page of its model server (Serve).")

    class Meta:
        model = Checkpoint
        fields = ["id", "run", "step", "metrics", "created_at", "files_present", "explore_url", "finetune_url",
                  "export_url", "serve_url"]

    def get_files_present(self, obj: Checkpoint) -> bool:
        return obj.folder.is_dir()

    def get_explore_url(self, obj: Checkpoint) -> str:
        return f"{reverse('explorer:index')}?checkpoint={obj.id}"

    def get_finetune_url(self, obj: Checkpoint) -> str:
        return f"{reverse('runs:finetune')}?checkpoint={obj.id}"

    def get_export_url(self, obj: Checkpoint) -> str:
        return reverse("runs:checkpoint-export", args=[obj.id])

    def get_serve_url(self, obj: Checkpoint) -> str:
        return reverse("serving:page", args=[obj.id])


class CheckpointExportSerializer(serializers.ModelSerializer):
    """A checkpoint's export in one format, a job on the short-jobs queue (webapp.runs.exports)."""

    status = JobStatusField()
    status_label = serializers.CharField(source="get_status_display", read_only=True)
    format = serializers.CharField(read_only=True, help_text="hf, onnx or gguf.")
    license = serializers.CharField(read_only=True, help_text="The license its model card names.")
    error = serializers.CharField(read_only=True, help_text="Why a failed export failed: a sentence ('' otherwise).")
    progress = serializers.FloatField(read_only=True, help_text="0-100.")
    download_url = serializers.SerializerMethodField(help_text="The zip, once the export is ready (null before).")
    page_url = serializers.SerializerMethodField(help_text="The export's page.")

    class Meta:
        model = CheckpointExport
        fields = ["id", "checkpoint", "format", "license", "status", "status_label", "progress", "error",
                  "architecture", "size_bytes", "download_url", "page_url", "created_at", "finished_at"]
        read_only_fields = fields

    def get_download_url(self, obj: CheckpointExport) -> str | None:
        from webapp.jobs.models import JobStatus

        if obj.status != JobStatus.READY:
            return None
        return f"{reverse('api-checkpoint-export', args=[obj.checkpoint_id])}?fmt={obj.format}"

    def get_page_url(self, obj: CheckpointExport) -> str:
        return reverse("runs:checkpoint-export", args=[obj.checkpoint_id])


def _format_field(help_text: str) -> serializers.ChoiceField:
    from webapp.runs.models import ExportFormat

    return serializers.ChoiceField(
        choices=ExportFormat.choices, required=False, default=ExportFormat.HF, help_text=help_text,
        error_messages={"invalid_choice": f'There is no "{{input}}" export; the formats are '
                                          f'{", ".join(ExportFormat.values)}.'})


def _license_field() -> serializers.ChoiceField:
    from trainer.model_card import LICENSES

    return serializers.ChoiceField(
        choices=list(LICENSES), required=False, default="other",
        help_text="The license the model card names (default other).",
        error_messages={"invalid_choice": f'"{{input}}" is not a license an export can name; choose one of '
                                          f'{", ".join(LICENSES)}.'})


class ExportFormatQuerySerializer(serializers.Serializer):
    """?fmt= (DRF keeps ?format= for its own renderers)."""

    fmt = _format_field("The export's format: hf (default), onnx or gguf.")


class ExportStartSerializer(serializers.Serializer):
    """What to export: the format and the license its model card names (trainer.model_card.LICENSES)."""

    format = _format_field("hf (default), onnx or gguf.")
    license = _license_field()


class RunSerializer(BuiltOnceFields, serializers.ModelSerializer):
    status_label = serializers.CharField(source="get_status_display", read_only=True)
    progress = serializers.SerializerMethodField()
    last_checkpoint = serializers.SerializerMethodField()
    dashboard_url = serializers.SerializerMethodField()
    waiting = serializers.SerializerMethodField(
        help_text="While the run is queued, what it waits for in a sentence (\"Waiting for a worker with 2 GPUs.\"), "
                  "saying so when no live worker can take it; empty otherwise.")

    class Meta:
        model = Run
        fields = [
            "id", "name", "kind", "status", "status_label", "error", "family", "preset", "objectives", "queue",
            "corpus", "tokenizer", "dataset", "base_checkpoint", "cloned_from", "current_step", "max_steps", "progress", "tokens_seen",
            "cancel_requested", "config", "created_at", "started_at", "finished_at", "heartbeat_at",
            "last_checkpoint", "dashboard_url", "waiting",
        ]
        read_only_fields = fields

    def get_progress(self, obj: Run) -> float:
        return round(min(1.0, obj.current_step / obj.max_steps), 4) if obj.max_steps else 0.0

    @extend_schema_field(CheckpointSerializer(allow_null=True))
    def get_last_checkpoint(self, obj: Run) -> dict | None:
        latest = getattr(obj, "latest_checkpoints", None)  # selectors.with_last_checkpoint loaded it
        ckpt = obj.checkpoints.order_by("-step").first() if latest is None else next(iter(latest), None)
        return CheckpointSerializer(ckpt).data if ckpt else None

    def get_dashboard_url(self, obj: Run) -> str:
        return reverse("runs:detail", args=[obj.id])

    def get_waiting(self, obj: Run) -> str:
        return capacity.waiting(obj)


class MetricPointSerializer(serializers.ModelSerializer):
    values = serializers.DictField(child=serializers.FloatField(allow_null=True))
    cursor = serializers.IntegerField(source="seq", read_only=True, help_text=(
        "The point's place in the order the run's points were stored (1, 2, ...): the run socket's "
        "?after=<cursor> replays the points stored after it."))

    class Meta:
        model = MetricPoint
        fields = ["step", "split", "values", "cursor"]


class MetricsSerializer(serializers.Serializer):
    status = serializers.CharField()
    current_step = serializers.IntegerField()
    max_steps = serializers.IntegerField()
    last_step = serializers.IntegerField(allow_null=True, help_text="The highest step in `points` (null when empty).")
    points = MetricPointSerializer(many=True)


class MetricsQuerySerializer(QuerySerializer):
    since = serializers.IntegerField(required=False, min_value=-1,
                                     help_text="Return only points with a step greater than this.")
    after = serializers.IntegerField(required=False, min_value=0, max_value=2**63 - 1, help_text=(
        "Return only points stored after the one with this cursor, in cursor order (what a client that "
        "read up to it has not seen, whatever the splits; `since` is then ignored)."))


class ReadinessQuerySerializer(QuerySerializer):
    dataset = serializers.UUIDField(required=False, help_text=(
        "One of your ready labelled datasets: its sentence vectors under the checkpoint are probed too."))


class LogLineSerializer(serializers.ModelSerializer):
    time = serializers.DateTimeField(source="created_at")

    class Meta:
        model = LogLine
        fields = ["id", "text", "time"]


class LogQuerySerializer(QuerySerializer):
    after = serializers.IntegerField(required=False, min_value=0, default=0,
                                     help_text="Return only lines with an id greater than this.")


class _RunCreateBase(RequestSerializer):

    name = serializers.CharField(required=False, allow_blank=True, max_length=200)
    corpus = serializers.UUIDField(required=False, allow_null=True,
                                   help_text="Defaults to the corpus the tokenizer was trained on.")
    tokenizer = serializers.UUIDField(help_text="A ready tokenizer of yours (its shards are the training data).")
    family = serializers.CharField(required=False)
    preset = serializers.CharField(required=False)
    objectives = serializers.ListField(child=serializers.CharField(), required=False)
    config_yaml = serializers.CharField(
        required=False, allow_blank=True,
        help_text="A run config in YAML (as from GET /api/runs/<id>/config.yaml); explicit fields override it.",
    )
    model_overrides = serializers.DictField(required=False, help_text="Model config fields that replace the preset's.")
    teacher_checkpoint = serializers.CharField(
        required=False, allow_blank=True,
        help_text="DistilBERT: the id of one of your BERT checkpoints (trained with the same tokenizer).",
    )


def _model_field(name: str) -> serializers.Field:
    """A family's models_lib field as a top-level shortcut (goes to model_overrides)."""
    spec = launch.model_field(name)
    help_text = f"{spec.get('help', '')} ({', '.join(spec['families'])} only; goes to model_overrides.)"
    if spec.get("type") == "bool":
        return serializers.BooleanField(allow_null=True, default=None, help_text=help_text)
    if "choices" in spec:
        return serializers.ChoiceField(choices=[c for c, _ in spec["choices"]], required=False, help_text=help_text)
    bounds = {k2: spec[k1] for k1, k2 in (("min", "min_value"), ("max", "max_value")) if k1 in spec}
    return serializers.FloatField(required=False, help_text=help_text, **bounds)


# The training fields are generated from the schema (webapp.runs.fields: bounds, choices and help as RunConfig's).
RunCreateSerializer = type(
    "RunCreateSerializer", (_RunCreateBase,),
    {
        "__doc__": "Launch a run. Only the tokenizer is required; every other field has a default.",
        "__module__": __name__,
        **{name: api_field(launch.registry_json()["fields"][name]) for name in launch.CONFIG_FIELDS},
        **{name: _model_field(name) for name in launch.model_field_names()},
    },
)


class RunCloneSerializer(RequestSerializer):
    name = serializers.CharField(required=False, allow_blank=True, max_length=200)


def _finetune_field(name: str, **kwargs) -> serializers.Field:
    """One fine-tuning setting's API field (its schema entry, webapp.runs.fields)."""
    return api_field(launch.finetune_json()["settings"][name], **kwargs)


class ExtraDatasetSerializer(RequestSerializer):
    """One more task of a T5 multi-task run: a dataset of yours and its task prefix."""

    dataset = serializers.UUIDField(help_text="One of your ready text-to-text, classification or regression datasets.")
    prefix = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False, max_length=500,
                                   help_text='Its task prefix, e.g. "classify: ".')
    name = serializers.CharField(required=False, allow_blank=True, max_length=40,
                                 help_text="The task's name in the metric keys (empty: from the prefix).")


class _FinetuneCreateBase(RequestSerializer):
    """Fine-tune one of your checkpoints on one of your ready datasets; every setting is optional."""

    name = serializers.CharField(required=False, allow_blank=True, max_length=200)
    checkpoint = serializers.UUIDField(help_text="One of your checkpoints: an encoder's for the task heads, T5's or "
                                                 "UniLM's for text to text, GPT's for SFT and GPT-1's classifier, "
                                                 "ELMo's for its features.")
    dataset = serializers.UUIDField(help_text="One of your ready labelled datasets; its task is what is trained.")
    extra_datasets = ExtraDatasetSerializer(many=True, required=False, max_length=16,
                                            help_text="T5 multi-task mixing: more datasets trained in the same "
                                                      "text-to-text run, each with its own task prefix.")


def finetune_create_serializer() -> type[RequestSerializer]:
    """POST /api/finetune/'s serializer: one of your checkpoints and one of your ready datasets by
    id, and every fine-tuning setting of the schema (launch.finetune_json), each optional (the
    config's default). Built again when the schema is (a task registered later adds its settings)."""
    schema = launch.finetune_json()
    cached = _SERIALIZERS.get(id(schema))
    if cached is None:
        cached = type("FinetuneCreateSerializer", (_FinetuneCreateBase,), {
            "__doc__": _FinetuneCreateBase.__doc__ or "Fine-tune a checkpoint of yours on a dataset of yours.",
            "__module__": __name__,
            **{name: api_field(spec) for name, spec in schema["settings"].items()}})
        _SERIALIZERS.clear()
        _SERIALIZERS[id(schema)] = cached
    return cached


_SERIALIZERS: dict[int, type] = {}
FinetuneCreateSerializer = finetune_create_serializer()  # what the OpenAPI schema documents


class SampleSerializer(serializers.Serializer):
    input = serializers.CharField(allow_blank=True, help_text="The validation example's input (its prompt, for SFT).")
    generated = serializers.CharField(allow_blank=True, help_text="What the model generated for it.")
    reference = serializers.CharField(allow_blank=True, help_text="The reference text.")


class ValidationSamplesSerializer(serializers.Serializer):
    step = serializers.IntegerField()
    samples = SampleSerializer(many=True)


class RunSamplesSerializer(serializers.Serializer):
    validations = ValidationSamplesSerializer(many=True, help_text="Oldest first.")


class FinetuneOnSerializer(RequestSerializer):
    """POST /api/runs/<id>/finetune-on/: a multi-task run's checkpoint fine-tuned on one of its
    datasets alone (the run's settings and that task's prefix; these fields override them)."""

    dataset = serializers.UUIDField(help_text="One of the run's datasets (its main dataset or one of its "
                                              "extra_datasets).")
    name = serializers.CharField(required=False, allow_blank=True, max_length=200,
                                 help_text="Empty: “<run>, then <dataset>”.")
    max_steps = _finetune_field("max_steps")
    epochs = _finetune_field("epochs", help_text="Passes over the train split instead of max_steps.")
    batch_size = _finetune_field("batch_size")
    lr = _finetune_field("lr")
    warmup_ratio = _finetune_field("warmup_ratio")
    eval_every = _finetune_field("eval_every")
    early_stopping_patience = _finetune_field("early_stopping_patience")
