from django import forms

from webapp.explorer import imports, tools
from webapp.explorer.incontext import MAX_QUERIES, MAX_SHOTS, MAX_TEMPLATE_CHARS
from webapp.explorer.neighbours import MAX_K as MAX_NEIGHBOURS
from webapp.explorer.services import (
    MAX_BEAMS, MAX_GENERATE_TOKENS, MAX_N_BEST, MAX_TEXT_CHARS, MAX_TOP_K, STRATEGIES, TASK_PREFIXES,
)

POOLING_CHOICES = [("mean", "mean of the tokens"), ("cls", "first token ([CLS])")]


class ExploreForm(forms.Form):
    """One form, several questions: the pressed button (action) says which fields are needed.
    With `compare_with` the encoder questions (fill-mask, sentence pairs) go to both checkpoints
    and the answers stand side by side; the others ask the first checkpoint only."""

    # Which actions it takes, the fields each reads, what must be typed in and the defaults are the
    # tools' (webapp.explorer.tools); so are the fields a tool brings of its own.
    DECODING_FIELDS = ("strategy", "max_new_tokens", "num_beams", "temperature", "sample_top_k", "top_p", "seed")
    ALWAYS = ("action", "checkpoint", "compare_with")
    # The decoding fields each strategy reads (strategy itself aside).
    STRATEGY_FIELDS = {"greedy": ("max_new_tokens",), "beam": ("max_new_tokens", "num_beams"),
                       "sample": ("max_new_tokens", "temperature", "sample_top_k", "top_p", "seed")}

    action = forms.ChoiceField(choices=())
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

    # T5 text-to-text
    task_prefix = forms.ChoiceField(required=False, label="Task prefix",
                                    choices=[("", "none (type it yourself)"), *TASK_PREFIXES])
    prompt = forms.CharField(required=False, label="Input", widget=forms.Textarea(
        attrs={"rows": 3, "placeholder": "summarize: The weather was cold that morning, so she put on her coat."}))
    # T5 span filling
    span_text = forms.CharField(required=False, label="Text with sentinels",
                               widget=forms.Textarea(attrs={"rows": 2}))
    # GPT generation
    gen_prompt = forms.CharField(required=False, label="Prompt", widget=forms.Textarea(
        attrs={"rows": 3, "placeholder": "The weather was cold that morning, so"}))
    gen_chat = forms.BooleanField(required=False, initial=True, label="As a chat turn")
    # UniLM source -> target
    source = forms.CharField(required=False, label="Source", widget=forms.Textarea(
        attrs={"rows": 3, "placeholder": "Source, e.g. a title"}))
    # decoding (T5, GPT and UniLM)
    strategy = forms.ChoiceField(choices=[(s, s) for s in STRATEGIES], initial="greedy", required=False,
                                 label="Decoding")
    max_new_tokens = forms.IntegerField(min_value=1, max_value=MAX_GENERATE_TOKENS, initial=32, required=False,
                                        label="Max new tokens")
    num_beams = forms.IntegerField(min_value=1, max_value=MAX_BEAMS, initial=4, required=False, label="Beams")
    temperature = forms.FloatField(initial=0.8, required=False, label="Temperature")
    sample_top_k = forms.IntegerField(min_value=0, initial=40, required=False, label="Top-k",
                                      help_text="0 keeps every token.")
    top_p = forms.FloatField(initial=0.95, required=False, label="Top-p")
    seed = forms.IntegerField(min_value=0, max_value=2**63 - 1, required=False, label="Seed",
                              help_text="Empty: a new draw each time.")
    # ELMo word similarity
    sentence_a = forms.CharField(required=False, label="Sentence A")
    sentence_b = forms.CharField(required=False, label="Sentence B")
    word = forms.CharField(required=False, label="Word", max_length=100)
    # fine-tuned checkpoints: classify, choose (GPT-1 multiple choice), tag, answer
    classify_text = forms.CharField(required=False, max_length=MAX_TEXT_CHARS, label="Text (sentence A)",
                                    widget=forms.Textarea(attrs={"rows": 3}))
    classify_text_b = forms.CharField(required=False, max_length=MAX_TEXT_CHARS, label="Sentence B",
                                      widget=forms.Textarea(attrs={"rows": 2}))
    choose_context = forms.CharField(required=False, max_length=MAX_TEXT_CHARS, label="Context (or question)",
                                     widget=forms.Textarea(attrs={"rows": 3}))
    choose_choices = forms.CharField(required=False, max_length=MAX_TEXT_CHARS, label="Choices",
                                     widget=forms.Textarea(attrs={"rows": 4}))
    tag_text = forms.CharField(required=False, max_length=MAX_TEXT_CHARS, label="Sentence",
                               widget=forms.Textarea(attrs={"rows": 3}))
    qa_question = forms.CharField(required=False, max_length=MAX_TEXT_CHARS, label="Question")
    qa_context = forms.CharField(required=False, max_length=MAX_TEXT_CHARS, label="Context",
                                 widget=forms.Textarea(attrs={"rows": 5}))
    qa_n_best = forms.IntegerField(required=False, min_value=1, max_value=MAX_N_BEST, initial=5, label="n best")
    # any encoder: sentence embeddings and nearest neighbours in a dataset
    embed_sentences = forms.CharField(required=False, max_length=2 * MAX_TEXT_CHARS, label="Sentences",
                                      widget=forms.Textarea(attrs={"rows": 5}))
    embed_pooling = forms.ChoiceField(required=False, choices=POOLING_CHOICES, label="Pooling")
    nn_dataset = forms.UUIDField(required=False, label="Dataset")
    nn_pooling = forms.ChoiceField(required=False, choices=POOLING_CHOICES, label="Pooling")
    nn_text = forms.CharField(required=False, max_length=MAX_TEXT_CHARS, label="Query",
                              widget=forms.Textarea(attrs={"rows": 2}))
    nn_k = forms.IntegerField(required=False, min_value=1, max_value=MAX_NEIGHBOURS, initial=5, label="k")
    # GPT: the prompt builder and accuracy against k (webapp.explorer.incontext's bounds)
    icl_dataset = forms.UUIDField(required=False, label="Dataset")
    icl_template = forms.CharField(required=False, strip=False, max_length=MAX_TEMPLATE_CHARS, label="Template")
    icl_seed = forms.IntegerField(required=False, min_value=0, max_value=2**31 - 1, initial=0, label="Seed")
    icl_normalise = forms.BooleanField(required=False, initial=True, label="Length-normalised")
    icl_k = forms.IntegerField(required=False, min_value=0, max_value=MAX_SHOTS, initial=2, label="k")
    icl_index = forms.IntegerField(required=False, min_value=0, initial=0, label="Example")
    icl_kmax = forms.IntegerField(required=False, min_value=0, max_value=MAX_SHOTS, initial=4, label="k up to")
    icl_queries = forms.IntegerField(required=False, min_value=1, max_value=MAX_QUERIES, initial=20,
                                     label="Examples")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["action"].choices = [(name, name) for name in tools.actions()]
        for tool in tools.all_tools():
            for name, field in (tool.form_fields() if tool.form_fields else {}).items():
                self.fields.setdefault(name, field)

    def clean(self):
        data = super().clean()
        tool = tools.action(data.get("action") or "")
        if tool is not None:
            reads = set(tool.fields)  # unrelated panels' fields never block the question asked
            if "strategy" in reads:  # nor do the decoding fields the chosen strategy ignores
                strategy = data.get("strategy") or "greedy"
                reads -= set(self.DECODING_FIELDS) - {"strategy", *self.STRATEGY_FIELDS.get(strategy, ())}
                if strategy == "sample":
                    self._check_sampling(data)
            for name in list(self._errors):
                if name not in reads and name not in self.ALWAYS and name != "__all__":
                    del self._errors[name]
            for name, message in tool.required:
                if name not in self._errors and not str(data.get(name) or "").strip():
                    self.add_error(name, message)
            for name, default in tool.defaults:
                if data.get(name) in (None, ""):
                    data[name] = default
            if tool.clean is not None:
                tool.clean(data, self)
        if data.get("compare_with") and data.get("compare_with") == data.get("checkpoint"):
            self.add_error("compare_with", "Choose a different checkpoint to compare with.")
        return data

    def _check_sampling(self, data: dict) -> None:
        if data.get("temperature") is not None and not data["temperature"] > 0:
            self.add_error("temperature", "Must be greater than 0.")
        if data.get("top_p") is not None and not 0 < data["top_p"] <= 1:
            self.add_error("top_p", "Must be greater than 0 and at most 1.")


def form_decoding(data: dict) -> dict:
    """ExploreForm's cleaned decoding fields as the API names them, only those the chosen strategy
    reads (trainer.inference.generate checks them again)."""
    strategy = data.get("strategy") or "greedy"
    out = {"strategy": strategy, "max_new_tokens": data.get("max_new_tokens") or 32}
    if strategy == "beam":
        out["num_beams"] = data.get("num_beams") or 4
    elif strategy == "sample":
        out.update(temperature=data.get("temperature"), top_k=data.get("sample_top_k"), top_p=data.get("top_p"),
                   seed=data.get("seed"))
    return out


class ImportForm(forms.Form):
    file = forms.FileField(label="Archive", help_text="A .zip or .tar.gz of a Hugging Face model folder "
                           "(what save_pretrained() writes): config.json, model.safetensors or pytorch_model.bin, "
                           "and tokenizer.json (or vocab.txt for BERT). Encoders, T5 and GPT-2 are supported.")
    name = forms.CharField(required=False, max_length=200,
                           help_text="How the explorer lists it (default: the archive's name).")

    def clean_file(self):
        upload = self.cleaned_data["file"]
        imports.check_archive(upload.name, upload.size)  # ValidationError with a sentence
        return upload
