"""Number formatting for the corpus and tokenizer pages."""
from __future__ import annotations

from django import template

register = template.Library()


@register.filter
def thousands(value) -> str:
    """12345 -> "12,345"; anything that is not a number is shown as is ("—" for nothing)."""
    if value is None or value == "":
        return "—"
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    return f"{int(number):,}" if number.is_integer() else f"{number:,.2f}"
