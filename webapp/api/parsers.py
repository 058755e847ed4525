"""Request body parsing shared by every API view."""
from __future__ import annotations

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

_KINDS = {list: "a list", str: "a string", bool: "true or false", int: "a number", float: "a number"}


class JSONObjectParser(JSONParser):
    """Every JSON body this API takes is an object: `null`, a list, a string or a number is a 400
    with a sentence here, before a view reads fields from it (a body of `null` was a 500)."""

    def parse(self, stream, media_type=None, parser_context=None):
        data = super().parse(stream, media_type, parser_context)
        if not isinstance(data, dict):
            kind = "null" if data is None else _KINDS.get(type(data), type(data).__name__)
            raise ParseError(f'The JSON body must be an object ({{"field": value, ...}}), not {kind}.')
        return data
