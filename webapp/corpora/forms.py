"""Forms of the corpus pages. The cleaning checkboxes are generated from trainer.prep.corpus.RULES."""
from __future__ import annotations

import json
from dataclasses import dataclass

from django import forms

from webapp.corpora.uploads import FORMATS_HELP, accept_attribute, check_uploads

VOCAB_DEFAULT = 8000
EXTRA_IDS_LABEL = "T5 sentinel tokens"
EXTRA_IDS_HELP = ("T5 span corruption needs these; T5 uses 100. Left empty: 100 for a Unigram tokenizer (the "
                  "one T5 trains), none for the others.")


@dataclass(frozen=True)
class CleaningRule:
    field: str
    label: str
    help: str


def cleaning_rules() -> list[CleaningRule]:
    """The trainer's cleaning rules (one checkbox each), in the trainer's order."""
    from trainer.prep.corpus import RULES

    return [CleaningRule(field, label, help_text) for field, label, help_text in RULES]


def rule_labels() -> dict[str, str]:
    return {rule.field: rule.label for rule in cleaning_rules()}


def algorithm_choices() -> list[tuple[str, str]]:
    """The tokenizer algorithms worth training: those the trainer implements and at least one
    trainable family accepts (so a tokenizer made here can always be used by a run)."""
    from trainer import families
    from trainer.prep.tokenization import ALGORITHMS

    names: list[str] = []
    for family in families.all():
        names += [a for a in family.tokenizer_algorithms if a in ALGORITHMS and a not in names]
    return [(name, ALGORITHMS[name].label) for name in names]


def vocab_bounds() -> tuple[int, int]:
    from trainer.prep.tokenization import MAX_VOCAB_SIZE, MIN_VOCAB_SIZE

    return MIN_VOCAB_SIZE, MAX_VOCAB_SIZE


def extra_ids_defaults() -> dict[str, int]:
    """Each offered algorithm's number of sentinel tokens when none is given
    (trainer.catalog.schema.default_extra_ids: Unigram, T5's, gets T5's 100)."""
    from trainer.catalog.schema import default_extra_ids

    return {name: default_extra_ids(name) for name, _ in algorithm_choices()}


def extra_ids_max() -> int:
    from trainer.prep.tokenization import MAX_EXTRA_IDS

    return MAX_EXTRA_IDS


TEXT_FIELD_HELP = ("For JSON lines, Parquet and Arrow files: the field (or column) that holds each document's "
                   "text. Plain text files ignore it.")
IMPORT_PATH_HELP = ("An absolute path on the server: a file, a folder (read with its subfolders) or a glob such as "
                    "/data/fineweb/*.parquet or /data/c4/**/*.json.gz, under a folder the administrator allows.")


class MultipleFileInput(forms.ClearableFileInput):
    allow_multiple_selected = True


class MultipleFileField(forms.FileField):
    """A file input that takes several files: cleans to a list of the uploaded files."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("widget", MultipleFileInput())
        super().__init__(*args, **kwargs)

    def clean(self, data, initial=None):
        one = super().clean
        if isinstance(data, (list, tuple)):
            if not data:
                return [one(None, initial)]  # required: "This field is required."
            return [one(item, initial) for item in data]
        return [one(data, initial)]


def _text_field() -> forms.CharField:
    return forms.CharField(max_length=200, required=False, initial="text", label="Text field",
                           help_text=TEXT_FIELD_HELP)


class _CleaningForm(forms.Form):
    """A name, the text field, and one checkbox per cleaning rule (trainer.prep.corpus.RULES)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for rule in cleaning_rules():
            self.fields[rule.field] = forms.BooleanField(required=False, label=rule.label, help_text=rule.help)

    def clean_text_field(self) -> str:
        return (self.cleaned_data.get("text_field") or "").strip() or "text"

    @property
    def rule_fields(self) -> list[forms.BoundField]:
        return [self[rule.field] for rule in cleaning_rules()]

    @property
    def options(self) -> dict[str, bool]:
        return {rule.field: bool(self.cleaned_data.get(rule.field)) for rule in cleaning_rules()}


class CorpusUploadForm(_CleaningForm):
    file = MultipleFileField(
        allow_empty_file=True,  # check_uploads says "empty" in its own words
        label="Files",
        help_text=FORMATS_HELP,
    )
    name = forms.CharField(max_length=200, required=False, help_text="Defaults to the (first) file's name.")
    text_field = _text_field()

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["file"].widget.attrs["accept"] = accept_attribute()

    def clean_file(self):
        files = self.cleaned_data["file"]
        self.suffixes = check_uploads([(f.name, f.size) for f in files])
        return files


class CorpusImportForm(_CleaningForm):
    """A corpus read in place from files on the server (webapp.corpora.services.corpus_create_from_import)."""

    path = forms.CharField(max_length=4096, label="Path on the server", help_text=IMPORT_PATH_HELP,
                           widget=forms.TextInput(attrs={"placeholder": "/data/corpora/fineweb-sample/",
                                                         "spellcheck": "false", "autocomplete": "off"}))
    name = forms.CharField(max_length=200, required=False, help_text="Defaults to the folder's name.")
    text_field = _text_field()
    dry_run = forms.BooleanField(required=False)  # the "Find files" button: list them, import nothing

    def __init__(self, *args, **kwargs):
        super().__init__(*args, prefix="import", **kwargs)

    def clean_path(self) -> str:
        return self.cleaned_data["path"].strip()


class TokenizerForm(forms.Form):
    name = forms.CharField(max_length=200, required=False,
                           help_text="Defaults to the corpus name, algorithm and vocabulary size.")
    algorithm = forms.ChoiceField(choices=algorithm_choices, initial="wordpiece")
    vocab_size = forms.IntegerField(
        min_value=vocab_bounds()[0], max_value=vocab_bounds()[1], initial=VOCAB_DEFAULT, label="Vocabulary size",
        help_text="BERT used 30,000 on billions of words; a few thousand suits a small corpus.",
    )
    lowercase = forms.BooleanField(required=False, initial=True, label="Lowercase the text",
                                   help_text="An uncased tokenizer: “Paris” and “paris” become one token.")
    extra_ids = forms.IntegerField(min_value=0, max_value=extra_ids_max(), required=False,
                                   label=EXTRA_IDS_LABEL, help_text=EXTRA_IDS_HELP)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # The page's script fills in the chosen algorithm's default until the field is edited.
        self.fields["extra_ids"].widget.attrs["data-defaults"] = json.dumps(extra_ids_defaults())
        if self.initial.get("extra_ids") is None and not self.is_bound:
            self.initial["extra_ids"] = extra_ids_defaults().get(self.initial.get("algorithm") or "wordpiece", 0)

    def clean_extra_ids(self) -> int | None:
        return self.cleaned_data.get("extra_ids")  # None (left empty): the algorithm's default, see services

