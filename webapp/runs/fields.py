"""One setting's schema entry (trainer.settings_schema's `Setting.as_json`, as trainer.catalog
serves it for pre-training and for fine-tuning) as a Django form field and as a DRF serializer
field: the launch and fine-tuning forms and their API serializers are all built here.

Every bound of the entry is checked by both, with the sentence the run's config refuses the value
with (`Bounds.refusal`): min and max, and min_exclusive (llrd must be above 0). The validators are
Django's MinValueValidator and MaxValueValidator (and webapp.api's GreaterThan), so the OpenAPI
schema states the bounds as minimum, maximum and exclusiveMinimum.
"""
from __future__ import annotations

from typing import Any, Mapping

from django import forms
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from rest_framework import serializers

from trainer.settings_schema import Bounds
from webapp.api.serializers import GreaterThan

TEXT_MAX = 1000  # the longest text setting (a chat template) the form and the API take


# ------------------------------------------------------------------------------ bounds
class _SaysRefusal:
    """A limit validator whose message is the config's sentence for the setting and the value."""

    def __init__(self, limit: float, *, name: str, bounds: Bounds):
        super().__init__(limit)  # type: ignore[call-arg]
        self.name, self.bounds = name, bounds

    def __call__(self, value: Any) -> None:
        if self.compare(self.clean(value), self.limit_value):  # type: ignore[attr-defined]
            raise ValidationError(self.bounds.refusal(self.name, value), code=self.code)  # type: ignore[attr-defined]


class AtLeast(_SaysRefusal, MinValueValidator):
    pass


class AtMost(_SaysRefusal, MaxValueValidator):
    pass


class Above(_SaysRefusal, GreaterThan):
    pass


def bound_validators(spec: Mapping[str, Any]) -> list:
    """The validators of a numeric entry's bounds ([] when it has none)."""
    bounds = Bounds.from_json(spec)
    if bounds is None:
        return []
    low = (Above if bounds.min_exclusive else AtLeast)(bounds.low, name=spec["name"], bounds=bounds)
    return [low, AtMost(bounds.high, name=spec["name"], bounds=bounds)]


def _number_attrs(spec: Mapping[str, Any], *, integer: bool) -> dict[str, Any]:
    """The number input's min, max and step (a browser refuses what they exclude before posting)."""
    attrs: dict[str, Any] = {} if integer else {"step": "any"}
    if "min" in spec and not spec.get("min_exclusive"):
        attrs["min"] = spec["min"]
    if "max" in spec:
        attrs["max"] = spec["max"]
    return attrs


# ------------------------------------------------------------------------------ form fields
class SwitchField(forms.ChoiceField):
    """"auto", "on" or "off"; JSON's true and false (and a ticked box's "on") read as "on" and "off"."""

    def to_python(self, value):
        if isinstance(value, bool) or str(value).lower() in ("true", "false"):
            return "on" if value is True or str(value).lower() == "true" else "off"
        return super().to_python(value)


class NumbersField(forms.CharField):
    """A fixed count of numbers typed as "0.9, 0.999" (AdamW's betas); empty = the default."""

    def __init__(self, *, count: int, **kwargs):
        self.count = count
        super().__init__(**kwargs)

    def prepare_value(self, value):
        if isinstance(value, (list, tuple)):
            return ", ".join(f"{float(v):g}" for v in value)
        return value

    def to_python(self, value):
        if isinstance(value, (list, tuple)):
            return list(value)
        value = super().to_python(value)
        if not value:
            return []
        try:
            numbers = [float(v) for v in str(value).replace(";", ",").split(",") if v.strip()]
        except ValueError:
            numbers = []
        if len(numbers) != self.count:
            count = {2: "two", 3: "three"}.get(self.count, str(self.count))
            raise forms.ValidationError(f"Give {count} numbers separated by a comma, like 0.9, 0.999.")
        return numbers


class OptionAttrs:
    """A choice widget whose options carry attributes of their own: `option_attrs` {value: {attr:
    value}} (a True value is a bare attribute such as disabled)."""

    option_attrs: dict[str, dict[str, Any]]

    def create_option(self, name, value, label, selected, index, subindex=None, attrs=None):
        option = super().create_option(name, value, label, selected, index, subindex, attrs)  # type: ignore[misc]
        extra = getattr(self, "option_attrs", {}).get(str(value), {})
        option["attrs"] = {**option["attrs"], **{k: v for k, v in extra.items() if v is not False}}
        return option


class OptionsSelect(OptionAttrs, forms.Select):
    pass


class OptionsCheckboxes(OptionAttrs, forms.CheckboxSelectMultiple):
    pass


def checkboxes(name: str, choices: list[tuple[str, str]], **common) -> forms.MultipleChoiceField:
    """Check boxes for some of a setting's choices; one that cannot be chosen here (a tracker whose
    package is missing: launch.UNAVAILABLE_CHOICES) is disabled and says why beside its box (the
    field's check refuses it all the same if sent)."""
    from webapp.runs import launch

    unavailable = launch.UNAVAILABLE_CHOICES.get(name, dict)()
    widget = OptionsCheckboxes()
    widget.option_attrs = {c: {"disabled": True} for c in unavailable}
    return forms.MultipleChoiceField(
        choices=[(c, f"{label} ({unavailable[c]})" if c in unavailable else label) for c, label in choices],
        widget=widget, **common)


def form_field(spec: Mapping[str, Any], *, required: bool = False, initial: Any = None,
               blank_label: str = "") -> forms.Field:
    """A setting's form field. `initial`: the value shown (None: the entry's default);
    `blank_label`: an optional choice gets an empty option so labelled (empty = the default)."""
    common = {"label": spec["label"], "help_text": spec["help"], "required": required,
              "initial": spec["default"] if initial is None else initial}
    kind = spec["type"]
    if kind == "bool":
        return forms.BooleanField(**{**common, "required": False})
    choices = [tuple(c) for c in spec.get("choices", ())]
    if spec.get("multiple"):
        return checkboxes(spec["name"], choices, **common)
    if choices:
        if {"on", "off"} <= {value for value, _ in choices}:  # a switch with an "auto" (compile)
            return SwitchField(choices=choices, **common)
        if blank_label and not required:
            choices = [("", blank_label), *choices]
        return forms.ChoiceField(choices=choices, **common)
    if kind == "list":
        return NumbersField(count=len(spec["default"]), **common)
    if kind == "int":
        return forms.IntegerField(validators=bound_validators(spec),
                                  widget=forms.NumberInput(attrs=_number_attrs(spec, integer=True)), **common)
    if kind == "float":
        return forms.FloatField(validators=bound_validators(spec),
                                widget=forms.NumberInput(attrs=_number_attrs(spec, integer=False)), **common)
    widget = forms.Textarea(attrs={"rows": 3, "spellcheck": "false"}) if spec.get("textarea") else None
    return forms.CharField(strip=False, widget=widget, max_length=TEXT_MAX, **common)


# ------------------------------------------------------------------------------ API fields
class ChoicesListField(serializers.ListField):
    """Some of a setting's choices (report_to): its length is checked before any item, so a list of
    10,000 entries gets one sentence about its length, not 10,000 about its items."""

    def __init__(self, choices, **kwargs):
        self.choices_offered = list(choices)
        super().__init__(child=serializers.ChoiceField(choices=self.choices_offered),
                         max_length=len(self.choices_offered), **kwargs)

    def to_internal_value(self, data):
        if isinstance(data, (list, tuple)) and len(data) > len(self.choices_offered):
            raise serializers.ValidationError(
                f"lists {len(data):,} entries, but there are only {len(self.choices_offered)} choices "
                f"({', '.join(map(str, self.choices_offered))}); name each at most once.")
        return super().to_internal_value(data)


def api_field(spec: Mapping[str, Any], *, help_text: str = "") -> serializers.Field:
    """A setting as an optional API field (left out: the config's default), its label and help as
    the field's help (or `help_text`)."""
    common = {"required": False, "help_text": help_text or f"{spec['label']}: {spec['help']}"}
    kind = spec["type"]
    if kind == "bool":
        return serializers.BooleanField(**common)
    values = [c[0] for c in spec.get("choices", ())]
    if spec.get("multiple"):
        return ChoicesListField(values, **common)
    if values:
        return serializers.ChoiceField(choices=values, allow_blank=spec["default"] == "", **common)
    if kind == "list":
        count = len(spec["default"])
        return serializers.ListField(child=serializers.FloatField(), min_length=count, max_length=count, **common)
    if kind == "int":
        return serializers.IntegerField(validators=bound_validators(spec), **common)
    if kind == "float":
        return serializers.FloatField(validators=bound_validators(spec), **common)
    return serializers.CharField(allow_blank=True, trim_whitespace=False, max_length=TEXT_MAX, **common)
