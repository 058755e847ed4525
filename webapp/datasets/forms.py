"""Forms of the dataset pages. Tasks, roles and demos come from trainer.prep.labelled."""
from __future__ import annotations

from django import forms

from webapp.corpora.models import Tokenizer
from webapp.datasets.uploads import (ACCEPT_ATTRIBUTE, FILE_ACCEPT_ATTRIBUTE, FILE_HELP, SPLIT_FILE_HELP,
                                     check_dataset_upload, check_split_upload, check_split_uploads)

MAX_LENGTH_DEFAULT = 128
MAX_LENGTH_BOUNDS = (1, 8192)
SEED_MAX = 2**31 - 1
ROLE_HELP = {
    "text": "the text to classify", "sentence1": "first text of a pair", "sentence2": "second text of a pair",
    "label": "class, score or list of classes", "tokens": "the words of a sentence", "tags": "one tag per token",
    "question": "the question", "context": "the passage holding the answer", "answers": "answer text and offset",
    "input": "the input text", "target": "the text to produce", "prompt": "the prompt",
    "response": "the response to learn", "messages": "a chat: role and content",
    "choices": "one choice (several columns, in order) or a list of them", "split": "train, validation or test",
}  # fmt: skip
STRATEGIES = [("random", "At random, by the fractions below (seeded)"), ("column", "By the column mapped to split")]
FILES_STRATEGY = [("files", "By the files uploaded, one per split")]


def task_choices() -> list[tuple[str, str]]:
    from trainer.prep.labelled import TASKS

    return [(name, spec.title) for name, spec in TASKS.items()]


def task_needs(name: str) -> str:
    """The roles a task takes, in words: "text and label, or sentence1, sentence2 and label"."""
    from trainer.prep.labelled import TASKS

    def words(roles):
        return roles[0] if len(roles) == 1 else ", ".join(roles[:-1]) + " and " + roles[-1]

    return ", or ".join(words(list(form)) for form in TASKS[name].forms)


def role_choices() -> list[tuple[str, str]]:
    from trainer.prep.labelled import ROLES

    return [("", "— not used —")] + [(role, f"{role} · {ROLE_HELP.get(role, '')}".rstrip(" ·")) for role in ROLES]


def demo_choices() -> list[tuple[str, str]]:
    from trainer.prep.labelled import DEMOS

    from webapp.datasets.services import demo_label

    return [(name, f"{demo_label(name)} — {demo.filename} ({demo.rows:,} examples)") for name, demo in DEMOS.items()]


class DatasetUploadForm(forms.Form):
    file = forms.FileField(
        allow_empty_file=True,  # check_dataset_upload says "empty" in its own words
        help_text=FILE_HELP,
        widget=forms.ClearableFileInput(attrs={"accept": FILE_ACCEPT_ATTRIBUTE}),
    )
    validation_file = forms.FileField(
        required=False, allow_empty_file=True, label="Validation file", help_text=SPLIT_FILE_HELP["validation"],
        widget=forms.ClearableFileInput(attrs={"accept": ACCEPT_ATTRIBUTE}),
    )
    test_file = forms.FileField(
        required=False, allow_empty_file=True, label="Test file", help_text=SPLIT_FILE_HELP["test"],
        widget=forms.ClearableFileInput(attrs={"accept": ACCEPT_ATTRIBUTE}),
    )
    name = forms.CharField(max_length=200, required=False, help_text="Defaults to the file name.")

    def clean_file(self):
        uploaded = self.cleaned_data["file"]
        check_dataset_upload(uploaded.name, uploaded.size)
        return uploaded

    def clean_validation_file(self):
        return self._split_file("validation_file")

    def clean_test_file(self):
        return self._split_file("test_file")

    def _split_file(self, field: str):
        uploaded = self.cleaned_data.get(field)
        if uploaded:
            check_split_upload(uploaded.name, uploaded.size)
        return uploaded or None

    def clean(self):
        data = super().clean()
        if data.get("file"):
            try:
                check_split_uploads(data["file"].name, {"validation": data.get("validation_file"),
                                                        "test": data.get("test_file")})
            except forms.ValidationError as error:
                self.add_error("file", error)
        return data


class DemoForm(forms.Form):
    demo = forms.ChoiceField(choices=demo_choices, label="Demo dataset")


class MappingForm(forms.Form):
    """The task, one role per column of the upload, and the split. `columns` are the upload's
    (Dataset.preview["columns"]); the role of column i is the field role_<i>. `files` are the
    splits of a dataset uploaded as a file per split (services.split_files): it is split by its
    files, and only the share of the train file set aside for validation (when there is no
    validation file) and its seed remain to choose."""

    task = forms.ChoiceField(choices=task_choices)
    strategy = forms.ChoiceField(choices=STRATEGIES, widget=forms.RadioSelect, initial="random", label="Split")
    train = forms.FloatField(min_value=0, max_value=1, initial=0.8, label="Train")
    validation = forms.FloatField(min_value=0, max_value=1, initial=0.1, label="Validation")
    test = forms.FloatField(min_value=0, max_value=1, initial=0.1, label="Test")
    seed = forms.IntegerField(min_value=0, max_value=SEED_MAX, initial=0, label="Seed",
                              help_text="Shuffles the random split: the same seed gives the same split.")

    def __init__(self, *args, columns: list[str], files: list[str] | tuple = (), **kwargs):
        super().__init__(*args, **kwargs)
        self.columns = list(columns)
        self.files = list(files)
        if self.files:
            self.fields["strategy"].choices = FILES_STRATEGY
            del self.fields["train"], self.fields["test"]
            if "validation" in self.files:
                del self.fields["validation"], self.fields["seed"]
            else:
                self.fields["validation"].label = "Validation share of the train file"
                self.fields["seed"].help_text = "Chooses the validation examples: the same seed, the same ones."
        for i, column in enumerate(self.columns):
            self.fields[f"role_{i}"] = forms.ChoiceField(choices=role_choices, required=False,
                                                         label=f"Role of {column}")
        self.choices: dict | None = None

    @classmethod
    def initial_for(cls, dataset) -> dict:
        """The confirmed choices of a dataset mapped before, else the suggestions of its preview."""
        from webapp.datasets.services import current_choices, default_split, split_files

        choices = current_choices(dataset)
        mapping = choices["mapping"]
        split = choices["split"] or default_split(mapping, split_files(dataset))
        from trainer.prep.labelled.tasks import TASK_TYPES

        initial = {"task": choices["task"] or TASK_TYPES[0], "seed": choices["seed"],
                   **{key: split[key] for key in ("strategy", "train", "validation", "test") if key in split}}
        for i, column in enumerate((dataset.preview or {}).get("columns") or []):
            initial[f"role_{i}"] = mapping.get(column, "")
        return initial

    def split_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in ("train", "validation", "test", "seed") if name in self.fields]

    def role_fields(self) -> list[tuple[str, forms.BoundField]]:
        return [(column, self[f"role_{i}"]) for i, column in enumerate(self.columns)]

    def clean(self):
        from trainer.errors import DatasetError

        from webapp.datasets.services import check_choices

        data = super().clean()
        if self.errors:
            return data
        mapping = {column: data.get(f"role_{i}") or "" for i, column in enumerate(self.columns)}
        split = {key: data[key] for key in ("strategy", "train", "validation", "test") if key in self.fields}
        try:
            task, mapping, split = check_choices(task=data["task"], mapping=mapping, split=split, columns=self.columns,
                                                 files=self.files)
        except DatasetError as error:
            raise forms.ValidationError(str(error), code="mapping") from None
        self.choices = {"task": task, "mapping": mapping, "split": split, "seed": data.get("seed") or 0}
        return data


class LengthsForm(forms.Form):
    """The token-length histogram's choices (a GET form): one of the user's ready tokenizers and a max_length."""

    tokenizer = forms.ModelChoiceField(queryset=Tokenizer.objects.none(), empty_label=None,
                                       help_text="Counts tokens as a model with this tokenizer reads them.")
    max_length = forms.IntegerField(min_value=MAX_LENGTH_BOUNDS[0], max_value=MAX_LENGTH_BOUNDS[1],
                                    initial=MAX_LENGTH_DEFAULT, label="Max length",
                                    help_text="Tokens per example a fine-tuning run keeps; longer ones are cut.")

    def __init__(self, *args, tokenizers, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["tokenizer"].queryset = tokenizers
