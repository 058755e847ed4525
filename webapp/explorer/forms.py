from django import forms

from webapp.explorer import imports
from webapp.explorer.services import MAX_TOP_K


class ExploreForm(forms.Form):
    """One form, three questions: the pressed button (action) says which fields are needed.
    With `compare_with` the question goes to both checkpoints and the answers stand side by side."""

    ACTIONS = ("fill_mask", "next_sentence", "sentence_order")
    TASKS = {"fill_mask": "fill-mask", "next_sentence": "next-sentence", "sentence_order": "sentence-order"}

    action = forms.ChoiceField(choices=[(a, a) for a in ACTIONS])
    checkpoint = forms.UUIDField()
    compare_with = forms.UUIDField(required=False, label="Compare with")
    text = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 3}),
                           label="Text with [MASK]")
    top_k = forms.IntegerField(min_value=1, max_value=MAX_TOP_K, initial=5, required=False, label="Top k")
    text_a = forms.CharField(
        required=False, label="Sentence A",
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "The weather was cold that morning."}),
    )
    text_b = forms.CharField(
        required=False, label="Sentence B",
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "She put on her warmest coat before going out."}),
    )

    def clean(self):
        data = super().clean()
        if data.get("action") == "fill_mask":
            if not data.get("text"):
                self.add_error("text", "Type a sentence with [MASK] where a word should be predicted.")
            data["top_k"] = data.get("top_k") or 5
        elif data.get("action") in ("next_sentence", "sentence_order"):
            for name, label in (("text_a", "sentence A"), ("text_b", "sentence B")):
                if not data.get(name):
                    self.add_error(name, f"Type {label}.")
        if data.get("compare_with") and data.get("compare_with") == data.get("checkpoint"):
            self.add_error("compare_with", "Choose a different checkpoint to compare with.")
        return data


class ImportForm(forms.Form):
    file = forms.FileField(label="Archive", help_text="A .zip or .tar.gz of a Hugging Face model folder "
                           "(what save_pretrained() writes): config.json, model.safetensors or pytorch_model.bin, "
                           "and tokenizer.json or vocab.txt.")
    name = forms.CharField(required=False, max_length=200,
                           help_text="How the explorer lists it (default: the archive's name).")

    def clean_file(self):
        upload = self.cleaned_data["file"]
        imports.check_archive(upload.name, upload.size)  # ValidationError with a sentence
        return upload
