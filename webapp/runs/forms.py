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

import dataclasses
from typing import Any

from django import forms
from django.db import models

from trainer import jsonio
from trainer.errors import ConfigError
from webapp.corpora.models import Corpus, JobStatus, Tokenizer
from webapp.datasets.models import Dataset
from webapp.runs import launch, services
from webapp.runs.models import Checkpoint, CheckpointSource
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


class RunForm(forms.Form):
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
        for name in launch.TRAINING_FIELDS:
            self.fields[name] = _training_field(name, spec["fields"][name])
            self.fields[name].required = name not in launch.OPTIONAL_FIELDS
        for name in launch.OBJECTIVE_FIELDS + launch.FAMILY_FIELDS + ("optimizer", "eps"):
            self.fields[name] = _training_field(name, spec["fields"][name], required=False)
        self.fields["betas"] = BetasField(label=launch.LABELS["betas"], help_text=spec["fields"]["betas"]["help"])
        for name in launch.model_field_names():
            self.fields[name] = _model_field(launch.model_field(name))
        self.fields["teacher_checkpoint"].queryset = teacher_checkpoints(user)
        for name, value in launch.launch_defaults().items():
            self.fields[name].initial = value
        self.fields["masking_unit"].initial = ""
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
        try:
            self.config = build_config(
                family=data["family"], preset=data["preset"], objectives=data.get("objectives") or [],
                training=self.training_settings(), owner=self.user,
            )
        except ConfigError as e:
            self.add_error(_field_of(str(e)), str(e))
            return data
        if tokenizer and "tokenizer" not in self.errors:
            for check, field in ((services.check_tokenizer, "tokenizer"), (services.check_teacher, "teacher_checkpoint")):
                try:
                    check(config=self.config, tokenizer=tokenizer)
                except ConfigError as e:
                    self.add_error(field, str(e))
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


def _training_field(name: str, spec: dict[str, Any], *, required: bool = True) -> forms.Field:
    label = launch.LABELS.get(name, name.replace("_", " ").capitalize())
    common = {"label": label, "help_text": spec.get("help", ""), "required": required}
    default = spec.get("default")
    if spec.get("multiple"):  # a list of some of the choices (report_to): check boxes
        labels = launch.CHOICE_LABELS.get(name, {})
        return forms.MultipleChoiceField(choices=[(c, labels.get(c, c)) for c in spec["choices"]],
                                         widget=forms.CheckboxSelectMultiple, initial=default, **common)
    if "choices" in spec:
        labels = launch.CHOICE_LABELS.get(name, {})
        choices = [(c, labels.get(c, c)) for c in spec["choices"]]
        if {"on", "off"} <= set(spec["choices"]):  # a switch with an "auto" (compile): true / false read as on / off
            return SwitchField(choices=choices, initial=default, **common)
        if not required:
            choices = [("", "Default for the family")] + choices
        return forms.ChoiceField(choices=choices, **common)
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


class SwitchField(forms.ChoiceField):
    """"auto", "on" or "off"; JSON's true and false (and a ticked box's "on") read as "on" and "off"."""

    def to_python(self, value):
        if isinstance(value, bool) or str(value).lower() in ("true", "false"):
            return "on" if value is True or str(value).lower() == "true" else "off"
        return super().to_python(value)


class BetasField(forms.CharField):
    """AdamW's two betas as "0.9, 0.999"; empty = the family's."""

    def __init__(self, **kwargs):
        super().__init__(required=False, **kwargs)

    def prepare_value(self, value):
        if isinstance(value, (list, tuple)):
            return ", ".join(f"{float(v):g}" for v in value)
        return value

    def to_python(self, value):
        value = super().to_python(value)
        if isinstance(value, (list, tuple)):
            return list(value)
        if not value:
            return []
        try:
            betas = [float(v) for v in str(value).replace(";", ",").split(",") if v.strip()]
        except ValueError:
            betas = []
        if len(betas) != 2:
            raise forms.ValidationError("Give two numbers separated by a comma, like 0.9, 0.999.")
        return betas


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
# The FinetuneConfig fields the fine-tuning form offers (services.FINETUNE_FIELDS), with what each
# does; bounds are FinetuneConfig's, checked again by the service (a sentence when out of range).
FINETUNE_HELP = {
    "max_length": "Tokens per example; longer inputs are cut (dynamic padding per batch).",
    "max_steps": "Optimizer updates in all (or leave it empty and give epochs).",
    "epochs": "Passes over the train split instead of steps: ceil(epochs × train examples / batch size) steps. "
              "Give steps or epochs, not both.",
    "batch_size": "Examples per update.",
    "lr": "Peak learning rate of AdamW (BERT's recipes: 2e-5 to 5e-5).",
    "warmup_ratio": "Share of max_steps over which the learning rate climbs from 0, then decays linearly.",
    "eval_every": "Steps between validation passes (the task's metrics are computed there).",
    "llrd": "Layer-wise learning-rate decay: the head trains at lr, each layer below at the one above's lr × "
            "this factor. 1 turns it off; 0.8 to 0.95 is usual.",
    "freeze_embeddings": "Keep the embeddings exactly as pre-trained.",
    "freeze_layers": "Freeze the bottom k encoder layers (0: none).",
    "gradual_unfreeze_every": "ULMFiT: train the head alone, then unfreeze one more layer group from the top every "
                              "n steps (0: off).",
    "early_stopping_patience": "Stop after this many validations without a better primary metric; the best "
                               "checkpoint is restored before the test split (0: off).",
    "class_weights": "Balanced: weigh each class's loss by how rare it is in the train split (classification and "
                     "token classification).",
    "group_by_length": "Batch training examples of similar length together (each epoch still shuffled), so that "
                       "little of each batch is padding: faster training for the same examples.",
    "source_prefix": "Text to text: put before every input, as T5's task prefixes (“summarize: ”, “sst2 sentence: ”).",
    "max_target_length": "Text to text: target tokens kept for training and generated when scoring; SFT: tokens "
                         "of the sample replies.",
    "target_mask_prob": "UniLM: the share of target tokens masked and predicted per example (0.7 in the paper).",
    "num_beams": "Beam search width when generating for the scores (1: greedy).",
    "samples_shown": "Validation examples whose generated text each evaluation writes to the log.",
    "aux_lm_weight": "GPT classification and regression (GPT-1): the weight of the language-model loss kept "
                     "beside the task's (0.5 in the paper; 0: off).",
    "lora_r": "LoRA's rank r: the adapters' size (1 to 64 is usual); only they and the head train. 0: off.",
    "lora_alpha": "LoRA's alpha: the update is scaled by alpha / r.",
    "lora_dropout": "Dropout on the LoRA adapters' input.",
    "lora_targets": "The projections LoRA adapts, comma-separated: query, key, value, output, ffn_up, ffn_down. An "
                    "encoder's run also writes the adapter in peft's format.",
    "adapter_size": "Bottleneck adapters (Houlsby et al. 2019): the size d of a small down-ReLU-up layer after "
                    "every attention and feed-forward layer; only they, the layer norms and the head train. 0: off. "
                    "Checkpoints keep them, so they have no Hugging Face export.",
    "chat_template": "SFT: how each chat turn is written. {role} is system, user or assistant; {content} the "
                     "message. The model learns the assistant's content and an end-of-text token after it.",
    "task_name": "Multi-task: the main dataset's task in the metric names (exact_match/<task>); empty: from its "
                 "prefix.",
    "mixing": "Multi-task: how often each task's examples are drawn: in proportion to its size (capped at K), "
              "those rates to the power 1/T renormalised, or equally (Raffel et al. 2020, 3.5.2).",
    "mixing_limit": "Multi-task: K, the most examples a task counts as in proportional and temperature mixing "
                    "(0: no limit).",
    "mixing_temperature": "Multi-task: T of temperature mixing (1: proportional; large: nearly equal; 2 in the "
                          "T5 study).",
    "seed": "Seeds the data order, the new head's initial weights and dropout: the same seed and settings train "
            "the same run again. Change it to see how much a result owes to chance.",
    "num_threads": "CPU threads the run's PyTorch uses (0: PyTorch's default, one per core). Two runs side by side on "
                   "one machine train faster with a share each.",
    "data_workers": "Processes that build the training batches beside the run, so that steps do not wait for them "
                    "(-1: auto, one per core the training threads leave free, at most 4; 0: none). The batches and "
                    "their order are the same whatever the number.",
    "device": "CUDA GPU runs on the gpu queue (a worker with a GPU), CPU on the cpu queue; Auto on the default "
              "queue, on a GPU when its worker has one.",
    "report_to": "Experiment trackers that also get every metric, the settings and the test report, written into "
                 "the run's folder (no server, no network); the run's page then says where. Each needs its "
                 "package installed where the run trains.",
}
DEVICE_CHOICES = [("auto", "Auto"), ("cpu", "CPU"), ("cuda", "CUDA GPU")]


class _OptionAttrs:
    """A choice widget whose options carry attributes of their own: `option_attrs` {value: {attr:
    value}} (a True value is a bare attribute such as disabled)."""

    option_attrs: dict[str, dict[str, Any]]

    def create_option(self, name, value, label, selected, index, subindex=None, attrs=None):
        option = super().create_option(name, value, label, selected, index, subindex, attrs)  # type: ignore[misc]
        extra = getattr(self, "option_attrs", {}).get(str(value), {})
        option["attrs"] = {**option["attrs"], **{k: v for k, v in extra.items() if v is not False}}
        return option


class _OptionsSelect(_OptionAttrs, forms.Select):
    pass


class _OptionsCheckboxes(_OptionAttrs, forms.CheckboxSelectMultiple):
    pass


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


MIXING_CHOICES = [("proportional", "examples-proportional (cap K)"), ("temperature", "temperature-scaled (T)"),
                  ("equal", "equal")]


def fit_note(checkpoint: dict[str, Any]) -> str:
    """What a checkpoint (services.finetune_choices) fine-tunes on, as the form says it."""
    from trainer.prep.labelled.tasks import TASKS

    names = [TASKS[t].title.lower() if t in TASKS else t.replace("_", " ") for t in checkpoint["tasks"]]
    if not names:
        return f"A {checkpoint['family_label']} checkpoint cannot be fine-tuned here."
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
    return f"A {checkpoint['family_label']} checkpoint fine-tunes on {listed} datasets."


def fit_count(n: int) -> str:
    """The second half of the note (static/js/finetune_choices.js writes the same)."""
    if n == 0:
        return "None of your ready datasets fits it."
    return f"{n} of your ready datasets {'fits' if n == 1 else 'fit'} it."


class FinetuneForm(forms.Form):
    """Fine-tune one of the user's checkpoints on one of their datasets. Every checkpoint and
    dataset of theirs is listed, each option with what it fits (services.finetune_choices):
    a checkpoint's data-tasks (the dataset tasks its family fine-tunes on), a dataset's data-task.
    A dataset that is not ready is disabled; once a checkpoint is chosen (given, or posted), the
    datasets it cannot fine-tune on are disabled too, the one chosen aside, and
    static/js/finetune_choices.js does the same in the page as the checkpoint changes.
    services.finetune_create still refuses a pair that does not fit, with a sentence."""

    name = forms.CharField(max_length=200, required=False, help_text="Empty: “<checkpoint> on <dataset>”.")
    checkpoint = _CheckpointChoice(queryset=Checkpoint.objects.none(), widget=_OptionsSelect,
                                   help_text="The pre-trained (or fine-tuned) model: an encoder (BERT, RoBERTa, "
                                             "ALBERT, ELECTRA, DistilBERT, SpanBERT, UniLM) for the task heads, T5 "
                                             "or UniLM for text to text (T5 also for classification and regression, "
                                             "the label written as a word), GPT for SFT and GPT-1's classifier, ELMo "
                                             "for its features (classification, tags).")
    dataset = _DatasetChoice(queryset=Dataset.objects.none(), widget=_OptionsSelect, help_text="A ready labelled dataset; its task "
                             "(classification, regression, tags, QA, text to text, SFT) is what the model learns.")
    extra_datasets = _DatasetsChoice(queryset=Dataset.objects.none(), required=False,
                                     widget=_OptionsCheckboxes,
                                     help_text="T5 multi-task: more of your datasets (text to text, classification, "
                                               "regression) trained in the same text-to-text run, labels written as "
                                               "words. None: a single-task run.")
    extra_prefixes = forms.CharField(required=False, strip=False, max_length=5000,
                                     widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false"}),
                                     help_text="Each extra dataset's task prefix, one line each: its name, “=”, the "
                                               "prefix (“stdlib packages = package: ”). Without a line: its name "
                                               "and “: ”.")

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        from trainer.finetune.config import FinetuneConfig
        from webapp.datasets.selectors import datasets_for
        from webapp.runs.selectors import checkpoints_for

        self.fields["checkpoint"].queryset = checkpoints_for(user)
        self.fields["dataset"].queryset = datasets_for(user)
        self.fields["extra_datasets"].queryset = datasets_for(user)  # only the user's can be chosen
        self.choices = services.finetune_choices(user)
        self._mark_choices()
        defaults = {f.name: f.default_factory() if f.default is dataclasses.MISSING else f.default  # report_to: []
                    for f in dataclasses.fields(FinetuneConfig) if f.name in services.FINETUNE_FIELDS}
        for name in services.FINETUNE_FIELDS:
            default, help_text = defaults[name], FINETUNE_HELP[name]
            # The generative tasks' settings may be left out (their defaults), so that a form
            # posted without them, for a classifier, still validates.
            required = name not in services.OPTIONAL_FIELDS
            if isinstance(default, bool):
                field = forms.BooleanField(required=False, initial=default, help_text=help_text)
            elif name == "class_weights":
                field = forms.ChoiceField(choices=[("none", "none"), ("balanced", "balanced")], initial=default,
                                          help_text=help_text)
            elif name == "mixing":
                field = forms.ChoiceField(choices=MIXING_CHOICES, initial=default, help_text=help_text,
                                          required=False)
            elif name == "device":
                field = forms.ChoiceField(choices=DEVICE_CHOICES, initial=default, help_text=help_text,
                                          required=False)  # not sent (an older form, a script): auto
            elif name == "report_to":  # the launch form's check boxes (launch.CHOICE_LABELS), none ticked
                labels = launch.CHOICE_LABELS[name]
                field = forms.MultipleChoiceField(choices=list(labels.items()), widget=forms.CheckboxSelectMultiple,
                                                  required=False, help_text=help_text,
                                                  label=launch.LABELS[name])
            elif isinstance(default, str):
                # strip=False: a prefix's or a template's spaces and line breaks are part of it
                widget = forms.Textarea(attrs={"rows": 3, "spellcheck": "false"}) if name == "chat_template" else None
                field = forms.CharField(required=False, strip=False, initial=default, help_text=help_text,
                                        widget=widget, max_length=1000)
            elif isinstance(default, int):
                field = forms.IntegerField(initial=default, help_text=help_text, required=required)
            else:
                field = forms.FloatField(initial=default, help_text=help_text, required=required)
            if name == "epochs":
                field.initial = None  # empty: the length is max_steps
            self.fields[name] = field

    def _chosen(self, name: str) -> str:
        value = self[name].value()
        return "" if value is None else str(value)

    def _mark_choices(self) -> None:
        """The options' data attributes, and the disabled ones (the class docstring)."""
        checkpoints, datasets = self.choices["checkpoints"], self.choices["datasets"]
        self.fields["checkpoint"].widget.option_attrs = {
            pk: {"data-tasks": " ".join(c["tasks"]), "data-note": fit_note(c)} for pk, c in checkpoints.items()}
        chosen = checkpoints.get(self._chosen("checkpoint"))
        self.chosen_checkpoint = chosen
        dataset, picked = self._chosen("dataset"), {str(v) for v in (self["extra_datasets"].value() or [])}
        marks, extras = {}, {}
        for pk, d in datasets.items():
            fits = d["ready"] and (chosen is None or d["task"] in chosen["tasks"])
            marks[pk] = {"data-task": d["task"], "data-ready": "1" if d["ready"] else "0",
                         "disabled": not fits and pk != dataset}
            mixes = d["ready"] and d["mixable"] and (chosen is None or "text_to_text" in chosen["tasks"])
            extras[pk] = {"data-task": d["task"], "data-ready": "1" if d["ready"] else "0",
                          "data-mixable": "1" if d["mixable"] else "0", "disabled": not mixes and pk not in picked}
        self.fields["dataset"].widget.option_attrs = marks
        self.fields["extra_datasets"].widget.option_attrs = extras
        if chosen is not None:
            fitting = sum(1 for d in datasets.values() if d["ready"] and d["task"] in chosen["tasks"])
            self.fit_note = fit_note(chosen) + " " + fit_count(fitting)
        else:
            self.fit_note = ""

    KEEP_IF_EMPTY = ("chat_template", "lora_targets", "device", "mixing")  # empty: the default it showed

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
        return data

    def mix_datasets(self) -> list[dict[str, Any]]:
        """The extra datasets of a T5 multi-task run, each {"dataset": the row, "prefix": ...}."""
        return list(getattr(self, "extras", []))

    def training_settings(self) -> dict[str, Any]:
        """The settings given; an optional setting left empty keeps its default (an empty chat
        template or LoRA target list too: the default is shown in the field)."""
        out = {}
        for name in services.FINETUNE_FIELDS:
            value = self.cleaned_data.get(name)
            if name in services.OPTIONAL_FIELDS and (value is None or (value == "" and name in self.KEEP_IF_EMPTY)):
                continue
            out[name] = value
        return out
