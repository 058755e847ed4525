"""The pre-training objectives as the launch form shows them, and which of them read sentence
pairs or belong to T5's one-per-run denoising set.

The families (trainer.families) name the objectives they train by these keys; their collators
live in trainer.objectives.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ObjectiveSpec:
    """A pre-training objective as the form shows it; its collator lives in trainer.objectives.collators."""

    name: str
    label: str
    help: str
    metrics: tuple[str, ...]  # the metric keys it adds
    needs_sentinels: bool = False  # reads T5's sentinel tokens (<extra_id_0>, ...) from the tokenizer


# Objectives whose examples are sentence pairs (their collators build their own pairs, so
# the packing of single segments does not apply).
PAIR_OBJECTIVES = ("nsp", "sop", "unilm")
# What the language-model objectives report: the loss and accuracy over the predicted tokens
# (a seq2seq model's target tokens, a causal LM's next tokens) and, in validation, exp(lm_loss).
_SEQ_METRICS = ("lm_loss", "lm_acc", "perplexity")

OBJECTIVES: dict[str, ObjectiveSpec] = {
    "mlm": ObjectiveSpec(
        name="mlm",
        label="Masked language modelling (MLM)",
        help="15% of the tokens are chosen; of those 80% become [MASK], 10% a random token and "
             "10% stay unchanged. The model predicts the original tokens.",
        metrics=("mlm_loss", "mlm_acc", "perplexity"),
    ),
    "nsp": ObjectiveSpec(
        name="nsp",
        label="Next sentence prediction (NSP)",
        help="Inputs are pairs [CLS] A [SEP] B [SEP]; half the time B really follows A in the "
             "document, half the time it comes from another document. The model tells which.",
        metrics=("nsp_loss", "nsp_acc"),
    ),
    "sop": ObjectiveSpec(
        name="sop",
        label="Sentence order prediction (SOP)",
        help="Inputs are two consecutive segments of one document, [CLS] A [SEP] B [SEP]; half the "
             "time they are swapped. The model tells whether they are in their original order (ALBERT).",
        metrics=("sop_loss", "sop_acc"),
    ),
    "sbo": ObjectiveSpec(
        name="sbo",
        label="Span boundary objective (SBO)",
        help="Whole spans of words are masked (lengths ~ Geometric(0.2), at most 10); each span token is "
             "also predicted from the two tokens just outside the span and its place in it (SpanBERT).",
        metrics=("sbo_loss", "sbo_acc"),
    ),
    "rtd": ObjectiveSpec(
        name="rtd",
        label="Replaced token detection (RTD)",
        help="A small generator fills the masked positions with sampled tokens; the discriminator tells "
             "for every token whether it was replaced. Loss = generator MLM + rtd_weight x RTD (ELECTRA).",
        metrics=("rtd_loss", "rtd_acc", "rtd_precision", "rtd_recall"),
    ),
    "distill": ObjectiveSpec(
        name="distill",
        label="Knowledge distillation",
        help="A student with half the teacher's layers learns the teacher's soft predictions at a "
             "temperature, the true tokens (MLM) and the direction of its hidden states (DistilBERT).",
        metrics=("soft_loss", "cos_loss"),
    ),
    "unilm": ObjectiveSpec(
        name="unilm",
        label="UniLM attention modes",
        help="Each example is trained with one self-attention mask: bidirectional (1/3), seq2seq (1/3, "
             "source fully visible, target left to right), left-to-right or right-to-left (1/6 each).",
        metrics=(),
    ),
    # --- encoder-decoder (T5): one per run; the collators live in trainer.objectives.denoising
    "span_corruption": ObjectiveSpec(
        name="span_corruption",
        label="Span corruption (T5)",
        help="15% of the tokens (noise density 0.15, the run's mask probability) are corrupted in spans of mean "
             "length 3; each span becomes one sentinel token <extra_id_0>, <extra_id_1>, ... in the input, and "
             "the decoder writes each sentinel followed by the tokens it replaced. T5's default; needs a "
             "tokenizer with sentinel tokens.",
        metrics=_SEQ_METRICS,
        needs_sentinels=True,
    ),
    "prefix_lm": ObjectiveSpec(
        name="prefix_lm",
        label="Prefix LM (T5 study)",
        help="The text is split at a random point: the encoder reads the first part, the decoder writes the rest.",
        metrics=_SEQ_METRICS,
    ),
    "t5_mlm": ObjectiveSpec(
        name="t5_mlm",
        label="BERT-style MLM, encoder-decoder (T5 study)",
        help="15% of the tokens are corrupted (90% become the mask token, 10% a random token); the decoder "
             "writes the whole original text.",
        metrics=_SEQ_METRICS,
    ),
    "deshuffle": ObjectiveSpec(
        name="deshuffle",
        label="Deshuffling (T5 study)",
        help="The encoder reads the text's tokens in a random order; the decoder writes them in the original order.",
        metrics=_SEQ_METRICS,
    ),
    "drop_tokens": ObjectiveSpec(
        name="drop_tokens",
        label="Drop tokens (T5 study)",
        help="Each token is left out of the input with probability 0.15; the decoder writes the dropped tokens.",
        metrics=_SEQ_METRICS,
    ),
    "text_infilling": ObjectiveSpec(
        name="text_infilling",
        label="Text infilling (BART)",
        help="Spans with lengths ~ Poisson(3) covering 30% of the tokens are each replaced by ONE mask token "
             "(0-length spans insert one); the decoder writes the original text.",
        metrics=_SEQ_METRICS,
    ),
    "sentence_permutation": ObjectiveSpec(
        name="sentence_permutation",
        label="Sentence permutation (BART)",
        help="The sentences of a piece of one document are shuffled; the decoder writes them in the original order.",
        metrics=_SEQ_METRICS,
    ),
    # --- decoder-only and biLM; their collators live in trainer.objectives.lm
    "clm": ObjectiveSpec(
        name="clm",
        label="Causal language modelling (CLM)",
        help="Next-token prediction, left to right, on packed sequences: the corpus is read as one stream "
             "cut into pieces of seq_len tokens, documents separated by the end-of-text token.",
        metrics=_SEQ_METRICS,
    ),
    "bilm": ObjectiveSpec(
        name="bilm",
        label="Bidirectional LM (ELMo)",
        help="A forward LSTM language model predicts each next token, a backward one each previous token; "
             "they share the token representation and the softmax, and the loss is their mean.",
        metrics=("forward_loss", "backward_loss", "forward_acc", "backward_acc", "forward_perplexity",
                 "backward_perplexity", "perplexity"),
    ),
}

# The T5 family's objectives, one per run.
SEQ2SEQ_OBJECTIVES = ("span_corruption", "prefix_lm", "t5_mlm", "deshuffle", "drop_tokens", "text_infilling",
                      "sentence_permutation")
