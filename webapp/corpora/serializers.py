"""JSON shapes of corpora and tokenizers, and the validation of what clients post."""
from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from webapp.api.serializers import RequestSerializer
from webapp.corpora.forms import (
    EXTRA_IDS_HELP, EXTRA_IDS_LABEL, VOCAB_DEFAULT, algorithm_choices, cleaning_rules, extra_ids_max, vocab_bounds,
)
from webapp.corpora.models import Corpus, SourceKind, Tokenizer
from webapp.corpora.services import LISTED_FILES
from webapp.corpora.uploads import FORMATS_HELP, check_uploads
from webapp.jobs.serializers import JobStatusField


class SourceFileSerializer(serializers.Serializer):
    """One file of a corpus (trainer.prep.sources.SourceFile)."""

    name = serializers.CharField(help_text="As shown: the uploaded file's name, or the path under the folder or "
                                           "glob it was found in.")
    path = serializers.CharField(required=False, help_text="Imports only: the file's absolute path on the server.")
    format = serializers.CharField(help_text="txt, jsonl, parquet or arrow (\"archive\" for an uploaded archive "
                                             "not yet unpacked).")
    compression = serializers.CharField(help_text="none, gzip, zstd or bz2.")
    bytes = serializers.IntegerField(help_text="Size on disk.")


class SourcesSummarySerializer(serializers.Serializer):
    files = serializers.IntegerField()
    bytes = serializers.IntegerField()
    formats = serializers.DictField(child=serializers.IntegerField(), help_text="Files per format.")
    compressions = serializers.DictField(child=serializers.IntegerField(), help_text="Files per compression.")


SOURCES_SHOWN = LISTED_FILES


class StageSerializer(serializers.Serializer):
    """The stage a job is in (trainer.progress.Stages); {} when none was reported."""

    stage = serializers.CharField(required=False, allow_null=True)
    label = serializers.CharField(required=False, allow_null=True)
    done = serializers.FloatField(required=False, allow_null=True)
    total = serializers.FloatField(required=False, allow_null=True)
    unit = serializers.CharField(required=False, allow_null=True)
    rate = serializers.FloatField(required=False, allow_null=True, help_text="Units a second.")
    eta_seconds = serializers.FloatField(required=False, allow_null=True)
    text = serializers.CharField(required=False, help_text="The line the page shows.")


class CorpusSerializer(serializers.ModelSerializer):
    status = JobStatusField()
    sources = serializers.SerializerMethodField(help_text=f"The corpus's files (the first {SOURCES_SHOWN:,}).")
    sources_summary = serializers.SerializerMethodField()
    source_kind = serializers.ChoiceField(choices=SourceKind.choices, read_only=True)
    progress_detail = StageSerializer(read_only=True)
    examples = serializers.DictField(child=serializers.ListField(child=serializers.CharField()), read_only=True,
                                     help_text="What cleaning removed (the keys of `removed`): up to 3 examples each.")

    class Meta:
        model = Corpus
        fields = ["id", "name", "original_filename", "size_bytes", "status", "progress", "error",
                  "options", "stats", "removed", "preview", "created_at", "source_kind", "text_field", "sources",
                  "sources_summary", "progress_detail", "examples"]
        read_only_fields = fields

    @extend_schema_field(SourceFileSerializer(many=True))
    def get_sources(self, corpus: Corpus) -> list[dict]:
        keep_path = corpus.source_kind == SourceKind.IMPORT  # an upload's path is the storage folder's business
        return [{k: v for k, v in row.to_dict().items() if keep_path or k != "path"}
                for row in corpus.files.order_by("position")[:SOURCES_SHOWN]]

    @extend_schema_field(SourcesSummarySerializer)
    def get_sources_summary(self, corpus: Corpus) -> dict:
        return corpus.sources_summary or {"files": 0, "bytes": 0, "formats": {}, "compressions": {}}


def _rule_fields() -> dict:
    return {rule.field: serializers.BooleanField(required=False, default=False, help_text=rule.label)
            for rule in cleaning_rules()}


TEXT_FIELD = ("For JSON lines, Parquet and Arrow: the field (column) holding each document's text "
              "(default \"text\").")


def _upload_serializer_class() -> type[serializers.Serializer]:
    """The upload form as a serializer: files, a name, the text field, and one boolean per cleaning rule."""

    def validate_file(self, files):
        try:
            check_uploads([(f.name, f.size) for f in files])
        except DjangoValidationError as error:
            raise serializers.ValidationError(error.messages) from None
        return files

    attrs = {
        "file": serializers.ListField(
            child=serializers.FileField(allow_empty_file=True), allow_empty=False,
            error_messages={"required": "No file was submitted.", "empty": "No file was submitted."},
            help_text="One or more files (repeat the field): " + FORMATS_HELP),
        "name": serializers.CharField(max_length=200, required=False, allow_blank=True,
                                      help_text="Defaults to the (first) file's name."),
        "text_field": serializers.CharField(max_length=200, required=False, allow_blank=True, default="text",
                                            help_text=TEXT_FIELD),
        "validate_file": validate_file,
        "__module__": __name__,
        "__doc__": "Upload a corpus's files with the cleaning rules to apply.",
    }
    attrs.update(_rule_fields())
    return type("CorpusUploadSerializer", (RequestSerializer,), attrs)


CorpusUploadSerializer = _upload_serializer_class()


def _import_serializer_class() -> type[serializers.Serializer]:
    attrs = {
        "path": serializers.CharField(max_length=4096, help_text=(
            "An absolute path on the server: a file, a folder (with its subfolders) or a glob (*, ?, **), "
            "under one of the folders CORPUS_IMPORT_ROOTS allows.")),
        "name": serializers.CharField(max_length=200, required=False, allow_blank=True, default="",
                                      help_text="Defaults to the folder's name."),
        "text_field": serializers.CharField(max_length=200, required=False, allow_blank=True, default="text",
                                            help_text=TEXT_FIELD),
        "dry_run": serializers.BooleanField(required=False, default=False,
                                            help_text="true: list the files found, import nothing."),
        "__module__": __name__,
        "__doc__": "Import a corpus from files on the server, read in place (never copied).",
    }
    attrs.update(_rule_fields())
    return type("CorpusImportSerializer", (RequestSerializer,), attrs)


CorpusImportSerializer = _import_serializer_class()


class ImportListingSerializer(serializers.Serializer):
    """What an import would read (its dry run)."""

    path = serializers.CharField()
    files = SourceFileSerializer(many=True, help_text=f"The files found (the first {SOURCES_SHOWN:,}).")
    shown = serializers.IntegerField(help_text="How many of the files are listed in `files`.")
    summary = SourcesSummarySerializer(help_text="All the files found.")


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
