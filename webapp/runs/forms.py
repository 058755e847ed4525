"""The launch form, generated from trainer.registry.as_json(), and the YAML import form.

The page's JavaScript hides presets and objectives that do not fit the chosen architecture,
but every POST is validated again here (through RunConfig and the registry).
"""
from __future__ import annotations

import json
from typing import Any

from django import forms

from trainer.errors import ConfigError
from webapp.corpora.models import Corpus, JobStatus, Tokenizer
from webapp.runs import launch
from webapp.runs.services import build_config

YAML_MAX_BYTES = 64 * 1024


class TokenizerSelect(forms.Select):
    """Each option says which corpus it belongs to, so the page can filter by corpus."""

    def create_option(self, name, value, label, selected, index, subindex=None, attrs=None):
        option = super().create_option(name, value, label, selected, index, subindex, attrs)
        instance = getattr(value, "instance", None)
        if instance is not None:
            option["attrs"]["data-corpus"] = str(instance.corpus_id)
            option["attrs"]["data-algorithm"] = instance.algorithm
        return option


class PresetSelect(forms.Select):
    def create_option(self, name, value, label, selected, index, subindex=None, attrs=None):
        option = super().create_option(name, value, label, selected, index, subindex, attrs)
        arch = self.preset_arch.get(value)
        if arch:
            option["attrs"]["data-architecture"] = arch
        return option


def _user_objects(model, user):
    return model.objects.filter(owner=user, status=JobStatus.READY).order_by("-created_at")


class TokenizerChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj: Tokenizer) -> str:
        vocab = obj.stats.get("vocab_size", obj.vocab_size) if isinstance(obj.stats, dict) else obj.vocab_size
        return f"{obj.name} ({obj.algorithm}, {vocab:,} tokens)"


class RunForm(forms.Form):
    name = forms.CharField(max_length=200, required=False, help_text="Leave empty for “<preset> on <corpus>”.")
    corpus = forms.ModelChoiceField(queryset=Corpus.objects.none(), empty_label="Choose a corpus…")
    tokenizer = TokenizerChoiceField(queryset=Tokenizer.objects.none(), empty_label="Choose a tokenizer…",
                                     widget=TokenizerSelect)
    architecture = forms.ChoiceField()
    preset = forms.ChoiceField(widget=PresetSelect)
    objectives = forms.MultipleChoiceField(widget=forms.CheckboxSelectMultiple, required=False)
    # Config fields a YAML import set that the form does not show (JSON), e.g. model_overrides.
    extra_settings = forms.CharField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.user = user
        spec = launch.registry_json()
        self.fields["corpus"].queryset = _user_objects(Corpus, user)
        self.fields["tokenizer"].queryset = _user_objects(Tokenizer, user).select_related("corpus")
        self.fields["architecture"].choices = [(a["name"], a["label"]) for a in spec["architectures"]]
        self.fields["preset"].choices = [
            (p["name"], launch.preset_label(p)) for a in spec["architectures"] for p in a["presets"]
        ]
        self.fields["preset"].widget.preset_arch = {
            p["name"]: a["name"] for a in spec["architectures"] for p in a["presets"]
        }
        self.fields["objectives"].choices = [(k, o["label"]) for k, o in spec["objectives"].items()]
        self.objective_help = {k: o["help"] for k, o in spec["objectives"].items()}
        for name in launch.TRAINING_FIELDS:
            self.fields[name] = _training_field(name, spec["fields"][name])
        for name, value in launch.launch_defaults().items():
            self.fields[name].initial = value

    # -- groups for the template
    def main_fields(self):
        return [self[name] for name in launch.MAIN_FIELDS]

    def advanced_fields(self):
        return [self[name] for name in launch.ADVANCED_FIELDS]

    def objective_options(self):
        """(checkbox, objective name, help text) for each objective."""
        return [(cb, cb.data["value"], self.objective_help.get(cb.data["value"], "")) for cb in self["objectives"]]

    def extra_settings_display(self) -> dict[str, Any]:
        raw = self["extra_settings"].value() or ""
        try:
            value = json.loads(raw) if raw else {}
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}

    # -- validation
    def clean_extra_settings(self) -> dict[str, Any]:
        raw = self.cleaned_data.get("extra_settings") or ""
        if not raw:
            return {}
        try:
            value = json.loads(raw)
        except ValueError:
            raise forms.ValidationError("The imported settings could not be read; import the YAML again.") from None
        if not isinstance(value, dict):
            raise forms.ValidationError("The imported settings could not be read; import the YAML again.")
        return value

    def clean(self):
        data = super().clean()
        corpus, tokenizer = data.get("corpus"), data.get("tokenizer")
        if corpus and tokenizer and tokenizer.corpus_id != corpus.pk:
            self.add_error("tokenizer", f"This tokenizer was trained on another corpus, not on “{corpus.name}”.")
        needed = ("architecture", "preset", "objectives", "extra_settings", *launch.TRAINING_FIELDS)
        if any(name in self.errors for name in needed):
            return data  # the field errors say what to fix first
        try:
            self.config = build_config(
                architecture=data["architecture"], preset=data["preset"], objectives=data.get("objectives") or [],
                training=self.training_settings(),
            )
        except ConfigError as e:
            self.add_error(_field_of(str(e)), str(e))
        return data

    def training_settings(self) -> dict[str, Any]:
        data = self.cleaned_data
        return {**data.get("extra_settings", {}), **{n: data[n] for n in launch.TRAINING_FIELDS if n in data}}


def _training_field(name: str, spec: dict[str, Any]) -> forms.Field:
    label = launch.LABELS.get(name, name.replace("_", " ").capitalize())
    common = {"label": label, "help_text": spec.get("help", ""), "required": True}
    default = spec.get("default")
    if "choices" in spec:
        labels = launch.CHOICE_LABELS.get(name, {})
        return forms.ChoiceField(choices=[(c, labels.get(c, c)) for c in spec["choices"]], **common)
    bounds = {}
    if "min" in spec:
        bounds["min_value"] = spec["min"]
    if "max" in spec:
        bounds["max_value"] = spec["max"]
    if isinstance(default, bool):
        return forms.BooleanField(label=label, help_text=common["help_text"], required=False)
    if isinstance(default, int):
        return forms.IntegerField(**common, **{k: int(v) for k, v in bounds.items()})
    if isinstance(default, float):
        return forms.FloatField(**common, **bounds, widget=forms.NumberInput(attrs={"step": "any"}))
    return forms.CharField(**common)


def _field_of(message: str) -> str | None:
    """Which field a ConfigError sentence is about (they start with the field's name), else a form error."""
    first = message.split(" ", 1)[0].strip(".:,")
    if first in launch.TRAINING_FIELDS:
        return first
    lowered = message.lower()
    if "objective" in lowered:
        return "objectives"
    if "preset" in lowered:
        return "preset"
    return None


class YamlImportForm(forms.Form):
    config_file = forms.FileField(label="Run config (YAML)",
                                  help_text="A file from “Export YAML”, or a config for python -m trainer run.")

    def clean_config_file(self):
        upload = self.cleaned_data["config_file"]
        if upload.size > YAML_MAX_BYTES:
            raise forms.ValidationError(f"That file is {upload.size / 1024:,.0f} KB; a run config is at most 64 KB.")
        raw = upload.read()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise forms.ValidationError("That file is not UTF-8 text; choose a .yaml file.") from None
        try:
            self.config, self.name = launch.parse_config_yaml(text)
        except ConfigError as e:
            raise forms.ValidationError(str(e)) from None
        return upload
