"""What every request serializer of the API shares: it takes only the fields it names, and a
JSON body's values must have the types the OpenAPI schema states (webapp.api.schema says so in
the schema: `additionalProperties: false`, and DRF's own leniency is switched off for JSON).

DRF would quietly drop an unknown field (a typo such as `max_step` launched a run with the
default) and turn 5 into "5" for a string field or "5" into 5 for a number: a client built from
the schema could then send what the schema forbids and have it accepted. Form and multipart
bodies carry only strings, so there the fields parse them as usual.
"""
from __future__ import annotations

import math
from collections.abc import Mapping

from django.core.validators import BaseValidator
from django.http import QueryDict
from django.utils.deconstruct import deconstructible
from rest_framework import serializers
from rest_framework.relations import PKOnlyObject

# Sent along by an HTML form of the site; never a field of a serializer.
_IGNORED = frozenset({"csrfmiddlewaretoken"})


@deconstructible
class GreaterThan(BaseValidator):
    """value > limit (the schema says `minimum` with `exclusiveMinimum`, see webapp.api.schema)."""

    message = "Must be greater than %(limit_value)s."
    code = "min_value"

    def compare(self, a, b):
        return a <= b


def json_type_error(field: serializers.Field, value) -> str | None:
    """Why `value`, read from a JSON body, is not of the JSON type `field`'s schema states (None: it
    is), in the field's own words (DRF's "A valid integer is required.", ...)."""
    if value is None or isinstance(field, (serializers.JSONField, serializers.FileField)):
        return None  # null: the field's own allow_null check says it, with its message
    messages = field.error_messages
    if isinstance(field, serializers.BooleanField):
        return None if isinstance(value, bool) else messages["invalid"].format(input=value)
    if isinstance(field, serializers.IntegerField):
        whole = isinstance(value, int) or (isinstance(value, float) and math.isfinite(value) and value.is_integer())
        return None if whole and not isinstance(value, bool) else messages["invalid"]
    if isinstance(field, (serializers.FloatField, serializers.DecimalField)):
        return None if isinstance(value, (int, float)) and not isinstance(value, bool) else messages["invalid"]
    if isinstance(field, serializers.ListField):
        if not isinstance(value, list):
            return messages["not_a_list"].format(input_type=type(value).__name__)
        for index, item in enumerate(value):
            error = json_type_error(field.child, item)
            if error:
                return f"Item {index}: {error}"
        return None
    if isinstance(field, serializers.DictField):
        if not isinstance(value, dict):
            return messages["not_a_dict"].format(input_type=type(value).__name__)
        for key, item in value.items():
            error = json_type_error(field.child, item)
            if error:
                return f"{key}: {error}"
        return None
    if isinstance(field, serializers.BaseSerializer):
        return None  # a nested serializer says "Expected a dictionary" itself
    if isinstance(field, serializers.ChoiceField):
        return None if isinstance(value, str) else messages["invalid_choice"].format(input=value)
    if isinstance(field, (serializers.UUIDField, serializers.DateTimeField, serializers.DateField)):
        return None if isinstance(value, str) else messages["invalid"].format(format="", input=value)
    if isinstance(field, serializers.CharField):
        return None if isinstance(value, str) else messages["invalid"]
    return None


# A request body the API validates; subclasses declare fields as usual. (A comment, not a
# docstring: drf-spectacular would show it as the description of every request body.)
class RequestSerializer(serializers.Serializer):

    def to_internal_value(self, data):
        if isinstance(data, Mapping):
            writable = {name for name, field in self.fields.items() if not field.read_only}
            errors = {}
            unknown = sorted(str(name) for name in data if name not in writable and name not in _IGNORED)
            for name in unknown:
                errors[name] = [f"Unknown field. The fields are: {', '.join(sorted(writable))}."]
            if not isinstance(data, QueryDict):  # JSON: the types are the schema's
                for name in sorted(writable & set(data)):
                    error = json_type_error(self.fields[name], data[name])
                    if error:
                        errors[name] = [error]
            if errors:
                raise serializers.ValidationError(errors)
        return super().to_internal_value(data)


# A query string the API validates. A parameter given with no value (`?after=`) is refused, as the
# schema's type says; DRF would read it as absent and use the default.
class QuerySerializer(serializers.Serializer):
    def to_internal_value(self, data):
        if isinstance(data, Mapping):
            blank = {name: ["Give a value, or leave the parameter out."] for name, field in self.fields.items()
                     if name in data and data.get(name) == "" and not getattr(field, "allow_blank", False)}
            if blank:
                raise serializers.ValidationError(blank)
        return super().to_internal_value(data)


class BuiltOnceFields:
    """For a read-only model serializer on a hot path (the run API is polled by every open
    dashboard): its fields are built once per class and shared by every instance, instead of
    once per instance. ModelSerializer otherwise rebuilds them for each object from the model's
    metadata (field mapping, labels, validators), which was the largest single cost of
    GET /api/runs/<id>/ (bench/serve_latency.py).

    The representation is the very one of Serializer.to_representation, from the same field
    objects. Only for serializers whose fields do not read `context` (no request-relative URLs):
    the shared fields belong to the first instance that built them."""

    def to_representation(self, instance):
        cls = type(self)
        fields = cls.__dict__.get("_shared_readable_fields")
        if fields is None:
            fields = [field for field in cls().fields.values() if not field.write_only]
            cls._shared_readable_fields = fields
        out = {}
        for field in fields:
            try:
                attribute = field.get_attribute(instance)
            except serializers.SkipField:
                continue
            value = attribute.pk if isinstance(attribute, PKOnlyObject) else attribute
            out[field.field_name] = None if value is None else field.to_representation(attribute)
        return out
