"""Forms of the corpus pages. The cleaning checkboxes are generated from trainer.prep.corpus.RULES."""
from __future__ import annotations

import json
from dataclasses import dataclass

from django import forms

from webapp.corpora.uploads import ACCEPT_ATTRIBUTE, check_upload

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


class CorpusUploadForm(forms.Form):
    file = forms.FileField(
        allow_empty_file=True,  # check_upload says "empty" in its own words
        help_text="A .txt file (documents separated by a blank line) or a .jsonl file (one JSON object "
                  "with a \"text\" field per line), optionally gzip-compressed.",
        widget=forms.ClearableFileInput(attrs={"accept": ACCEPT_ATTRIBUTE}),
    )
    name = forms.CharField(max_length=200, required=False, help_text="Defaults to the file name.")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for rule in cleaning_rules():
            self.fields[rule.field] = forms.BooleanField(required=False, label=rule.label, help_text=rule.help)

    def clean_file(self):
        uploaded = self.cleaned_data["file"]
        self.suffix = check_upload(uploaded.name, uploaded.size)
        return uploaded

    @property
    def rule_fields(self) -> list[forms.BoundField]:
        return [self[rule.field] for rule in cleaning_rules()]

    @property
    def options(self) -> dict[str, bool]:
        return {rule.field: bool(self.cleaned_data.get(rule.field)) for rule in cleaning_rules()}


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

