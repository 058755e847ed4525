"""JSON API of the explorer: questions to your checkpoints (fill-mask, sentence pairs, generation,
span filling, attention, ELMo word similarity, the fine-tuned tools, sentence embeddings and
nearest neighbours within a dataset), comparisons, masked batches, imports."""
from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, status
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.datasets.selectors import dataset_get
from webapp.explorer import imports, neighbours, services
from webapp.explorer.serializers import (
    AnswerRequestSerializer, AnswerResponseSerializer, ChooseRequestSerializer, ChooseResponseSerializer,
    ClassifyRequestSerializer, ClassifyResponseSerializer,
    EmbedRequestSerializer, EmbedResponseSerializer, TagRequestSerializer, TagResponseSerializer,
    AttentionRequestSerializer, AttentionResponseSerializer, CompareRequestSerializer, CompareResponseSerializer,
    FillMaskRequestSerializer, FillMaskResponseSerializer, FillSpansRequestSerializer, FillSpansResponseSerializer,
    GenerateRequestSerializer, GenerateResponseSerializer, GenerateSeq2SeqRequestSerializer,
    GenerateSeq2SeqResponseSerializer, WordSimilarityRequestSerializer, WordSimilarityResponseSerializer,
    decoding_of,
    InspectRequestSerializer, InspectResponseSerializer, ModelImportCreateSerializer, ModelImportSerializer,
    NeighbourIndexRequestSerializer, NeighbourIndexSerializer, NeighboursRequestSerializer,
    NeighboursResponseSerializer,
    NextSentenceRequestSerializer, NextSentenceResponseSerializer, PermutationRequestSerializer,
    PermutationResponseSerializer, SentenceOrderRequestSerializer, SentenceOrderResponseSerializer,
)
from webapp.runs import selectors
from webapp.runs.models import Checkpoint

ERROR = OpenApiResponse(description='{"error": "<a sentence>"}')


def _owned(lookup, *args):
    """A selector's answer; its Http404 becomes DRF's NotFound (the JSON 404 body)."""
    try:
        return lookup(*args)
    except Http404:
        raise exceptions.NotFound() from None


def owned_checkpoint(request: Request, checkpoint_id) -> Checkpoint:
    return _owned(selectors.checkpoint_get, request.user, checkpoint_id)


# A question to one of your checkpoints: the request is validated by `request_serializer`, its
# `checkpoint` must be yours (404 otherwise), and `answer` fills the reply, which also names the
# checkpoint. Subclasses carry their OpenAPI description with @extend_schema. (A comment, not a
# docstring: drf-spectacular would show a docstring as every subclass's description.)
class CheckpointQuestionView(APIView):
    request_serializer: type

    def answer(self, checkpoint: Checkpoint, data: dict) -> dict:
        raise NotImplementedError

    def post(self, request: Request) -> Response:
        ser = self.request_serializer(data=request.data)
        ser.is_valid(raise_exception=True)
        ckpt = owned_checkpoint(request, ser.validated_data["checkpoint"])
        return Response({"checkpoint": str(ckpt.id), **self.answer(ckpt, ser.validated_data)})


@extend_schema(request=FillMaskRequestSerializer,
               responses={200: FillMaskResponseSerializer, 400: ERROR, 404: ERROR},
               summary="Top-k tokens for each [MASK]")
class FillMaskView(CheckpointQuestionView):
    request_serializer = FillMaskRequestSerializer

    def answer(self, checkpoint: Checkpoint, data: dict) -> dict:
        return {"masks": services.fill_mask(checkpoint=checkpoint, text=data["text"], top_k=data["top_k"])}


class GenerateSeq2SeqView(APIView):
    @extend_schema(request=GenerateSeq2SeqRequestSerializer,
                   responses={200: GenerateSeq2SeqResponseSerializer, 400: ERROR, 404: ERROR},
                   summary="A UniLM checkpoint writes a target for a source (e.g. title → article)",
                   description="Greedy seq2seq generation with UniLM's seq2seq attention; other models answer 400.")
    def post(self, request: Request) -> Response:
        ser = GenerateSeq2SeqRequestSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        ckpt = owned_checkpoint(request, ser.validated_data["checkpoint"])
        return Response(services.generate_seq2seq(checkpoint=ckpt, source=ser.validated_data["source"],
                                                  max_new_tokens=ser.validated_data["max_new_tokens"]))


@extend_schema(request=GenerateRequestSerializer,
               responses={200: GenerateResponseSerializer, 400: ERROR, 404: ERROR},
               summary="A T5, GPT or UniLM checkpoint writes text for a prompt",
               description="T5: text-to-text (put the task prefix in the prompt, e.g. 'summarize: ...'); "
                           "GPT: continues the prompt; UniLM: writes a seq2seq target. Greedy, beam search or "
                           "sampling (temperature, top-k, top-p, seed). Encoders and ELMo answer 400. The page "
                           "streams the same answer token by token over the websocket /ws/explore/generate/.")
class GenerateView(CheckpointQuestionView):
    request_serializer = GenerateRequestSerializer

    def answer(self, checkpoint: Checkpoint, data: dict) -> dict:
        out = services.generate(checkpoint=checkpoint, prompt=data["prompt"], decoding=decoding_of(data),
                                chat=data["chat"])
        return {**{k: out[k] for k in ("family", "text", "tokens", "stopped", "prompt_tokens", "decoding")},
                "chat": data["chat"]}


@extend_schema(request=FillSpansRequestSerializer,
               responses={200: FillSpansResponseSerializer, 400: ERROR, 404: ERROR},
               summary="T5 fills the spans marked <extra_id_0>, <extra_id_1>, ...",
               description="The model writes span corruption's target ('<extra_id_0> span <extra_id_1> "
                           "span ...'); each sentinel of the text gets its span.")
class FillSpansView(CheckpointQuestionView):
    request_serializer = FillSpansRequestSerializer

    def answer(self, checkpoint: Checkpoint, data: dict) -> dict:
        return services.fill_spans(checkpoint=checkpoint, text=data["text"], decoding=decoding_of(data))


@extend_schema(request=AttentionRequestSerializer,
               responses={200: AttentionResponseSerializer, 400: ERROR, 404: ERROR},
               summary="Attention weights of every layer and head for an input",
               description="Encoders: self-attention; GPT: causal self-attention; T5: the encoder's, the "
                           "decoder's or the cross-attention (stack), the decoder side reading `target` or "
                           "the model's greedy output. ELMo has no attention (400 with a sentence).")
class AttentionView(CheckpointQuestionView):
    request_serializer = AttentionRequestSerializer

    def answer(self, checkpoint: Checkpoint, data: dict) -> dict:
        return services.attention(checkpoint=checkpoint, text=data["text"], target=data.get("target"),
                                  stack=data.get("stack"), layer=data.get("layer"))


@extend_schema(request=PermutationRequestSerializer,
               responses={200: PermutationResponseSerializer, 400: ERROR, 404: ERROR},
               summary="XLNet: fill in chosen positions by permutation, in the order given",
               description="The chosen positions are the last of a factorisation order (every other token "
                           "first); each step's query stream sees the context and the positions before it "
                           "(filled with the model's choice), and reports its top tokens. Without `order`, the "
                           "text's tokens only.")
class PermutationView(CheckpointQuestionView):
    request_serializer = PermutationRequestSerializer

    def answer(self, checkpoint: Checkpoint, data: dict) -> dict:
        if not data.get("order"):
            return services.permutation_tokens(checkpoint=checkpoint, text=data["text"])
        return services.permutation_fill(checkpoint=checkpoint, text=data["text"], order=data["order"],
                                         top_k=data["top_k"])


@extend_schema(request=WordSimilarityRequestSerializer,
               responses={200: WordSimilarityResponseSerializer, 400: ERROR, 404: ERROR},
               summary="ELMo: one word in two sentences, the cosine of its vectors per layer",
               description="Layer 0 (the token representation) is the same in every context; the biLSTM "
                           "layers tell the word's senses apart (the seeds' 苹果: fruit vs phone).")
class WordSimilarityView(CheckpointQuestionView):
    request_serializer = WordSimilarityRequestSerializer

    def answer(self, checkpoint: Checkpoint, data: dict) -> dict:
        return services.word_similarity(checkpoint=checkpoint, sentence_a=data["sentence_a"],
                                        sentence_b=data["sentence_b"], word=data["word"])


@extend_schema(request=ClassifyRequestSerializer, responses={200: ClassifyResponseSerializer, 400: ERROR, 404: ERROR},
               summary="A fine-tuned sequence classifier's label probabilities (or value) for a text or a pair")
class ClassifyView(CheckpointQuestionView):
    request_serializer = ClassifyRequestSerializer

    def answer(self, checkpoint: Checkpoint, data: dict) -> dict:
        return services.classify(checkpoint=checkpoint, text=data["text"], text_b=data.get("text_b", ""))


@extend_schema(request=ChooseRequestSerializer, responses={200: ChooseResponseSerializer, 400: ERROR, 404: ERROR},
               summary="A GPT-1 multiple-choice model's probability for each choice after the context",
               description="One pass per choice (start context delimiter choice extract) and a softmax over the "
                           "choices' scores, as the run fine-tuned it.")
class ChooseView(CheckpointQuestionView):
    request_serializer = ChooseRequestSerializer

    def answer(self, checkpoint: Checkpoint, data: dict) -> dict:
        return services.choose(checkpoint=checkpoint, context=data["context"], choices=data["choices"])


@extend_schema(request=TagRequestSerializer, responses={200: TagResponseSerializer, 400: ERROR, 404: ERROR},
               summary="A fine-tuned token classifier's tag per word and the entities in the text")
class TagView(CheckpointQuestionView):
    request_serializer = TagRequestSerializer

    def answer(self, checkpoint: Checkpoint, data: dict) -> dict:
        return services.tag(checkpoint=checkpoint, text=data["text"])


@extend_schema(request=AnswerRequestSerializer, responses={200: AnswerResponseSerializer, 400: ERROR, 404: ERROR},
               summary="A fine-tuned extractive QA model's answer span in the context, with the n best")
class AnswerView(CheckpointQuestionView):
    request_serializer = AnswerRequestSerializer

    def answer(self, checkpoint: Checkpoint, data: dict) -> dict:
        return services.answer(checkpoint=checkpoint, question=data["question"], context=data["context"],
                               n_best=data["n_best"])


@extend_schema(request=EmbedRequestSerializer, responses={200: EmbedResponseSerializer, 400: ERROR, 404: ERROR},
               summary="Sentence embeddings of any encoder checkpoint and their cosine similarities")
class EmbedView(CheckpointQuestionView):
    request_serializer = EmbedRequestSerializer

    def answer(self, checkpoint: Checkpoint, data: dict) -> dict:
        return services.embed(checkpoint=checkpoint, sentences=data["sentences"], pooling=data["pooling"])


class NeighbourIndexView(APIView):
    @extend_schema(request=NeighbourIndexRequestSerializer,
                   responses={200: NeighbourIndexSerializer, 202: NeighbourIndexSerializer, 400: ERROR, 404: ERROR},
                   summary="Embed a dataset's texts for nearest-neighbour search (a job, cached)",
                   description="Embeds up to NEIGHBOURS_MAX_TEXTS (2,000 by default) texts of one of your ready "
                               "labelled datasets with an encoder checkpoint and a pooling, as a job on the short-jobs "
                               "queue. The embeddings are kept per (checkpoint, dataset, pooling): asking again "
                               "answers 200 with the ready index, or 202 with the one in progress (follow it with GET "
                               "/api/explore/neighbours/index/<id>/); a failed or lost one is built again (202).")
    def post(self, request: Request) -> Response:
        ser = NeighbourIndexRequestSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        data = ser.validated_data
        ckpt = owned_checkpoint(request, data["checkpoint"])
        dataset = _owned(dataset_get, request.user, data["dataset"])
        index = neighbours.index_start(owner=request.user, checkpoint=ckpt, dataset=dataset, pooling=data["pooling"])
        index.refresh_from_db()
        return Response(NeighbourIndexSerializer(index).data,
                        status=status.HTTP_202_ACCEPTED if index.in_flight else status.HTTP_200_OK)


class NeighbourIndexDetailView(APIView):
    @extend_schema(responses={200: NeighbourIndexSerializer, 404: ERROR},
                   summary="Where the embedding of a dataset stands (status, progress, error)")
    def get(self, request: Request, pk) -> Response:
        return Response(NeighbourIndexSerializer(_owned(neighbours.index_get, request.user, pk)).data)


@extend_schema(request=NeighboursRequestSerializer,
               responses={200: NeighboursResponseSerializer, 400: ERROR, 404: ERROR},
               summary="The k texts of a dataset nearest a query sentence (cosine of sentence embeddings)",
               description="Searches the dataset's embeddings under the checkpoint and pooling (POST "
                           "/api/explore/neighbours/index/ makes them); a dataset not embedded yet, or still being "
                           "embedded, answers 400 with a sentence saying so. Each neighbour comes with its label "
                           "when the dataset has one per text.")
class NeighboursView(CheckpointQuestionView):
    request_serializer = NeighboursRequestSerializer

    def answer(self, checkpoint: Checkpoint, data: dict) -> dict:
        dataset = _owned(dataset_get, self.request.user, data["dataset"])
        return neighbours.search(checkpoint=checkpoint, dataset=dataset, pooling=data["pooling"], text=data["text"],
                                 k=data["k"])


@extend_schema(request=NextSentenceRequestSerializer,
               responses={200: NextSentenceResponseSerializer, 400: ERROR, 404: ERROR},
               summary="Probability that sentence B follows sentence A")
class NextSentenceView(CheckpointQuestionView):
    request_serializer = NextSentenceRequestSerializer

    def answer(self, checkpoint: Checkpoint, data: dict) -> dict:
        return services.next_sentence(checkpoint=checkpoint, text_a=data["text_a"], text_b=data["text_b"])


@extend_schema(request=SentenceOrderRequestSerializer,
               responses={200: SentenceOrderResponseSerializer, 400: ERROR, 404: ERROR},
               summary="Score a sentence pair in both orders (A then B, B then A)",
               description="With a sentence-order (SOP) head the scores are P(in order); a model with "
                           "only a next-sentence (NSP) head answers P(IsNext) for each order (head says which).")
class SentenceOrderView(CheckpointQuestionView):
    request_serializer = SentenceOrderRequestSerializer

    def answer(self, checkpoint: Checkpoint, data: dict) -> dict:
        return services.sentence_order(checkpoint=checkpoint, text_a=data["text_a"], text_b=data["text_b"])


class CompareView(APIView):
    @extend_schema(request=CompareRequestSerializer,
                   responses={200: CompareResponseSerializer, 400: ERROR, 404: ERROR},
                   summary="Ask two checkpoints the same question, side by side",
                   description="One result per checkpoint, in the order given. A checkpoint that cannot answer "
                               "(e.g. no next-sentence head) gets an error sentence in its column; when every "
                               "checkpoint refuses for the same reason, the answer is a 400 with that sentence.")
    def post(self, request: Request) -> Response:
        ser = CompareRequestSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        data = ser.validated_data
        checkpoints = [owned_checkpoint(request, pk) for pk in data["checkpoints"]]
        results = services.compare(checkpoints=checkpoints, task=data["task"], inputs=data["inputs"])
        return Response({"task": data["task"], "results": results})


class InspectView(APIView):
    @extend_schema(request=InspectRequestSerializer,
                   responses={200: InspectResponseSerializer, 400: ERROR, 404: ERROR},
                   summary="A real masked batch of one of your runs, token by token",
                   description="Built by the run's own collator (objectives and masking options), so every "
                               "token shows what training does to it: masked, random, kept, special or none.")
    def post(self, request: Request) -> Response:
        ser = InspectRequestSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        run = _owned(selectors.run_get, request.user, ser.validated_data["run"])
        return Response(services.inspect_run(run=run, seed=ser.validated_data["seed"],
                                             n_examples=ser.validated_data["n_examples"]))


class ImportListView(APIView):
    parser_classes = [MultiPartParser, FormParser]

    @extend_schema(responses={200: ModelImportSerializer(many=True)}, summary="Your Hugging Face model imports")
    def get(self, request: Request) -> Response:
        return Response(ModelImportSerializer(imports.imports_for(request.user), many=True).data)

    @extend_schema(request={"multipart/form-data": ModelImportCreateSerializer},
                   responses={201: ModelImportSerializer, 400: ERROR},
                   summary="Import a Hugging Face model from an archive",
                   description="Upload a .zip or .tar.gz of a save_pretrained() folder: config.json, "
                               "model.safetensors or pytorch_model.bin, tokenizer.json or vocab.txt. The import "
                               "becomes a checkpoint (status ready, checkpoint set) or fails with a sentence in error.")
    def post(self, request: Request) -> Response:
        ser = ModelImportCreateSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        upload = ser.validated_data["file"]
        try:
            job = imports.import_create(owner=request.user, name=ser.validated_data.get("name", ""),
                                        uploaded_file=upload, original_filename=upload.name)
        except DjangoValidationError as e:
            raise exceptions.ValidationError({"file": e.messages}) from None
        return Response(ModelImportSerializer(job).data, status=status.HTTP_201_CREATED)


class ImportDetailView(APIView):
    @extend_schema(responses={200: ModelImportSerializer, 404: ERROR}, summary="One of your imports")
    def get(self, request: Request, pk) -> Response:
        return Response(ModelImportSerializer(_owned(imports.import_get, request.user, pk)).data)
