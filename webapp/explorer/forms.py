from django import forms

from webapp.explorer.services import MAX_TOP_K


class ExploreForm(forms.Form):
    """One form, two questions: the pressed button (action) says which fields are needed."""

    ACTIONS = ("fill_mask", "next_sentence")

    action = forms.ChoiceField(choices=[(a, a) for a in ACTIONS])
    checkpoint = forms.UUIDField()
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
        elif data.get("action") == "next_sentence":
            for name, label in (("text_a", "sentence A"), ("text_b", "sentence B")):
                if not data.get(name):
                    self.add_error(name, f"Type {label}.")
        return data
