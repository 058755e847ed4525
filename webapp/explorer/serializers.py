"""API shapes of the explorer: questions to checkpoints, comparisons, masked batches, imports."""
from __future__ import annotations

from django.urls import reverse
from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema_field
from rest_framework import serializers

from webapp.api.serializers import GreaterThan, RequestSerializer
from webapp.explorer.models import ModelImport, NeighbourIndex
from webapp.explorer.neighbours import MAX_K as MAX_NEIGHBOURS
from webapp.explorer.services import (
    ATTENTION_MAX_TOKENS, MAX_BEAMS, MAX_CHOICES, MAX_GENERATE_TOKENS, MAX_N_BEST, MAX_NEW_TOKENS, MAX_SENTENCES, MAX_TEXT_CHARS,
    MAX_TOP_K, POOLINGS, STACKS, STRATEGIES,
)
from webapp.jobs.serializers import JobStatusField

CHECKPOINT_HELP = "A checkpoint of yours: a step of one of your runs, or a model you imported."
# The services' own sentence for a text over MAX_TEXT_CHARS (the serializers check it first).
TOP_P_RANGE = "Must be greater than 0 and at most 1."
TOO_LONG = {"max_length": f"Too long: the explorer takes at most {MAX_TEXT_CHARS:,} characters."}


# ---------------------------------------------------------------------------- single checkpoint
class FillMaskRequestSerializer(RequestSerializer):
    checkpoint = serializers.UUIDField(help_text=CHECKPOINT_HELP)
    text = serializers.CharField(max_length=MAX_TEXT_CHARS, error_messages=TOO_LONG,
        help_text=f"Text with one or more [MASK] tokens (at most {MAX_TEXT_CHARS:,} characters).")
    top_k = serializers.IntegerField(min_value=1, max_value=MAX_TOP_K, default=5)


class PredictionSerializer(serializers.Serializer):
    token = serializers.CharField()
    id = serializers.IntegerField()
    prob = serializers.FloatField()


class MaskPredictionsSerializer(serializers.Serializer):
    position = serializers.IntegerField(help_text="Token position of the [MASK] in the encoded input.")
    predictions = PredictionSerializer(many=True)
    note = serializers.CharField(
        required=False, help_text="ELECTRA only: these are its generator's predictions, not the discriminator's.")


class FillMaskResultSerializer(serializers.Serializer):
    masks = MaskPredictionsSerializer(many=True)


class FillMaskResponseSerializer(FillMaskResultSerializer):
    checkpoint = serializers.UUIDField()


class GenerateSeq2SeqRequestSerializer(RequestSerializer):
    checkpoint = serializers.UUIDField(help_text=CHECKPOINT_HELP + " Only UniLM checkpoints generate.")
    source = serializers.CharField(max_length=MAX_TEXT_CHARS, error_messages=TOO_LONG,
        help_text=f"The source, e.g. a title (at most {MAX_TEXT_CHARS:,} characters); the model writes the target.")
    max_new_tokens = serializers.IntegerField(min_value=1, max_value=MAX_NEW_TOKENS, default=32)


class GenerateSeq2SeqResponseSerializer(serializers.Serializer):
    text = serializers.CharField(allow_blank=True, help_text="The generated target text.")
    tokens = serializers.ListField(child=serializers.CharField(), help_text="The generated tokens.")
    stopped = serializers.ChoiceField(
        choices=["end", "length"],
        help_text="end: the model wrote [SEP]; length: max_new_tokens or the model's positions ran out.")


class PairRequestSerializer(RequestSerializer):
    checkpoint = serializers.UUIDField(help_text=CHECKPOINT_HELP)
    text_a = serializers.CharField(max_length=MAX_TEXT_CHARS, error_messages=TOO_LONG,
                                   help_text="The first sentence (A).")
    text_b = serializers.CharField(max_length=MAX_TEXT_CHARS, error_messages=TOO_LONG,
                                   help_text="The sentence that may follow it (B).")


class NextSentenceRequestSerializer(PairRequestSerializer):
    pass


class NextSentenceResultSerializer(serializers.Serializer):
    is_next = serializers.FloatField(help_text="Probability that text_b follows text_a.")
    not_next = serializers.FloatField()


class NextSentenceResponseSerializer(NextSentenceResultSerializer):
    checkpoint = serializers.UUIDField()


class SentenceOrderRequestSerializer(PairRequestSerializer):
    pass


class SentenceOrderResultSerializer(serializers.Serializer):
    ab = serializers.FloatField(help_text="Score of the pair as given (A then B).")
    ba = serializers.FloatField(help_text="Score of the swapped pair (B then A).")
    head = serializers.ChoiceField(
        choices=["sop", "nsp"],
        help_text="sop: the scores are P(in the original order) from a sentence-order head (ALBERT). "
                  "nsp: the model has only a next-sentence head; the scores are P(IsNext) of each order.")
    judges_order = serializers.BooleanField(
        help_text="Whether the head asked tells a pair's order (a sentence-order head) rather than a following "
                  "sentence from a random one.")


class SentenceOrderResponseSerializer(SentenceOrderResultSerializer):
    checkpoint = serializers.UUIDField()


# ---------------------------------------------------------------------------- generation
class DecodingSerializer(RequestSerializer):
    """How to pick each next token. Fields a strategy does not read are ignored."""

    strategy = serializers.ChoiceField(
        choices=list(STRATEGIES), default="greedy",
        help_text="greedy: the most likely token each step; beam: beam search over num_beams hypotheses; "
                  "sample: draw from the distribution shaped by temperature, top_k and top_p.")
    max_new_tokens = serializers.IntegerField(min_value=1, max_value=MAX_GENERATE_TOKENS, default=32,
                                              help_text="The most tokens to write (fewer when the model ends).")
    num_beams = serializers.IntegerField(min_value=1, max_value=MAX_BEAMS, default=4, help_text="beam only.")
    temperature = serializers.FloatField(default=1.0, validators=[GreaterThan(0)],
                                         help_text="sample only: > 0; below 1 is more conservative.")
    top_k = serializers.IntegerField(min_value=0, default=0,
                                     help_text="sample only: keep the k most likely tokens (0 = all).")
    top_p = serializers.FloatField(default=1.0, max_value=1.0, validators=[GreaterThan(0, TOP_P_RANGE)],
                                   error_messages={"max_value": TOP_P_RANGE},
                                   help_text="sample only: nucleus sampling, 0 < top_p <= 1 (1 = off).")
    seed = serializers.IntegerField(min_value=0, max_value=2**63 - 1, required=False, allow_null=True,
                                    help_text="sample only: the same seed draws the same text (random when absent).")


def decoding_of(data: dict) -> dict:
    """The decoding fields of validated request data."""
    return {name: data.get(name) for name in DecodingSerializer().fields}


class GenerateRequestSerializer(DecodingSerializer):
    checkpoint = serializers.UUIDField(help_text=CHECKPOINT_HELP + " T5, GPT or UniLM.")
    prompt = serializers.CharField(max_length=MAX_TEXT_CHARS, error_messages=TOO_LONG,
        help_text=f"T5: the input with its task prefix (e.g. 'summarize: ...'); GPT: the text to continue; "
                  f"UniLM: the source. At most {MAX_TEXT_CHARS:,} characters.")
    chat = serializers.BooleanField(required=False, default=False,
        help_text="GPT checkpoints of a supervised fine-tuning (SFT) run: the prompt is a user turn in the chat "
                  "template the run learnt, and the model writes the assistant's reply. Other checkpoints answer "
                  "400.")


class DecodingUsedSerializer(serializers.Serializer):
    strategy = serializers.ChoiceField(choices=list(STRATEGIES))
    max_new_tokens = serializers.IntegerField()
    num_beams = serializers.IntegerField(required=False)
    temperature = serializers.FloatField(required=False)
    top_k = serializers.IntegerField(required=False)
    top_p = serializers.FloatField(required=False)
    seed = serializers.IntegerField(required=False, help_text="The seed a sample was drawn with: send it to draw "
                                                              "the same text again.")


class GenerateResponseSerializer(serializers.Serializer):
    checkpoint = serializers.UUIDField()
    family = serializers.CharField(help_text='"t5", "gpt" or "unilm".')
    text = serializers.CharField(allow_blank=True, help_text="The generated text (GPT: what follows the prompt, "
                                                             "its leading space included).")
    tokens = serializers.ListField(child=serializers.CharField(), help_text="The generated tokens.")
    stopped = serializers.ChoiceField(choices=["end", "length"],
                                      help_text="end: the model wrote its end-of-sequence token; length: "
                                                "max_new_tokens or the model's positions ran out.")
    prompt_tokens = serializers.IntegerField(help_text="How many tokens the model read.")
    chat = serializers.BooleanField(help_text="Whether the prompt was read as a chat turn.")
    decoding = DecodingUsedSerializer()


class FillSpansRequestSerializer(DecodingSerializer):
    checkpoint = serializers.UUIDField(help_text=CHECKPOINT_HELP + " A T5 checkpoint whose tokenizer has sentinels.")
    text = serializers.CharField(max_length=MAX_TEXT_CHARS, error_messages=TOO_LONG,
                                 help_text="A text with <extra_id_0>, <extra_id_1>, ... where spans are missing.")


class SpanSerializer(serializers.Serializer):
    sentinel = serializers.CharField()
    index = serializers.IntegerField()
    text = serializers.CharField(allow_blank=True, help_text="The span the model wrote for this sentinel.")
    tokens = serializers.ListField(child=serializers.CharField())
    found = serializers.BooleanField(help_text="False when the model's output never named this sentinel.")


class FillSpansResponseSerializer(serializers.Serializer):
    checkpoint = serializers.UUIDField()
    spans = SpanSerializer(many=True)
    filled = serializers.CharField(help_text="The text with each sentinel replaced by its span.")
    output = serializers.CharField(allow_blank=True, help_text="The model's raw output, sentinels kept.")
    stopped = serializers.ChoiceField(choices=["end", "length"])
    decoding = DecodingUsedSerializer()


class PermutationRequestSerializer(RequestSerializer):
    checkpoint = serializers.UUIDField(help_text=CHECKPOINT_HELP + " An XLNet checkpoint.")
    text = serializers.CharField(max_length=MAX_TEXT_CHARS, error_messages=TOO_LONG,
                                 help_text=f"The text (at most {MAX_TEXT_CHARS:,} characters).")
    order = serializers.ListField(child=serializers.IntegerField(min_value=0), required=False, allow_empty=True,
                                  help_text="Token positions to predict, in the order to predict them; absent: "
                                            "only the text's tokens are returned, to pick from.")
    top_k = serializers.IntegerField(min_value=1, max_value=20, default=5)


class PermutationStepSerializer(serializers.Serializer):
    step = serializers.IntegerField()
    position = serializers.IntegerField()
    original = serializers.CharField(allow_blank=True)
    predictions = PredictionSerializer(many=True)
    chosen = serializers.CharField(allow_blank=True)


class PermutationResponseSerializer(serializers.Serializer):
    tokens = serializers.ListField(child=serializers.CharField(allow_blank=True))
    order = serializers.ListField(child=serializers.IntegerField(), required=False)
    steps = PermutationStepSerializer(many=True, required=False)
    filled = serializers.ListField(child=serializers.CharField(allow_blank=True), required=False)
    text = serializers.CharField(allow_blank=True, required=False)


class AttentionRequestSerializer(RequestSerializer):
    checkpoint = serializers.UUIDField(help_text=CHECKPOINT_HELP + " Any family but ELMo (which has no attention).")
    text = serializers.CharField(max_length=MAX_TEXT_CHARS, error_messages=TOO_LONG,
                                 help_text=f"The input (at most {ATTENTION_MAX_TOKENS} tokens).")
    target = serializers.CharField(max_length=MAX_TEXT_CHARS, error_messages=TOO_LONG, required=False, allow_blank=True,
                                   help_text="T5's decoder side: the target text (default: the model's greedy output).")
    stack = serializers.ChoiceField(choices=list(STACKS), required=False,
                                    help_text="encoder (encoders, T5), decoder (GPT, Transformer-XL; T5's causal "
                                              "self-attention), cross (T5's decoder attending to the encoder), "
                                              "content or query (XLNet's two streams). Default: the first.")
    layer = serializers.IntegerField(min_value=0, required=False, allow_null=True,
                                     help_text="One layer (0-based); all layers when absent.")


class AttentionResponseSerializer(serializers.Serializer):
    checkpoint = serializers.UUIDField()
    family = serializers.CharField()
    stack = serializers.ChoiceField(choices=list(STACKS))
    stacks = serializers.ListField(child=serializers.CharField(), help_text="The stacks this model has.")
    layers = serializers.IntegerField()
    heads = serializers.IntegerField()
    layer = serializers.IntegerField(allow_null=True, help_text="The layer in maps, or null when maps has them all.")
    tokens = serializers.ListField(child=serializers.CharField(), help_text="Query tokens (the maps' rows).")
    key_tokens = serializers.ListField(child=serializers.CharField(), help_text="Key tokens (the maps' columns).")
    maps = serializers.ListField(
        child=serializers.ListField(child=serializers.ListField(child=serializers.ListField(
            child=serializers.FloatField()))),
        help_text="[layer][head][row][column] softmax weights (4 decimals); each row sums to 1.")
    target = serializers.CharField(allow_null=True, help_text="T5's decoder side: the target that was read.")


class WordSimilarityRequestSerializer(RequestSerializer):
    checkpoint = serializers.UUIDField(help_text=CHECKPOINT_HELP + " An ELMo checkpoint.")
    sentence_a = serializers.CharField(max_length=MAX_TEXT_CHARS, error_messages=TOO_LONG, help_text="e.g. 我今天吃了一个苹果")
    sentence_b = serializers.CharField(max_length=MAX_TEXT_CHARS, error_messages=TOO_LONG, help_text="e.g. 我买了一部苹果手机")
    word = serializers.CharField(max_length=MAX_TEXT_CHARS, error_messages=TOO_LONG,
                                 help_text="A word in both sentences, e.g. 苹果")


class LayerCosineSerializer(serializers.Serializer):
    layer = serializers.IntegerField()
    name = serializers.CharField()
    cosine = serializers.FloatField()


class WordSimilarityResponseSerializer(serializers.Serializer):
    checkpoint = serializers.UUIDField()
    word = serializers.CharField()
    layers = LayerCosineSerializer(many=True, help_text="Layer 0 is the context-free token representation.")
    tokens_a = serializers.ListField(child=serializers.CharField())
    tokens_b = serializers.ListField(child=serializers.CharField())
    positions_a = serializers.ListField(child=serializers.IntegerField(), help_text="The word's tokens in A.")
    positions_b = serializers.ListField(child=serializers.IntegerField(), help_text="The word's tokens in B.")


# ---------------------------------------------------------------------------- fine-tuned checkpoints
class ClassifyRequestSerializer(RequestSerializer):
    checkpoint = serializers.UUIDField(help_text=CHECKPOINT_HELP + " A checkpoint of a sequence-classification, "
                                                                   "regression or multi-label fine-tuning run.")
    text = serializers.CharField(max_length=MAX_TEXT_CHARS, error_messages=TOO_LONG,
                                 help_text=f"The text (sentence A of a pair), at most {MAX_TEXT_CHARS:,} characters.")
    text_b = serializers.CharField(max_length=MAX_TEXT_CHARS, error_messages=TOO_LONG, required=False,
                                   allow_blank=True, default="",
                                   help_text="Sentence B, for a model fine-tuned on pairs.")


class LabelProbabilitySerializer(serializers.Serializer):
    label = serializers.CharField()
    probability = serializers.FloatField()


class ClassifyResultSerializer(serializers.Serializer):
    problem_type = serializers.CharField(help_text="single_label_classification, multi_label_classification or "
                                                   "regression.")
    labels = LabelProbabilitySerializer(many=True, help_text="Most likely first (softmax; a sigmoid each for "
                                                             "multi-label; empty for regression).")
    predicted = serializers.ListField(child=serializers.CharField(), help_text="The predicted label(s).")
    value = serializers.FloatField(allow_null=True, help_text="Regression: the predicted value.")
    threshold = serializers.FloatField(allow_null=True, help_text="Multi-label: a label is predicted above it.")
    truncated = serializers.BooleanField(help_text="The input was cut to max_length tokens.")
    max_length = serializers.IntegerField()
    generated = serializers.CharField(allow_null=True, help_text=(
        "A T5 checkpoint fine-tuned to write its labels (classification or regression as text to text): the text "
        "it generated, read as the label (none predicted when it is no label) or the value (null when it is no "
        "number); its label probabilities are those of each whole label as the output. Null for a classifier "
        "head."))


class ClassifyResponseSerializer(ClassifyResultSerializer):
    checkpoint = serializers.UUIDField()


class ChooseRequestSerializer(RequestSerializer):
    checkpoint = serializers.UUIDField(help_text=CHECKPOINT_HELP + " A checkpoint of a GPT multiple-choice "
                                                                   "fine-tuning run.")
    context = serializers.CharField(max_length=MAX_TEXT_CHARS, error_messages=TOO_LONG,
                                    help_text=f"The context or question, at most {MAX_TEXT_CHARS:,} characters.")
    choices = serializers.ListField(
        child=serializers.CharField(max_length=MAX_TEXT_CHARS, error_messages=TOO_LONG), min_length=2,
        max_length=MAX_CHOICES, help_text=f"From 2 to {MAX_CHOICES} different choices; each is read after the "
                                          "context, one pass per choice.")


class ChoiceProbabilitySerializer(serializers.Serializer):
    index = serializers.IntegerField(help_text="The choice's place in the request (from 0).")
    text = serializers.CharField()
    probability = serializers.FloatField(help_text="The softmax over the choices' scores.")
    score = serializers.FloatField(help_text="The head's score for this choice (a logit).")


class ChooseResponseSerializer(serializers.Serializer):
    checkpoint = serializers.UUIDField()
    choices = ChoiceProbabilitySerializer(many=True, help_text="In the order given.")
    labels = LabelProbabilitySerializer(many=True, help_text="The choices' texts, most likely first.")
    predicted = serializers.ListField(child=serializers.CharField(), help_text="The most likely choice's text.")
    predicted_index = serializers.IntegerField()
    truncated = serializers.BooleanField(help_text="The context or a choice was cut to max_length tokens.")
    max_length = serializers.IntegerField()


class TagRequestSerializer(RequestSerializer):
    checkpoint = serializers.UUIDField(help_text=CHECKPOINT_HELP + " A token-classification (NER) checkpoint.")
    text = serializers.CharField(max_length=MAX_TEXT_CHARS, error_messages=TOO_LONG,
                                 help_text="A sentence; it is split into words and punctuation marks.")


class TaggedWordSerializer(serializers.Serializer):
    text = serializers.CharField()
    start = serializers.IntegerField()
    end = serializers.IntegerField()
    tag = serializers.CharField()
    probability = serializers.FloatField()


class EntitySerializer(serializers.Serializer):
    type = serializers.CharField()
    start = serializers.IntegerField(help_text="Character offset into the text.")
    end = serializers.IntegerField()
    text = serializers.CharField()
    score = serializers.FloatField(help_text="The mean probability of its words' tags.")


class TagResponseSerializer(serializers.Serializer):
    checkpoint = serializers.UUIDField()
    words = TaggedWordSerializer(many=True)
    entities = EntitySerializer(many=True)
    truncated = serializers.BooleanField(help_text="Words past max_length got no tag.")


class AnswerRequestSerializer(RequestSerializer):
    checkpoint = serializers.UUIDField(help_text=CHECKPOINT_HELP + " An extractive question-answering checkpoint.")
    question = serializers.CharField(max_length=MAX_TEXT_CHARS, error_messages=TOO_LONG)
    context = serializers.CharField(max_length=MAX_TEXT_CHARS, error_messages=TOO_LONG,
                                    help_text=f"At most {MAX_TEXT_CHARS:,} characters.")
    n_best = serializers.IntegerField(min_value=1, max_value=MAX_N_BEST, default=5)


class AnswerSpanSerializer(serializers.Serializer):
    text = serializers.CharField(allow_blank=True, help_text='"" when the model answers that there is no answer.')
    start = serializers.IntegerField(help_text="Character offset into the context (-1: no answer).")
    end = serializers.IntegerField()
    score = serializers.FloatField(allow_null=True, help_text="Start + end logit.")


class AnswerResponseSerializer(serializers.Serializer):
    checkpoint = serializers.UUIDField()
    answer = AnswerSpanSerializer()
    n_best = AnswerSpanSerializer(many=True)
    null_score = serializers.FloatField(help_text="The [CLS] start + end logit (no answer).")
    threshold = serializers.FloatField(help_text="No answer when null_score beats the best span by more.")
    windows = serializers.IntegerField(help_text="Windows the context was cut into (doc_stride).")


class EmbedRequestSerializer(RequestSerializer):
    checkpoint = serializers.UUIDField(help_text=CHECKPOINT_HELP + " Any encoder (pre-trained, fine-tuned or "
                                                                   "imported).")
    sentences = serializers.ListField(child=serializers.CharField(allow_blank=True, max_length=MAX_TEXT_CHARS,
                                                                  error_messages=TOO_LONG), min_length=2,
                                      max_length=MAX_SENTENCES, help_text=f"2 to {MAX_SENTENCES} sentences.")
    pooling = serializers.ChoiceField(choices=list(POOLINGS), default="mean")


class EmbedResponseSerializer(serializers.Serializer):
    checkpoint = serializers.UUIDField()
    pooling = serializers.CharField()
    sentences = serializers.ListField(child=serializers.CharField())
    similarity = serializers.ListField(child=serializers.ListField(child=serializers.FloatField()),
                                       help_text="Cosine similarity of every pair (row i, column j).")
    dimensions = serializers.IntegerField()
    truncated = serializers.ListField(child=serializers.BooleanField())


# ---------------------------------------------------------------------------- nearest neighbours
class NeighbourIndexRequestSerializer(RequestSerializer):
    checkpoint = serializers.UUIDField(help_text=CHECKPOINT_HELP + " Any encoder (pre-trained, fine-tuned or "
                                                                   "imported, with or without an MLM head).")
    dataset = serializers.UUIDField(help_text="A ready labelled dataset of yours.")
    pooling = serializers.ChoiceField(choices=list(POOLINGS), default="mean")


class NeighbourIndexSerializer(serializers.ModelSerializer):
    status = JobStatusField()
    status_label = serializers.CharField(source="get_status_display", read_only=True)
    dataset_name = serializers.CharField(source="dataset.name", read_only=True)
    progress = serializers.FloatField(read_only=True, help_text="0 to 100 while the texts are embedded.")
    error = serializers.CharField(read_only=True, help_text="Why the job failed (a sentence), else empty.")
    limit = serializers.IntegerField(read_only=True, help_text="The most texts embedded (the first ones, train "
                                                              "split first).")
    count = serializers.IntegerField(read_only=True, help_text="Texts embedded, once ready.")
    total = serializers.IntegerField(read_only=True, help_text="Examples in the dataset, once ready.")

    class Meta:
        model = NeighbourIndex
        fields = ["id", "checkpoint", "dataset", "dataset_name", "pooling", "status", "status_label", "progress",
                  "error", "limit", "count", "total", "created_at", "finished_at"]
        read_only_fields = fields


class NeighboursRequestSerializer(NeighbourIndexRequestSerializer):
    text = serializers.CharField(max_length=MAX_TEXT_CHARS, error_messages=TOO_LONG,
                                 help_text="The query sentence.")
    k = serializers.IntegerField(min_value=1, max_value=MAX_NEIGHBOURS, default=5,
                                 help_text="How many neighbours.")


class NeighbourSerializer(serializers.Serializer):
    rank = serializers.IntegerField()
    text = serializers.CharField()
    label = serializers.CharField(allow_null=True, help_text="The example's label (classes joined by commas for "
                                                             "multi-label; null for tasks without one label per text).")
    split = serializers.CharField()
    similarity = serializers.FloatField(help_text="Cosine similarity to the query.")


class NeighboursResponseSerializer(serializers.Serializer):
    checkpoint = serializers.UUIDField()
    dataset = serializers.UUIDField()
    index = serializers.UUIDField(help_text="The NeighbourIndex searched.")
    query = serializers.CharField()
    pooling = serializers.CharField()
    count = serializers.IntegerField(help_text="Texts searched.")
    limit = serializers.IntegerField()
    total = serializers.IntegerField(help_text="Examples in the dataset.")
    dimensions = serializers.IntegerField()
    truncated = serializers.BooleanField(help_text="The query was cut to the model's length.")
    neighbours = NeighbourSerializer(many=True, help_text="Most similar first.")


# ---------------------------------------------------------------------------- comparison
class CompareInputsSerializer(RequestSerializer):
    text = serializers.CharField(max_length=MAX_TEXT_CHARS, error_messages=TOO_LONG, required=False, allow_blank=True,
                                 help_text="fill-mask: text with [MASK]; classify: the text (sentence A).")
    top_k = serializers.IntegerField(required=False, min_value=1, max_value=MAX_TOP_K, default=5,
                                     help_text="fill-mask: tokens per mask.")
    text_a = serializers.CharField(max_length=MAX_TEXT_CHARS, error_messages=TOO_LONG, required=False, allow_blank=True,
                                   help_text="next-sentence / sentence-order: sentence A.")
    text_b = serializers.CharField(max_length=MAX_TEXT_CHARS, error_messages=TOO_LONG, required=False, allow_blank=True,
                                   help_text="next-sentence / sentence-order: sentence B; classify: an optional sentence B.")


def _comparisons() -> dict:
    from webapp.explorer import tools  # the tools' modules import these serializers

    return tools.comparisons()


class CompareTaskField(serializers.ChoiceField):
    """A task of /api/explore/compare/: a tool's Comparison.task. The choices are read on first use,
    not when this module is imported (the tools' modules import it)."""

    def __init__(self, **kwargs):
        self._read = True  # not while the field is made
        super().__init__(choices=(), **kwargs)
        self._read = False

    def _get_choices(self):
        if not self._read:
            self._read = True
            self._set_choices(list(_comparisons()))
        return self._choices

    choices = property(_get_choices, serializers.ChoiceField._set_choices)

    def to_internal_value(self, data):
        self._get_choices()
        return super().to_internal_value(data)

    def to_representation(self, value):
        self._get_choices()
        return super().to_representation(value)


class CompareRequestSerializer(RequestSerializer):
    checkpoints = serializers.ListField(child=serializers.UUIDField(), min_length=2, max_length=4,
                                        help_text="Two (up to four) checkpoints of yours, in column order.")
    task = CompareTaskField()
    inputs = CompareInputsSerializer()

    def validate(self, data):
        inputs, task = data["inputs"], data["task"]
        needed = _comparisons()[task].needs
        missing = [n for n in needed if not (inputs.get(n) or "").strip()]
        if missing:
            raise serializers.ValidationError(
                f"The {task} task needs inputs.{' and inputs.'.join(missing)}.")
        return data


@extend_schema_field(PolymorphicProxySerializer(
    component_name="CompareResult",
    serializers=[FillMaskResultSerializer, NextSentenceResultSerializer, SentenceOrderResultSerializer,
                 ClassifyResultSerializer],
    resource_type_field_name=None,
))
class CompareResultField(serializers.JSONField):
    """What the single-checkpoint endpoint of the task answers, without "checkpoint"."""


class CompareColumnSerializer(serializers.Serializer):
    checkpoint = serializers.UUIDField()
    label = serializers.CharField(help_text="The checkpoint's name as pages show it.")
    result = CompareResultField(allow_null=True, help_text="The answer; null when this checkpoint cannot answer.")
    error = serializers.CharField(allow_null=True, help_text="Why this checkpoint cannot answer; null when it did.")


class CompareResponseSerializer(serializers.Serializer):
    task = CompareTaskField()
    results = CompareColumnSerializer(many=True)


# ---------------------------------------------------------------------------- masking inspector
class InspectRequestSerializer(RequestSerializer):
    run = serializers.UUIDField(help_text="One of your runs.")
    seed = serializers.IntegerField(min_value=0, max_value=2**31 - 2, default=0,
                                    help_text="Picks the epoch whose first batch is shown; same seed, same batch.")
    n_examples = serializers.IntegerField(min_value=1, max_value=16, default=4)


class InspectTokenSerializer(serializers.Serializer):
    token = serializers.CharField(help_text="The token the model reads.")
    id = serializers.IntegerField()
    original = serializers.CharField(help_text="The token before corruption (the MLM target when selected).")
    original_id = serializers.IntegerField()
    role = serializers.ChoiceField(
        choices=["masked", "random", "kept", "special", "none", "sentinel"],
        help_text="masked: became [MASK]; random: replaced by a random token; kept: selected but unchanged; "
                  "special: [CLS]/[SEP]/...; none: not selected; sentinel: a T5 <extra_id_N> standing for a span.")
    segment = serializers.IntegerField(help_text="Token type id: 0 = segment A, 1 = segment B.")
    span = serializers.IntegerField(allow_null=True, help_text="Span id when selected tokens form spans.")


class InspectPairSerializer(serializers.Serializer):
    task = serializers.CharField(help_text='"nsp" (next sentence prediction) or "sop" (sentence order).')
    label = serializers.IntegerField()
    meaning = serializers.CharField(help_text='"IsNext"/"NotNext" (NSP) or "in order"/"swapped" (SOP).')


class InspectExampleSerializer(serializers.Serializer):
    index = serializers.IntegerField()
    tokens = InspectTokenSerializer(many=True)
    pair = InspectPairSerializer(allow_null=True)
    counts = serializers.DictField(child=serializers.IntegerField(), help_text="Tokens per role.")
    electra = serializers.JSONField(
        allow_null=True, help_text="ELECTRA checkpoints only (null otherwise): generator replacements and "
                                   "discriminator verdicts per token.")
    target = serializers.JSONField(
        allow_null=True, help_text='Encoder-decoder objectives (T5) only: {"tokens": [{"token", "id", "role": '
                                   '"sentinel" | "special" | "target"}]}, what the decoder learns to write.')
    note = serializers.CharField(allow_null=True, help_text="What the model predicts, for objectives without MLM "
                                                            "labels (causal and bidirectional LMs).")


class InspectResponseSerializer(serializers.Serializer):
    run = serializers.UUIDField()
    seed = serializers.IntegerField()
    objectives = serializers.ListField(child=serializers.CharField())
    masking = serializers.CharField(help_text='"dynamic" or "static" masking.')
    masking_unit = serializers.CharField(help_text="What is masked together: token, whole word, n-gram, span, ...")
    mask_prob = serializers.FloatField(allow_null=True)
    examples = InspectExampleSerializer(many=True)


# ---------------------------------------------------------------------------- imports
class ModelImportSerializer(serializers.ModelSerializer):
    status_label = serializers.CharField(source="get_status_display", read_only=True)
    explore_url = serializers.SerializerMethodField()
    info = serializers.JSONField(read_only=True, help_text="What was imported: model_type, architectures, "
                                                           "objectives (trained heads), parameters, tokenizer.")

    class Meta:
        model = ModelImport
        fields = ["id", "name", "original_filename", "size_bytes", "status", "status_label", "error", "info",
                  "checkpoint", "explore_url", "created_at", "finished_at"]
        read_only_fields = fields

    def get_explore_url(self, obj: ModelImport) -> str | None:
        if obj.checkpoint_id is None:
            return None
        return f"{reverse('explorer:index')}?checkpoint={obj.checkpoint_id}"


class ModelImportCreateSerializer(RequestSerializer):
    file = serializers.FileField(help_text="A .zip or .tar.gz (.tgz) of a Hugging Face model folder.")
    name = serializers.CharField(required=False, allow_blank=True, max_length=200)
