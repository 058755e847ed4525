"""A job's status in the API, for every serializer of a job row but a labelled dataset's (whose
statuses add `mapping`: webapp.datasets.serializers.DatasetStatusField)."""
from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from webapp.jobs.models import status_choices

JOB_CHOICES = status_choices()


@extend_schema_field(
    {
        "type": "string",
        "enum": [value for value, _ in JOB_CHOICES],
        "description": "pending (waiting for a worker), processing, ready or failed (see `error`).",
    },
    component_name="JobStatusEnum",
)
class JobStatusField(serializers.ChoiceField):
    """The status of a job row (a corpus, a tokenizer, an export, a neighbour index). Named
    explicitly: the runs app has its own `status` enum."""

    def __init__(self, **kwargs):
        super().__init__(choices=JOB_CHOICES, read_only=True, **kwargs)
