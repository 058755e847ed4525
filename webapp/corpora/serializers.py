"""JSON shapes of corpora and tokenizers, and the validation of what clients post."""
from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from webapp.api.serializers import RequestSerializer
from webapp.corpora.forms import (
    EXTRA_IDS_HELP, EXTRA_IDS_LABEL, VOCAB_DEFAULT, algorithm_choices, cleaning_rules, extra_ids_max, vocab_bounds,
)
from webapp.corpora.models import Corpus, JobStatus, Tokenizer
from webapp.corpora.uploads import check_upload


@extend_schema_field(
    {
        "type": "string",
        "enum": JobStatus.values,
        "description": "pending (waiting for a worker), processing, ready or failed (see `error`).",
    },
    component_name="JobStatusEnum",
)
class JobStatusField(serializers.ChoiceField):
    """The status of a corpus or tokenizer job. Named explicitly: the runs app has its own `status` enum."""

    def __init__(self, **kwargs):
        super().__init__(choices=JobStatus.choices, read_only=True, **kwargs)


class CorpusSerializer(serializers.ModelSerializer):
    status = JobStatusField()

    class Meta:
        model = Corpus
        fields = ["id", "name", "original_filename", "size_bytes", "status", "progress", "error",
                  "options", "stats", "removed", "preview", "created_at"]
        read_only_fields = fields


def _upload_serializer_class() -> type[serializers.Serializer]:
    """The upload form as a serializer: a file, a name, and one boolean per cleaning rule."""

    def validate_file(self, uploaded):
        try:
            check_upload(uploaded.name, uploaded.size)
        except DjangoValidationError as error:
            raise serializers.ValidationError(error.messages) from None
        return uploaded

    attrs = {
        "file": serializers.FileField(allow_empty_file=True, help_text=(
            "A .txt file (documents separated by a blank line) or a .jsonl file (one {\"text\": ...} "
            "object per line), optionally gzip-compressed.")),
        "name": serializers.CharField(max_length=200, required=False, allow_blank=True,
                                      help_text="Defaults to the file name."),
        "validate_file": validate_file,
        "__module__": __name__,
        "__doc__": "Upload a corpus file with the cleaning rules to apply.",
    }
    for rule in cleaning_rules():
        attrs[rule.field] = serializers.BooleanField(required=False, default=False, help_text=rule.label)
    return type("CorpusUploadSerializer", (RequestSerializer,), attrs)


CorpusUploadSerializer = _upload_serializer_class()


@extend_schema_field({"type": "boolean", "enum": [True]})
class _TrueField(serializers.BooleanField):
    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        if value is not True:
            raise serializers.ValidationError('Send {"demo": true} for the demo corpus, or upload a file.')
        return value


class CorpusDemoSerializer(RequestSerializer):
    demo = _TrueField(help_text="true: build the demo corpus from Python's docstrings.")


class TokenizerSerializer(serializers.ModelSerializer):
    corpus = serializers.UUIDField(source="corpus_id", read_only=True)
    status = JobStatusField()

    class Meta:
        model = Tokenizer
        fields = ["id", "name", "corpus", "algorithm", "vocab_size", "lowercase", "extra_ids", "status", "progress",
                  "error", "stats", "created_at"]
        read_only_fields = fields


class TokenizerCreateSerializer(RequestSerializer):
    corpus = serializers.UUIDField(help_text="The id of one of your ready corpora.")
    algorithm = serializers.ChoiceField(choices=algorithm_choices(), default="wordpiece")
    vocab_size = serializers.IntegerField(
        min_value=vocab_bounds()[0], max_value=vocab_bounds()[1], default=VOCAB_DEFAULT)
    lowercase = serializers.BooleanField(default=True)
    extra_ids = serializers.IntegerField(min_value=0, max_value=extra_ids_max(), default=None, allow_null=True,
                                         label=EXTRA_IDS_LABEL, help_text=EXTRA_IDS_HELP)
    name = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")


class TokenizeRequestSerializer(RequestSerializer):
    text = serializers.CharField(max_length=10_000, allow_blank=True, trim_whitespace=False)


class TokenSerializer(serializers.Serializer):
    token = serializers.CharField()
    id = serializers.IntegerField()


class TokenizeResponseSerializer(serializers.Serializer):
    tokens = TokenSerializer(many=True)
