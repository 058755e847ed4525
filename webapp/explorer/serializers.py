from rest_framework import serializers

from webapp.explorer.services import MAX_TEXT_CHARS, MAX_TOP_K


class FillMaskRequestSerializer(serializers.Serializer):
    checkpoint = serializers.UUIDField(help_text="A checkpoint of one of your runs.")
    text = serializers.CharField(
        help_text=f"Text with one or more [MASK] tokens (at most {MAX_TEXT_CHARS:,} characters).")
    top_k = serializers.IntegerField(min_value=1, max_value=MAX_TOP_K, default=5)


class PredictionSerializer(serializers.Serializer):
    token = serializers.CharField()
    id = serializers.IntegerField()
    prob = serializers.FloatField()


class MaskPredictionsSerializer(serializers.Serializer):
    position = serializers.IntegerField(help_text="Token position of the [MASK] in the encoded input.")
    predictions = PredictionSerializer(many=True)


class FillMaskResponseSerializer(serializers.Serializer):
    checkpoint = serializers.UUIDField()
    masks = MaskPredictionsSerializer(many=True)


class NextSentenceRequestSerializer(serializers.Serializer):
    checkpoint = serializers.UUIDField(help_text="A checkpoint of one of your runs.")
    text_a = serializers.CharField(help_text="The first sentence (A).")
    text_b = serializers.CharField(help_text="The sentence that may follow it (B).")


class NextSentenceResponseSerializer(serializers.Serializer):
    checkpoint = serializers.UUIDField()
    is_next = serializers.FloatField(help_text="Probability that text_b follows text_a.")
    not_next = serializers.FloatField()
