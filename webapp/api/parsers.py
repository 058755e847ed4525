"""Request body parsing shared by every API view."""
from __future__ import annotations

import codecs

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser, get_encoding
from rest_framework.utils import json as drf_json

from trainer import jsonio

_KINDS = {list: "a list", str: "a string", bool: "true or false", int: "a number", float: "a number"}


class JSONObjectParser(JSONParser):
    """Every JSON body this API takes is an object: `null`, a list, a string or a number is a 400
    with a sentence here, before a view reads fields from it (a body of `null` was a 500).

    The body goes through trainer's bounded reader, so a body nested 50,000 deep is a 400 that
    names the nesting limit instead of a RecursionError in ``json`` (a 500)."""

    def parse(self, stream, media_type=None, parser_context=None):
        encoding = get_encoding(parser_context or {})  # DRF's: text charsets only (no bz2_codec bombs)
        constant = drf_json.strict_constant if self.strict else None
        try:
            data = jsonio.loads(codecs.getreader(encoding)(stream).read(), subject="The JSON body",
                                parse_constant=constant)
        except jsonio.JsonNestingError as e:
            raise ParseError(str(e)) from None
        except ValueError as e:
            raise ParseError(f"JSON parse error - {e}") from None
        if not isinstance(data, dict):
            kind = "null" if data is None else _KINDS.get(type(data), type(data).__name__)
            raise ParseError(f'The JSON body must be an object ({{"field": value, ...}}), not {kind}.')
        return data
