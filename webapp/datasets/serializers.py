"""JSON shapes of labelled datasets, and the validation of what clients send."""
from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from webapp.api.schema import ErrorSerializer  # noqa: F401 (the API's error body; imported from here too)
from webapp.api.serializers import QuerySerializer, RequestSerializer
from webapp.datasets.forms import MAX_LENGTH_BOUNDS, MAX_LENGTH_DEFAULT, SEED_MAX, task_choices
from webapp.datasets.models import Dataset
from webapp.datasets.uploads import (FILE_HELP, SPLIT_FILE_HELP, check_dataset_upload, check_split_upload,
                                     check_split_uploads)


def _demo_names() -> list[str]:
    from trainer.prep.labelled import DEMOS

    return list(DEMOS)


def _roles() -> list[str]:
    from trainer.prep.labelled import ROLES

    return list(ROLES)


DATASET_CHOICES = Dataset._meta.get_field("status").choices  # JobStatus's, mapping included


@extend_schema_field(
    {
        "type": "string",
        "enum": [value for value, _ in DATASET_CHOICES],
        "description": "mapping (waiting for the task, mapping and split: POST them to /mapping/), pending "
                       "(waiting for a worker), processing, ready, or failed (see `error`; it may be mapped again).",
    },
    component_name="DatasetStatusEnum",
)
class DatasetStatusField(serializers.ChoiceField):
    def __init__(self, **kwargs):
        super().__init__(choices=DATASET_CHOICES, read_only=True, **kwargs)


def _named_choice_field(component_name: str, description: str, choices) -> type[serializers.ChoiceField]:
    """A ChoiceField whose enum is a schema component of its own name (other apps have their own
    `task` and `strategy` enums)."""
    values = [value for value, _ in choices]

    @extend_schema_field({"type": "string", "enum": values, "description": description},
                         component_name=component_name)
    class NamedChoiceField(serializers.ChoiceField):
        def __init__(self, **kwargs):
            super().__init__(choices=choices, **kwargs)

    return NamedChoiceField


TaskField = _named_choice_field("DatasetTaskEnum", "A labelled dataset's task type.", task_choices())
SplitStrategyField = _named_choice_field(
    "SplitStrategyEnum", "random: a seeded shuffle by the fractions; column: the column mapped to the role split "
    "(train; validation, valid or dev; test); files: a dataset uploaded as a file per split (the only strategy it "
    "takes; without a validation file, the validation fraction of the train file is set aside at random).",
    [("random", "random"), ("column", "column"), ("files", "files")])


class DatasetSerializer(serializers.ModelSerializer):
    status = DatasetStatusField()
    split_origins = serializers.SerializerMethodField(
        help_text="Where each split's examples come from, in words ({split: \"from test.conll\" or \"0.1 of "
                  "train.conll, at random\"}), once the split is confirmed; {} before.")

    class Meta:
        model = Dataset
        fields = ["id", "name", "original_filename", "files", "size_bytes", "demo", "status", "progress", "error",
                  "format", "preview", "task", "mapping", "split_spec", "seed", "sizes", "split_origins", "labels",
                  "label_counts", "label_stats", "warnings", "examples", "baselines", "created_at"]
        read_only_fields = fields
        extra_kwargs = {
            "progress": {"help_text": "0 to 100 while the dataset is processed."},
            "error": {"help_text": "Why it failed, in one sentence (bad data: the row at fault)."},
            "demo": {"help_text": "The demo it was made from (GET /api/datasets/demos/), or empty."},
            "files": {"help_text": "A dataset uploaded as a file per split (or a .zip of them): {split: the file's "
                                   "name}; {} for one file."},
            "format": {"help_text": "csv, tsv, jsonl, conll or squad, read from the upload."},
            "preview": {"help_text": "What the first rows showed: format, columns, rows (long values shortened), the "
                                     "suggested mapping ({column: role}) and task, details (delimiter, gzip, ...)."},
            "task": {"help_text": "The confirmed task type (empty until the mapping is confirmed)."},
            "mapping": {"help_text": "The confirmed {column: role}."},
            "split_spec": {"help_text": "The confirmed split: {strategy, train, validation, test}."},
            "seed": {"help_text": "Shuffles a random split."},
            "sizes": {"help_text": "Examples per split (train, validation, test), once ready."},
            "labels": {"help_text": "The classes or tags, in label-id order, once ready."},
            "label_counts": {"help_text": "The bar chart's data: {kind: classes | bins | none, labels, counts: "
                                          "{split: [count per label]}}."},
            "label_stats": {"help_text": "Regression: per split count, min, max, mean, std."},
            "warnings": {"help_text": "Sentences worth reading that did not stop the ingest."},
            "examples": {"help_text": "The first training examples, as stored."},
            "baselines": {"help_text": "The yardstick of its fine-tuning runs, computed once it is ready: {task, metric "
                                       "(the task's primary), higher_is_better, baselines: [{name, label, kind: "
                                       "trivial | lexical, validation: {metric: value} | null, test: {...} | null}], "
                                       "note}. Empty for a dataset stored before baselines existed."},
        }

    @extend_schema_field({"type": "object", "additionalProperties": {"type": "string"}})
    def get_split_origins(self, dataset) -> dict[str, str]:
        from webapp.datasets.services import split_origins

        return split_origins(dataset)


class DatasetUploadSerializer(RequestSerializer):
    """Upload a labelled dataset: one file, a train file with a validation and/or test file, or a .zip of split
    files; the first rows of each are read at once."""

    file = serializers.FileField(allow_empty_file=True, help_text=FILE_HELP + " With validation_file or test_file: "
                                                                              "the train file.")
    validation_file = serializers.FileField(allow_empty_file=True, required=False,
                                            help_text=SPLIT_FILE_HELP["validation"])
    test_file = serializers.FileField(allow_empty_file=True, required=False, help_text=SPLIT_FILE_HELP["test"])
    name = serializers.CharField(max_length=200, required=False, allow_blank=True, default="",
                                 help_text="Defaults to the file name.")

    def validate_file(self, uploaded):
        return _checked(check_dataset_upload, uploaded)

    def validate_validation_file(self, uploaded):
        return _checked(check_split_upload, uploaded)

    def validate_test_file(self, uploaded):
        return _checked(check_split_upload, uploaded)

    def validate(self, data):
        try:
            check_split_uploads(data["file"].name, {"validation": data.get("validation_file"),
                                                    "test": data.get("test_file")})
        except DjangoValidationError as error:
            raise serializers.ValidationError({"file": error.messages}) from None
        return data


def _checked(check, uploaded):
    try:
        check(uploaded.name, uploaded.size)
    except DjangoValidationError as error:
        raise serializers.ValidationError(error.messages) from None
    return uploaded


class SplitSerializer(RequestSerializer):
    strategy = SplitStrategyField(required=False, help_text="Default: files for a dataset uploaded as a file per "
                                                            "split, else column when a column is mapped to split, "
                                                            "else random.")
    train = serializers.FloatField(min_value=0, max_value=1, default=0.8)
    validation = serializers.FloatField(min_value=0, max_value=1, default=0.1)
    test = serializers.FloatField(min_value=0, max_value=1, default=0.1)


class MappingSerializer(RequestSerializer):
    """Confirm what the upload holds; the ingest starts in the background."""

    task = TaskField(help_text="The task type the dataset is for.")
    mapping = serializers.DictField(
        child=serializers.CharField(allow_blank=True, allow_null=True),
        help_text="{column: role} for the columns the task uses; a column left out (or mapped to \"\") is ignored. "
                  f"Roles: {', '.join(_roles())}.")
    split = SplitSerializer(required=False, help_text="Default: by the files for a dataset uploaded as a file per "
                                                      "split (0.1 of the train file set aside for validation when "
                                                      "there is no validation file), else by the split column when "
                                                      "one is mapped, else at random 0.8 / 0.1 / 0.1.")
    seed = serializers.IntegerField(min_value=0, max_value=SEED_MAX, default=0)


class DemoSerializer(serializers.Serializer):
    name = serializers.CharField()
    label = serializers.CharField()
    task = serializers.CharField()
    filename = serializers.CharField()
    rows = serializers.IntegerField(help_text="Examples (on Python 3.11; other versions differ slightly).")
    description = serializers.CharField(help_text="How it is made from the standard library's docstrings.")


class DemoCreateSerializer(RequestSerializer):
    name = serializers.ChoiceField(choices=_demo_names(), help_text="The demo to write and ingest.")


class StatsQuerySerializer(QuerySerializer):
    tokenizer = serializers.UUIDField(required=False, help_text="One of your ready tokenizers: adds `lengths`.")
    max_length = serializers.IntegerField(min_value=MAX_LENGTH_BOUNDS[0], max_value=MAX_LENGTH_BOUNDS[1],
                                          default=MAX_LENGTH_DEFAULT,
                                          help_text="Tokens per example kept; `lengths` counts the longer ones.")


class LabelCountsSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["classes", "bins", "none"],
                                   help_text="classes (examples per class; tokens per tag), bins (regression "
                                             "scores in equal-width bins) or none (no labels).")
    labels = serializers.ListField(child=serializers.CharField())
    counts = serializers.DictField(child=serializers.ListField(child=serializers.IntegerField()),
                                   help_text="{split: [count per label]}.")


class LengthsSerializer(serializers.Serializer):
    tokenizer = serializers.UUIDField()
    tokenizer_name = serializers.CharField()
    max_length = serializers.IntegerField()
    examples = serializers.IntegerField(help_text="Examples measured.")
    sampled = serializers.BooleanField(help_text="True when only the first examples (train first) were measured.")
    edges = serializers.ListField(child=serializers.IntegerField(),
                                  help_text="Bin i counts the lengths in [edges[i], edges[i + 1]).")
    counts = serializers.ListField(child=serializers.IntegerField())
    truncated = serializers.IntegerField(help_text="Examples longer than max_length.")
    truncated_share = serializers.FloatField(help_text="truncated / examples.")
    mean = serializers.FloatField()
    median = serializers.IntegerField()
    p95 = serializers.IntegerField()
    longest = serializers.IntegerField()


class StatsSerializer(serializers.Serializer):
    sizes = serializers.DictField(child=serializers.IntegerField(), help_text="Examples per split.")
    labels = LabelCountsSerializer()
    label_stats = serializers.DictField(child=serializers.DictField(child=serializers.FloatField()),
                                        help_text="Regression: per split count, min, max, mean, std.")
    lengths = LengthsSerializer(allow_null=True, help_text="Token lengths; null without a tokenizer.")


class InContextRowSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    checkpoint = serializers.CharField(help_text="The checkpoint's label (\"run @ step 500\" or the imported name).")
    checkpoint_id = serializers.UUIDField()
    template = serializers.CharField()
    separator = serializers.CharField(allow_blank=True)
    k_max = serializers.IntegerField()
    seed = serializers.IntegerField()
    normalise = serializers.BooleanField(help_text="Labels scored by log-likelihood per token.")
    n_queries = serializers.IntegerField(help_text="Held-out examples evaluated.")
    k = serializers.ListField(child=serializers.IntegerField(), help_text="0 .. k_max.")
    accuracy = serializers.ListField(child=serializers.FloatField(), help_text="Accuracy for each k.")
    best_k = serializers.IntegerField(allow_null=True, help_text="The k with the highest accuracy (the smallest on a tie).")
    best_accuracy = serializers.FloatField(allow_null=True)
    created_at = serializers.DateTimeField()


class LeaderboardSerializer(serializers.Serializer):
    primary = serializers.CharField(allow_blank=True, help_text="The task's primary metric (empty with no runs).")
    higher_is_better = serializers.BooleanField()
    settings = serializers.ListField(child=serializers.CharField(), help_text="The settings in which the runs differ.")
    test_metrics = serializers.ListField(child=serializers.CharField())
    rows = serializers.ListField(child=serializers.DictField(), help_text=(
        "Per fine-tuning run, best first: id, name, status, checkpoint, checkpoint_id, settings, best_valid, "
        "best_valid_step, test (its test metrics), test_primary, created_at, dashboard_url."))
    best_test_accuracy = serializers.FloatField(allow_null=True, help_text=(
        "The best test accuracy of the fine-tuning runs (the in-context chart's reference line); null without one."))
    baselines = serializers.ListField(child=serializers.DictField(), help_text=(
        "The dataset's baselines as rows beside the runs: name, label, kind (trivial or lexical), valid (its validation "
        "value of the primary metric) and test (its test metrics)."))
    incontext = InContextRowSerializer(many=True, help_text=(
        "The zero-, one- and few-shot evaluations saved on this dataset (POST /api/explore/incontext-accuracy/), "
        "newest first."))
