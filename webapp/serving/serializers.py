"""A model server in the API (webapp.serving.api)."""
from __future__ import annotations

from django.urls import reverse
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from webapp.serving.endpoints import expected_endpoints, shown_endpoints
from webapp.serving.models import ServedModel, ServeStatus


@extend_schema_field({"type": "string", "enum": [value for value, _ in ServeStatus.choices],
                      "description": "starting (waiting for a serve worker, then loading the model), serving, "
                                     "stopping, stopped, or failed (see `error`)."},
                     component_name="ServeStatusEnum")
class ServeStatusField(serializers.ChoiceField):
    def __init__(self, **kwargs):
        super().__init__(choices=ServeStatus.choices, read_only=True, **kwargs)


class ServedModelSerializer(serializers.ModelSerializer):
    status = ServeStatusField()
    status_label = serializers.CharField(source="get_status_display", read_only=True)
    checkpoint_label = serializers.CharField(source="checkpoint.label", read_only=True)
    model = serializers.CharField(source="model_name", read_only=True,
                                  help_text='The model id requests name ("model"), as GET /v1/models lists it.')
    base_url = serializers.CharField(read_only=True, help_text=(
        "The OpenAI-style base URL, e.g. http://host:port/v1, while it serves ('' otherwise). Requests send "
        "'Authorization: Bearer <your API token>'."))
    waiting_for_worker = serializers.SerializerMethodField(help_text="Starting, and no serve worker has taken it yet.")
    endpoints = serializers.SerializerMethodField(help_text=(
        "The /v1 paths it answers: the server's own list (GET /v1/capabilities) once it listens, else the ones "
        "expected from the checkpoint's family and task."))
    endpoints_reported = serializers.SerializerMethodField(help_text="Whether `endpoints` came from the server itself.")
    error = serializers.CharField(read_only=True, help_text="Why it failed, a sentence ('' otherwise).")
    stderr_tail = serializers.CharField(read_only=True, help_text="The last lines the server wrote, when it failed.")
    stop_reason = serializers.CharField(read_only=True, help_text="Why it stopped ('' while it is live).")
    page_url = serializers.SerializerMethodField()
    status_url = serializers.SerializerMethodField()
    stop_url = serializers.SerializerMethodField()

    class Meta:
        model = ServedModel
        fields = ["id", "checkpoint", "checkpoint_label", "status", "status_label", "waiting_for_worker", "model",
                  "base_url", "host", "port", "pid", "node", "endpoints", "endpoints_reported", "error", "stderr_tail",
                  "stop_reason", "created_at", "started_at", "stopped_at", "page_url", "status_url", "stop_url"]
        read_only_fields = fields

    def get_waiting_for_worker(self, obj: ServedModel) -> bool:
        return obj.status == ServeStatus.STARTING and not obj.claimed

    def get_endpoints(self, obj: ServedModel) -> list[str]:
        reported, from_server = shown_endpoints(obj)
        return reported if from_server else expected_endpoints(obj.checkpoint)

    def get_endpoints_reported(self, obj: ServedModel) -> bool:
        return shown_endpoints(obj)[1]

    def get_page_url(self, obj: ServedModel) -> str:
        return reverse("serving:page", args=[obj.checkpoint_id])

    def get_status_url(self, obj: ServedModel) -> str:
        return reverse("api-checkpoint-serve", args=[obj.checkpoint_id])

    def get_stop_url(self, obj: ServedModel) -> str:
        return reverse("api-server-stop", args=[obj.pk])
