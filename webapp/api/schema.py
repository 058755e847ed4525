"""The OpenAPI schema states what the API really does (drf-spectacular, served at /api/schema/).

- Every error response has the one error body (`Error`: a sentence, and for refused fields the
  messages per field, webapp.api.errors) and every operation lists the errors any request can
  get: 400 where it takes a body or a query, 401 without valid credentials, 403 for a session
  request without its CSRF token, 404 for an id that is not the user's, 415 for a body in a
  media type it does not read; every POST, PUT and PATCH 413 for a body over UPLOAD_MAX_BYTES and
  507 when the storage is nearly full (both answered before the view, webapp.server.limits), and
  every write (DELETE too) 507 when the disk is full (webapp.api.errors). Every 429 (failed
  sign-ins throttled, the run limit, the server limit) states its Retry-After header.
- A request body takes only its fields (`additionalProperties: false`, as RequestSerializer
  refuses others), a text that may not be blank says so (`minLength` 1 and a non-space
  character, since surrounding spaces are trimmed), and a bound that excludes its limit says so.
- JSON endpoints document JSON only (SPECTACULAR_SETTINGS["PARSER_WHITELIST"]); uploads name
  multipart/form-data themselves.

tests/webapp/test_api_fuzz.py runs schemathesis with all its checks against a live server to
keep the schema and the API in step; tests/webapp/test_api_schema.py runs its checks on the
answers a fuzzer seldom reaches (the sign-in throttle).
"""
from __future__ import annotations

from drf_spectacular.openapi import AutoSchema as SpectacularAutoSchema
from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers
from rest_framework.permissions import AllowAny

from webapp.api.serializers import GreaterThan, RequestSerializer

NON_BLANK_PATTERN = r"\S"  # at least one character that is not a space (the field trims the rest)


class ErrorSerializer(serializers.Serializer):
    """Every failure: one sentence, and for a form the messages per field."""

    error = serializers.CharField(help_text="A sentence saying what went wrong; for bad data it names the row.")
    fields = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()), required=False,
        help_text="The messages per field, when the request's fields were refused (a nested field is named "
                  "with dots: split.train, checkpoints.1).")


def error(description: str) -> OpenApiResponse:
    """An error response of an operation: the Error body, with when it happens."""
    return OpenApiResponse(response=ErrorSerializer, description=description)


ERROR = error('{"error": "<a sentence>"}')

_STANDARD = {
    "400": '{"error": "<a sentence>", "fields": {...}}: the body or query is not valid (a field out of its '
           "bounds, of the wrong type, unknown or missing; a body that is not a JSON object).",
    "401": '{"error": "Log in, or send \'Authorization: Token <key>\' ..."}: no valid credentials.',
    "403": '{"error": "<a sentence>"}: a request with the session cookie but without its CSRF token.',
    "404": '{"error": "Not found. It does not exist, or it is not yours."}',
    "415": '{"error": "Unsupported media type ..."}: a body in a media type this operation does not read.',
    "413": '{"error": "The upload is ... MB; the largest accepted is ... MB ..."}: a body over UPLOAD_MAX_BYTES, '
           "refused before it is read.",
    "507": '{"error": "<a sentence>"}: the server\'s storage is nearly full (a large body is refused before it is '
           "read), or the disk is full.",
}
WRITES = ("POST", "PUT", "PATCH", "DELETE")
BODIES = ("POST", "PUT", "PATCH")  # the methods whose body webapp.server.limits measures

RETRY_AFTER = {
    "schema": {"type": "integer", "minimum": 1},
    "required": True,
    "description": "Seconds to wait before trying again (for the run and server limits, when to look again: "
                   "a place frees when one of yours ends).",
}


class AutoSchema(SpectacularAutoSchema):
    def _map_basic_serializer(self, serializer, direction):
        schema = super()._map_basic_serializer(serializer, direction)
        if direction == "request" and isinstance(serializer, RequestSerializer):
            schema["additionalProperties"] = False
        return schema

    def _map_serializer_field(self, field, direction, bypass_extensions=False):
        schema = super()._map_serializer_field(field, direction, bypass_extensions)
        if direction == "request" and isinstance(field, serializers.FileField):
            schema = {**(schema or {}), "type": "string", "format": "binary"}  # an uploaded file, not its URL
        if (direction == "request" and schema and schema.get("type") == "string" and "enum" not in schema
                and isinstance(field, serializers.CharField) and not field.allow_blank and not field.read_only):
            schema.setdefault("minLength", 1)
            if field.trim_whitespace:
                schema.setdefault("pattern", NON_BLANK_PATTERN)
        return schema

    def _insert_field_validators(self, field, schema):
        super()._insert_field_validators(field, schema)
        for validator in field.validators:
            if isinstance(validator, GreaterThan) and schema.get("type") in ("integer", "number"):
                schema["minimum"] = max(schema.get("minimum", validator.limit_value), validator.limit_value)
                schema["exclusiveMinimum"] = True

    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        component = self.resolve_serializer(ErrorSerializer, "response")
        content = {"application/json": {"schema": component.ref}}
        for code, response in responses.items():
            if code[:1] in ("4", "5") and "content" not in response:
                response["content"] = dict(content)
        for code in self._standard_error_codes():
            responses.setdefault(code, {"description": _STANDARD[code], "content": dict(content)})
        return dict(sorted(responses.items()))

    def _get_response_headers_for_code(self, status_code, direction="response"):
        headers = super()._get_response_headers_for_code(status_code, direction)
        if str(status_code) == "429":  # webapp.api.errors and webapp.accounts.throttle send it with every 429
            headers = {**headers, "Retry-After": dict(RETRY_AFTER)}
        return headers

    def _standard_error_codes(self) -> list[str]:
        codes = []
        has_body = self.method in ("POST", "PUT", "PATCH") and self.get_request_serializer() is not None
        if has_body or self.get_override_parameters():
            codes.append("400")
        if not any(isinstance(p, AllowAny) for p in self.view.get_permissions()):
            codes.append("401")
            if self.method not in ("GET", "HEAD", "OPTIONS"):
                codes.append("403")
        if "{" in self.path:
            codes.append("404")
        if has_body:
            codes.append("415")
        if self.method in BODIES:
            codes.append("413")
        if self.method in WRITES:
            codes.append("507")
        return codes
