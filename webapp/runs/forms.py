"""The launch form, generated from trainer.catalog.schema.as_json(), and the YAML import form.

The page's JavaScript hides presets, objectives, masking units and family settings that do not
fit the chosen family, and warns about a tokenizer of the wrong algorithm, but every
POST is validated again here (through RunConfig, trainer.catalog.validation and the run services).

Family settings: ELECTRA's generator size, ALBERT's layer sharing, T5's version, GPT's
LayerNorm placement and ELMo's character CNN are models_lib fields (they go to
model_overrides); ELECTRA's RTD weight and DistilBERT's temperature and loss weights are
RunConfig fields; DistilBERT's teacher is one of the user's BERT checkpoints. The optimizer
(empty = the family's: Adafactor for T5) and AdamW's betas and epsilon (empty = the
family's paper values) are optional; the page shows betas and epsilon for AdamW only.
"""
from __future__ import annotations

from typing import Any

from django import forms
from django.core.validators import MinValueValidator
from django.db import models

from trainer import jsonio
from trainer.catalog import finetune as catalog_finetune
from trainer.errors import ConfigError
from trainer.finetune import settings as ft_settings
from webapp.corpora.models import Corpus, Tokenizer
from webapp.datasets.models import Dataset
from webapp.jobs.models import JobStatus
from webapp.runs import fields as setting_fields
from webapp.runs import launch, services
from webapp.runs.models import Checkpoint, CheckpointSource

YAML_MAX_BYTES = 64 * 1024


class TokenizerSelect(forms.Select):
    """Each option says which corpus it belongs to, so the page can filter by corpus."""

    def create_option(self, name, value, label, selected, index, subindex=None, attrs=None):
        option = super().create_option(name, value, label, selected, index, subindex, attrs)
        instance = getattr(value, "instance", None)
        if instance is not None:
            option["attrs"]["data-corpus"] = str(instance.corpus_id)
            option["attrs"]["data-algorithm"] = instance.algorithm
            option["attrs"]["data-extra-ids"] = str(services.tokenizer_extra_ids(instance))
        return option


class PresetSelect(forms.Select):
    def create_option(self, name, value, label, selected, index, subindex=None, attrs=None):
        option = super().create_option(name, value, label, selected, index, subindex, attrs)
        arch = self.preset_arch.get(value)
        if arch:
            option["attrs"]["data-family"] = arch
        return option


class TeacherSelect(forms.Select):
    """Each option says which tokenizer its run used, so the page can point at matching teachers."""

    def create_option(self, name, value, label, selected, index, subindex=None, attrs=None):
        option = super().create_option(name, value, label, selected, index, subindex, attrs)
        instance = getattr(value, "instance", None)
        if instance is not None and instance.run_id is not None:
            option["attrs"]["data-tokenizer"] = str(instance.run.tokenizer_id)
        return option


class TeacherChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj: Checkpoint) -> str:
        return obj.label


def _user_objects(model, user):
    return model.objects.filter(owner=user, status=JobStatus.READY).order_by("-created_at")


def teacher_families() -> list[str]:
    """The families whose checkpoints some family distils (DistilBERT's teachers: BERT)."""
    from trainer import families

    names: list[str] = []
    for family in families.all():
        names += [t for t in family.teacher_families if t not in names]
    return names


def teacher_checkpoints(user):
    """The user's checkpoints of a teacher family (BERT: of BERT runs, and imported BERT models), newest first."""
    teachers = teacher_families()
    imported = [c.pk for c in Checkpoint.objects.filter(owner=user, source=CheckpointSource.IMPORT)
                if _family(c) in teachers]
    return (Checkpoint.objects.filter(owner=user)
            .filter(models.Q(run__family__in=teachers) | models.Q(pk__in=imported))
            .select_related("run").order_by("-created_at"))


def _family(checkpoint: Checkpoint) -> str:
    from trainer.training.checkpoints import checkpoint_family

    return checkpoint_family(checkpoint.folder) or ""


class TokenizerChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj: Tokenizer) -> str:
        vocab = obj.stats.get("vocab_size", obj.vocab_size) if isinstance(obj.stats, dict) else obj.vocab_size
        return f"{obj.name} ({obj.algorithm}, {vocab:,} tokens)"


class SettingFields:
    """What RunForm and FinetuneForm share: their settings are fields made from schema entries
    (trainer.settings_schema, served by the catalog) by webapp.runs.fields, here, in one way;
    FinetuneForm makes them again for the checkpoint, dataset and technique chosen."""

    fields: dict[str, forms.Field]

    def add_settings(self, entries, *, initial: dict[str, Any], required=(), blank_label: str = "") -> None:
        """A field per entry, showing `initial`'s value (else the entry's default); the names in
        `required` need a value, the others left empty keep the default."""
        for spec in entries:
            self.fields[spec["name"]] = setting_fields.form_field(
                spec, required=spec["name"] in required, initial=initial.get(spec["name"]), blank_label=blank_label)


class RunForm(SettingFields, forms.Form):
    name = forms.CharField(max_length=200, required=False, help_text="Leave empty for “<preset> on <corpus>”.")
    corpus = forms.ModelChoiceField(queryset=Corpus.objects.none(), empty_label="Choose a corpus…")
    tokenizer = TokenizerChoiceField(queryset=Tokenizer.objects.none(), empty_label="Choose a tokenizer…",
                                     widget=TokenizerSelect)
    family = forms.ChoiceField()
    preset = forms.ChoiceField(widget=PresetSelect)
    objectives = forms.MultipleChoiceField(widget=forms.CheckboxSelectMultiple, required=False)
    teacher_checkpoint = TeacherChoiceField(
        queryset=Checkpoint.objects.none(), required=False, widget=TeacherSelect, label="Teacher checkpoint",
        empty_label="Choose one of your BERT checkpoints…",
        help_text="DistilBERT: a trained BERT checkpoint of yours, trained with the same tokenizer. The student gets "
                  "half its layers (every other one) and its width. TinyBERT: the student keeps its preset's shape "
                  "(the teacher's number of heads, at most its layers) and learns projections to its width.")
    # Config fields a YAML import set that the form does not show (JSON), e.g. model_overrides.
    extra_settings = forms.CharField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.user = user
        spec = launch.registry_json()
        self.fields["corpus"].queryset = _user_objects(Corpus, user)
        self.fields["tokenizer"].queryset = _user_objects(Tokenizer, user).select_related("corpus")
        self.fields["family"].choices = [(a["name"], a["label"]) for a in spec["families"]]
        self.fields["preset"].choices = [
            (p["name"], launch.preset_label(p)) for a in spec["families"] for p in a["presets"]
        ]
        self.fields["preset"].widget.preset_arch = {
            p["name"]: a["name"] for a in spec["families"] for p in a["presets"]
        }
        self.fields["objectives"].choices = [(k, o["label"]) for k, o in spec["objectives"].items()]
        self.objective_help = {k: o["help"] for k, o in spec["objectives"].items()}
        defaults = launch.launch_defaults()
        self.add_settings([spec["fields"][name] for name in launch.CONFIG_FIELDS], initial=defaults,
                          required=set(launch.TRAINING_FIELDS) - set(launch.OPTIONAL_FIELDS),
                          blank_label=launch.FAMILY_DEFAULT)
        for name in launch.model_field_names():
            self.fields[name] = _model_field(launch.model_field(name))
        self.fields["teacher_checkpoint"].queryset = teacher_checkpoints(user)
        for name in ("family", "preset", "objectives"):
            self.fields[name].initial = defaults[name]
        self.fields["epochs"].initial = None  # the default length is the steps

    # -- groups for the template
    def main_fields(self):
        return [self[name] for name in launch.MAIN_FIELDS]

    def advanced_fields(self):
        return [self[name] for name in launch.ADVANCED_FIELDS]

    def objective_fields(self):
        return [self[name] for name in launch.OBJECTIVE_FIELDS]

    def optimizer_fields(self):
        return [self[name] for name in launch.OPTIMIZER_FIELDS]

    def family_fields(self):
        """(bound field, the families that show it, space-separated) for the family settings."""
        out = [(self["teacher_checkpoint"], " ".join(launch.family_of_field("teacher_checkpoint")))]
        out += [(self[name], " ".join(launch.family_of_field(name))) for name in launch.FAMILY_FIELDS]
        out += [(self[name], " ".join(launch.model_field(name)["families"])) for name in launch.model_field_names()]
        return out

    def objective_options(self):
        """(checkbox, objective name, help text) for each objective."""
        return [(cb, cb.data["value"], self.objective_help.get(cb.data["value"], "")) for cb in self["objectives"]]

    def extra_settings_display(self) -> dict[str, Any]:
        raw = self["extra_settings"].value() or ""
        try:
            value = jsonio.loads(raw) if raw else {}
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}

    # -- validation
    def clean_extra_settings(self) -> dict[str, Any]:
        raw = self.cleaned_data.get("extra_settings") or ""
        if not raw:
            return {}
        try:
            value = jsonio.loads(raw)
        except ValueError:
            raise forms.ValidationError("The imported settings could not be read; import the YAML again.") from None
        if not isinstance(value, dict):
            raise forms.ValidationError("The imported settings could not be read; import the YAML again.")
        return value

    def clean(self):
        data = super().clean()
        self.plan = None
        corpus, tokenizer = data.get("corpus"), data.get("tokenizer")
        if corpus and tokenizer and tokenizer.corpus_id != corpus.pk:
            self.add_error("tokenizer", f"This tokenizer was trained on another corpus, not on “{corpus.name}”.")
        arch = launch.family_json(data.get("family") or "") or {}
        if arch.get("needs_teacher") and not data.get("teacher_checkpoint") and "teacher_checkpoint" not in self.errors:
            self.add_error("teacher_checkpoint", f"{arch['label']} distils a trained BERT model: choose one of your "
                                                 f"BERT checkpoints as its teacher.")
        if "max_steps" not in self.errors and not data.get("max_steps") and not data.get("epochs"):
            self.add_error("max_steps", "Give the run's length: its steps, or its epochs (passes over the train split).")
        needed = ("family", "preset", "objectives", "extra_settings", "teacher_checkpoint",
                  *launch.CONFIG_FIELDS, *launch.model_field_names())
        if any(name in self.errors for name in needed):
            return data  # the field errors say what to fix first
        choices = dict(family=data["family"], preset=data["preset"], objectives=data.get("objectives") or [],
                       training=self.training_settings())
        try:  # built and checked once; the view hands the plan to run_create
            if tokenizer and not {"tokenizer", "corpus"} & set(self.errors):
                self.plan = services.run_plan(owner=self.user, corpus=corpus, tokenizer=tokenizer, **choices)
                self.config = self.plan[1]
            else:  # the data is refused already: the settings' own problems are said at the same time
                self.config = services.build_config(owner=self.user, **choices)
        except ConfigError as e:
            self.add_error(getattr(e, "field", None) or _field_of(str(e)), str(e))
        return data

    def training_settings(self) -> dict[str, Any]:
        """The RunConfig fields of the form (and of an imported YAML's extra settings) for the chosen
        family: another family's settings are left out, model fields go to model_overrides,
        the teacher is the checkpoint's id (services resolve it)."""
        data = self.cleaned_data
        arch = launch.family_json(data.get("family") or "") or {}
        settings = {**data.get("extra_settings", {}),
                    **{n: data[n] for n in launch.TRAINING_FIELDS if n in data and data[n] not in (None, "")}}
        for name in launch.OPTIMIZER_FIELDS:  # empty: the family's (RoBERTa: b2 0.98; T5: Adafactor)
            if data.get(name) not in (None, "", []):
                settings[name] = data[name]
            elif name not in settings and name in arch.get("optimizer_defaults", {}):
                settings[name] = arch["optimizer_defaults"][name]
        for name in launch.OBJECTIVE_FIELDS:
            if data.get(name):
                settings[name] = data[name]
        for name in launch.FAMILY_FIELDS:
            if name in arch.get("config_fields", []) and data.get(name) is not None:
                settings[name] = data[name]
        overrides = dict(settings.get("model_overrides") or {})
        for f in arch.get("model_fields", []):
            if data.get(f["name"]) not in (None, ""):
                overrides[f["name"]] = data[f["name"]]
        if overrides:
            settings["model_overrides"] = overrides
        if arch.get("needs_teacher") and data.get("teacher_checkpoint"):
            settings["teacher_checkpoint"] = str(data["teacher_checkpoint"].pk)
        return settings


def _model_field(spec: dict[str, Any]) -> forms.Field:
    """A models_lib field of one family (generator_size, share_layers, version, char_cnn); empty =
    the preset's value."""
    common = {"label": spec["label"], "help_text": spec.get("help", ""), "required": False}
    if spec.get("type") == "bool":
        # "True"/"False": what str() of a stored bool gives, so an imported value shows as selected
        return forms.TypedChoiceField(choices=[("", "The preset's"), ("True", "On"), ("False", "Off")],
                                      coerce=lambda v: v == "True", empty_value=None, **common)
    if "choices" in spec:
        return forms.ChoiceField(choices=[("", "The preset's")] + [tuple(c) for c in spec["choices"]], **common)
    bounds = {k2: spec[k1] for k1, k2 in (("min", "min_value"), ("max", "max_value")) if k1 in spec}
    return forms.FloatField(**common, **bounds, widget=forms.NumberInput(attrs={"step": "any"}))


def _field_of(message: str) -> str | None:
    """Which field a ConfigError sentence is about (they start with the field's name), else a form error."""
    first = message.split(" ", 1)[0].strip(".:,")
    if first in launch.CONFIG_FIELDS or first in launch.model_field_names():
        return first
    lowered = message.lower()
    if "teacher" in lowered:
        return "teacher_checkpoint"
    if "masking" in lowered:
        return "masking_unit"
    if "packing" in lowered:
        return "packing"
    if "objective" in lowered or "prediction" in lowered:
        return "objectives"
    if "preset" in lowered:
        return "preset"
    for name in launch.model_field_names():
        if name in lowered:
            return name
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


# -------------------------------------------------------------------------------- fine-tuning
# The fine-tuning settings are generated from trainer.catalog.finetune (launch.finetune_json): their
# labels, help, bounds and defaults are declared once, in trainer/settings_schema.py and on each task.


class _CheckpointChoice(forms.ModelChoiceField):
    def label_from_instance(self, obj: Checkpoint) -> str:
        return obj.label


class _DatasetChoice(forms.ModelChoiceField):
    def label_from_instance(self, obj) -> str:
        ready = obj.status == "ready"
        return f"{obj.name} ({obj.task or 'no task'})" + ("" if ready else f" – {obj.get_status_display().lower()}")


class _DatasetsChoice(forms.ModelMultipleChoiceField):
    def label_from_instance(self, obj) -> str:
        return _DatasetChoice.label_from_instance(self, obj)  # type: ignore[arg-type]


def fit_note(checkpoint: dict[str, Any]) -> str:
    """What a checkpoint (services.finetune_choices) fine-tunes on, as the form says it."""
    tasks = launch.finetune_json()["tasks"]
    names = [tasks[t]["title"].lower() if t in tasks else t.replace("_", " ") for t in checkpoint["tasks"]]
    if not names:
        return f"A {checkpoint['family_label']} checkpoint cannot be fine-tuned here."
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
    return f"A {checkpoint['family_label']} checkpoint fine-tunes on {listed} datasets."


def fit_count(n: int) -> str:
    """The second half of the note (static/js/finetune_choices.js writes the same)."""
    if n == 0:
        return "None of your ready datasets fits it."
    return f"{n} of your ready datasets {'fits' if n == 1 else 'fit'} it."


class FinetuneForm(SettingFields, forms.Form):
    """Fine-tune one of the user's checkpoints on one of their datasets. Every checkpoint and
    dataset of theirs is listed, each option with what it fits (services.finetune_choices):
    a checkpoint's data-tasks (the dataset tasks its family fine-tunes on), a dataset's data-task.
    A dataset that is not ready is disabled; once a checkpoint is chosen (given, or posted), the
    datasets it cannot fine-tune on are disabled too, the one chosen aside, and
    static/js/finetune_choices.js does the same in the page as the checkpoint changes.

    The settings are those that apply to the chosen checkpoint's family, the chosen dataset's task
    and the chosen technique (trainer.catalog.finetune.fields_for): chosen in the query (?checkpoint=
    &dataset=&technique=), or posted; a setting that does not apply is neither shown nor sent, so it
    keeps its default. The form builds and validates the run's config once (services.finetune_plan),
    and a refusal lands on the field it is about."""

    name = forms.CharField(max_length=200, required=False, help_text="Empty: “<checkpoint> on <dataset>”.")
    checkpoint = _CheckpointChoice(queryset=Checkpoint.objects.none(), widget=setting_fields.OptionsSelect,
                                   help_text="The pre-trained (or fine-tuned) model. Its family decides the tasks it "
                                             "fine-tunes on and the settings below.")
    dataset = _DatasetChoice(queryset=Dataset.objects.none(), widget=setting_fields.OptionsSelect, help_text="A ready labelled "
                             "dataset; its task is what the model learns.")
    technique = forms.ChoiceField(required=False, label="Technique", widget=forms.RadioSelect)
    extra_datasets = _DatasetsChoice(queryset=Dataset.objects.none(), required=False, label="More datasets",
                                     widget=setting_fields.OptionsCheckboxes,
                                     help_text="More of your datasets (text to text, classification, regression) "
                                               "trained in the same text-to-text run, labels written as words. "
                                               "None: a single-task run.")
    extra_prefixes = forms.CharField(required=False, strip=False, max_length=5000, label="Their task prefixes",
                                     widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false"}),
                                     help_text="One line each: the dataset's name, “=”, the prefix (“stdlib "
                                               "packages = package: ”). Without a line: its name and “: ”.")

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        from webapp.datasets.selectors import datasets_for
        from webapp.runs.selectors import checkpoints_for

        self.fields["checkpoint"].queryset = checkpoints_for(user)
        self.fields["dataset"].queryset = datasets_for(user)
        self.fields["extra_datasets"].queryset = datasets_for(user)  # only the user's can be chosen
        self.user = user
        self.choices = services.finetune_choices(user)
        self._mark_choices()
        self._add_settings()

    # -- what is chosen, and the settings that follow
    def _chosen(self, name: str) -> str:
        value = self[name].value()
        return "" if value is None else str(value)

    def _given(self) -> dict[str, Any]:
        """The values posted, else the initial ones (what decides which settings apply)."""
        if self.is_bound:
            return {k: self.data.get(k) for k in self.data}
        return dict(self.initial)

    def _add_settings(self) -> None:
        spec = launch.finetune_json()
        chosen = self.chosen_checkpoint or {}
        self.family = chosen.get("family", "")
        dataset = self.choices["datasets"].get(self._chosen("dataset"))
        extras = self["extra_datasets"].value() or []
        self.task = services.MIX_TASK if extras and chosen.get("mixes") else (dataset or {}).get("task", "")
        family_spec = spec["families"].get(self.family, {})
        allowed = family_spec.get("techniques")  # no checkpoint chosen yet: every technique
        offered = [t for t in spec["techniques"] if allowed is None or t["name"] in allowed]
        self.fields["technique"].choices = [(t["name"], t["label"]) for t in offered]
        self.technique_help = {t["name"]: t["help"] for t in offered}
        given = self._given()
        picked = str(given.get("technique") or "") or ft_settings.technique_of(given)
        self.technique_name = picked if picked in {t["name"] for t in offered} else ft_settings.FULL.name
        self.fields["technique"].initial = self.technique_name
        technique = ft_settings.technique(self.technique_name)
        self.settings = [spec["settings"][s.name] for s in catalog_finetune.fields_for(self.family, self.task,
                                                                                      self.technique_name)]
        switch = spec["settings"].get(technique.switch)
        starts = {technique.switch: technique.on} if switch and not switch["default"] else {}
        self.add_settings(self.settings, initial=starts)  # every setting optional: empty keeps the default
        if technique.switch in self.fields:  # the chosen technique's switch must stay on
            self.fields[technique.switch].validators.append(MinValueValidator(1, message=(
                f"{switch['label']} must be at least 1 with {technique.label}; choose full fine-tuning to train "
                f"without it.")))
        self.mixes = bool(chosen.get("mixes"))
        if not self.mixes:  # multi-task applies to a checkpoint that trains text to text
            del self.fields["extra_datasets"], self.fields["extra_prefixes"]

    def setting_groups(self) -> list[dict[str, Any]]:
        """The shown settings by card, each {"id", "title", "main": [bound fields], "advanced": [...]}."""
        titles = {"training": "Training", "techniques": "Techniques", "task": "This task's settings",
                  "multitask": "Multi-task"}
        groups = []
        for section, title in titles.items():
            rows = [s for s in self.settings if s["section"] == section]
            if not rows and section != "multitask":
                continue
            if section == "multitask" and not self.mixes:
                continue
            groups.append({"id": section, "title": title,
                           "main": [self[s["name"]] for s in rows if not s["advanced"]],
                           "advanced": [self[s["name"]] for s in rows if s["advanced"]]})
        return groups

    def shown_names(self) -> str:
        """The settings shown, space-separated (a refresh tells an unticked box from one not shown)."""
        return " ".join(s["name"] for s in self.settings)

    def technique_note(self) -> str:
        return self.technique_help.get(self.technique_name, "")

    def _mark_choices(self) -> None:
        """The options' data attributes, and the disabled ones (the class docstring)."""
        checkpoints, datasets = self.choices["checkpoints"], self.choices["datasets"]
        self.fields["checkpoint"].widget.option_attrs = {
            pk: {"data-tasks": " ".join(c["tasks"]), "data-note": fit_note(c), "data-mixes": "1" if c["mixes"] else "0"}
            for pk, c in checkpoints.items()}
        chosen = checkpoints.get(self._chosen("checkpoint"))
        self.chosen_checkpoint = chosen
        dataset, picked = self._chosen("dataset"), {str(v) for v in (self["extra_datasets"].value() or [])}
        marks, extras = {}, {}
        for pk, d in datasets.items():
            fits = d["ready"] and (chosen is None or d["task"] in chosen["tasks"])
            marks[pk] = {"data-task": d["task"], "data-ready": "1" if d["ready"] else "0",
                         "disabled": not fits and pk != dataset}
            mixes = d["ready"] and d["mixable"] and (chosen is None or chosen["mixes"])
            extras[pk] = {"data-task": d["task"], "data-ready": "1" if d["ready"] else "0",
                          "data-mixable": "1" if d["mixable"] else "0", "disabled": not mixes and pk not in picked}
        self.fields["dataset"].widget.option_attrs = marks
        self.fields["extra_datasets"].widget.option_attrs = extras
        if chosen is not None:
            fitting = sum(1 for d in datasets.values() if d["ready"] and d["task"] in chosen["tasks"])
            self.fit_note = fit_note(chosen) + " " + fit_count(fitting)
        else:
            self.fit_note = ""

    # -- validation: the run's config is built once, here (services.finetune_plan)
    def clean(self) -> dict[str, Any]:
        data = super().clean()
        picked = list(data.get("extra_datasets") or [])
        chosen = {d.name for d in picked}
        prefixes: dict[str, str] = {}
        for number, line in enumerate((data.get("extra_prefixes") or "").splitlines(), 1):
            if not line.strip():
                continue
            name, sep, prefix = line.partition("=")
            if not sep or name.strip() not in chosen:
                self.add_error("extra_prefixes", f"Line {number} must be the name of one of the extra datasets "
                                                 f"chosen, “=”, and its prefix; “{line.strip()[:60]}” is not.")
                continue
            prefixes[name.strip()] = prefix.strip() + " " if prefix.strip() else ""
        self.extras = [{"dataset": d, "prefix": prefixes.get(d.name, f"{d.name}: ")} for d in picked]
        if self.errors or not data.get("checkpoint") or not data.get("dataset"):
            return data  # the field errors say what to fix first
        try:
            self.plan = services.finetune_plan(owner=self.user, checkpoint=data["checkpoint"], dataset=data["dataset"],
                                               training=self.training_settings(), extra_datasets=self.extras)
        except ConfigError as e:
            field = str(e).split(" ", 1)[0].strip(".:,")
            self.add_error(field if field in self.fields and field not in ("checkpoint", "dataset") else None, str(e))
        return data

    def mix_datasets(self) -> list[dict[str, Any]]:
        """The extra datasets of a T5 multi-task run, each {"dataset": the row, "prefix": ...}."""
        return list(getattr(self, "extras", []))

    def training_settings(self) -> dict[str, Any]:
        """The settings shown and given; one left empty keeps its default (an empty chat template,
        LoRA target list or choice too: the default is shown in the field)."""
        out = {}
        for setting in self.settings:
            value = self.cleaned_data.get(setting["name"])
            if value is None or (value == "" and (setting.get("keep_if_empty") or "choices" in setting)):
                continue
            out[setting["name"]] = value
        if out.get("epochs") and out.get("max_steps") == self.fields["max_steps"].initial:
            del out["max_steps"]  # epochs typed beside the steps the form filled in: the run is in epochs
        return out
