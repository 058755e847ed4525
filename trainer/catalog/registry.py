"""The one table of what can be trained: architectures, their presets and objectives.

Adding a family (T5, GPT, ...) means adding an `ArchitectureSpec` row (and its objectives to
`OBJECTIVES`); `validate()` and the launch form (`as_json()`) read everything from the table.
Presets come from models_lib's own preset registry, loaded lazily so that importing this
module does not import torch.

The encoder family (SPEC.md, "Encoder family"): BERT, RoBERTa, ALBERT, SpanBERT, ELECTRA,
DistilBERT and UniLM. Per family the table says which tokenizer algorithm it reads, which
objectives it trains (and which it must), which masking units and packings make sense, its
optimizer defaults from the paper, and the extra settings the form shows: RunConfig fields
only that family uses (`config_fields`) and models_lib config fields it exposes
(`model_fields`, written to model_overrides).

Encoder-decoder and decoder-only (SPEC.md, "Encoder-decoder and decoder-only"): T5 (one
denoising objective per run: span corruption by default, or the T5 study's and BART's
alternatives), GPT (causal LM on packed sequences, byte-level BPE) and ELMo (forward and
backward LSTM language models). They mask no tokens the MLM way and read the corpus as a
stream of fixed-length pieces, so masking units and packings do not apply to them
(`hidden_fields` tells the form which settings to hide); T5's default optimizer is
Adafactor with the inverse-square-root schedule.
"""
from __future__ import annotations

import importlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer.errors import ConfigError

if TYPE_CHECKING:
    from trainer.config import RunConfig


@dataclass(frozen=True)
class ObjectiveSpec:
    """A pre-training objective as the form shows it; its collator lives in trainer.objectives.examples."""

    name: str
    label: str
    help: str
    metrics: tuple[str, ...]  # the metric keys it adds
    needs_sentinels: bool = False  # reads T5's sentinel tokens (<extra_id_0>, ...) from the tokenizer


@dataclass(frozen=True)
class ModelField:
    """A models_lib config field the launch form shows for one family; its value goes to
    model_overrides (its default is the preset's own value)."""

    name: str
    label: str
    help: str
    choices: tuple[str, ...] = ()
    choice_labels: tuple[str, ...] = ()
    bounds: tuple[float, float] | None = None
    boolean: bool = False  # a yes/no setting (ELMo's char_cnn)

    def check(self, value: Any, label: str) -> None:
        if self.boolean and not isinstance(value, bool):
            raise ConfigError(f"{self.name} must be true or false for {label}, not {value!r}.")
        if self.choices and value not in self.choices:
            raise ConfigError(f"{self.name} must be one of {', '.join(repr(c) for c in self.choices)} for {label}, "
                              f"not {value!r}.")
        if self.bounds is not None:
            lo, hi = self.bounds
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
                raise ConfigError(f"{self.name} must be between {lo:g} and {hi:g} for {label}, not {value!r}.")

    def as_json(self, default: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "label": self.label, "help": self.help, "default": default}
        if self.boolean:
            out["type"] = "bool"
        if self.choices:
            out["choices"] = [[c, lab] for c, lab in zip(self.choices, self.choice_labels or self.choices)]
        if self.bounds is not None:
            out["min"], out["max"] = self.bounds
        return out


@dataclass(frozen=True)
class ArchitectureSpec:
    """One trainable family. `presets` are read from `preset_table` ("module:NAME") on demand."""

    name: str
    label: str
    family: str                        # models_lib family written to model_config.json
    preset_table: str                  # "models_lib.families.presets:BERT_PRESETS"
    config_class: str                  # "models_lib.core.config:EncoderConfig" (has .from_preset)
    model_class: str                   # "models_lib.families.bert:BertForPreTraining"
    objectives: tuple[str, ...]        # compatible objectives
    required_objectives: tuple[str, ...]
    default_objectives: tuple[str, ...]
    tokenizer_algorithms: tuple[str, ...]   # the first is the one to train for it
    masking_units: tuple[str, ...] = ("token", "word", "phrase", "ngram")  # the first is the default
    packings: tuple[str, ...] = ("full-sentences", "doc-sentences")
    optimizer_defaults: dict[str, Any] = field(default_factory=dict)
    default_preset: str = ""
    config_fields: tuple[str, ...] = ()       # RunConfig fields only this family uses
    model_fields: tuple[ModelField, ...] = ()  # models_lib fields the form shows (model_overrides)
    refusals: dict[str, str] = field(default_factory=dict)  # objective -> why this family does not train it
    about: str = ""                    # one line for the form
    one_objective: bool = False        # exactly one of `objectives` per run (T5's denoising objectives)
    # models_lib config field -> the tokenizer's special id it takes ("pad", "eos"; SpecialIds names)
    token_fields: dict[str, str] = field(default_factory=lambda: {"pad_token_id": "pad"})
    hidden_fields: tuple[str, ...] = ()  # RunConfig fields that do nothing for this family (the form hides them)

    @property
    def presets(self) -> list[str]:
        return list(_load(self.preset_table))

    @property
    def default_masking_unit(self) -> str:
        """The first masking unit; "token" (a placeholder the collators ignore) for families
        that mask nothing the MLM way."""
        return self.masking_units[0] if self.masking_units else "token"

    def preset_config(self, preset: str, **overrides: Any) -> Any:
        """The models_lib config object for a preset (vocab_size etc. as overrides)."""
        return _load(self.config_class).from_preset(preset, **overrides)

    def build_model(self, model_cfg: Any) -> Any:
        """A freshly initialised pre-training model (an nn.Module) for a models_lib config."""
        return _load(self.model_class)(model_cfg)

    def allowed_objective_sets(self) -> list[list[str]]:
        """Every objective set we accept: the required ones plus any of the optional ones (for a
        one-objective family: each objective alone)."""
        if self.one_objective:
            return [[o] for o in self.objectives]
        optional = [o for o in self.objectives if o not in self.required_objectives]
        sets = []
        for mask in range(1 << len(optional)):
            extra = [o for i, o in enumerate(optional) if mask >> i & 1]
            sets.append(list(self.required_objectives) + extra)
        return sets


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

_WORDS = ("token", "word", "phrase", "ngram")  # units any MLM-style objective takes ("span" needs SBO)
_BERT_ADAM = {"lr": 1e-4, "betas": [0.9, 0.999], "eps": 1e-6, "weight_decay": 0.01, "schedule": "linear"}


def _presets(family: str) -> str:
    return f"models_lib.families.presets:{family.upper()}_PRESETS"


ARCHITECTURES: dict[str, ArchitectureSpec] = {
    "bert": ArchitectureSpec(
        name="bert",
        label="BERT",
        family="bert",
        preset_table="models_lib.families.bert:BERT_PRESETS",
        config_class="models_lib.families.bert:BertConfig",
        model_class="models_lib.families.bert:BertForPreTraining",
        objectives=("mlm", "nsp"),
        required_objectives=("mlm",),
        default_objectives=("mlm", "nsp"),
        tokenizer_algorithms=("wordpiece",),
        masking_units=_WORDS,
        # BERT paper: Adam lr 1e-4, b1 0.9, b2 0.999, wd 0.01, warm-up then linear decay.
        optimizer_defaults=dict(_BERT_ADAM),
        default_preset="bert-tiny",
        about="Post-LN encoder with segment embeddings; MLM, optionally with next sentence prediction.",
    ),
    "roberta": ArchitectureSpec(
        name="roberta",
        label="RoBERTa",
        family="roberta",
        preset_table=_presets("roberta"),
        config_class="models_lib.core.config:EncoderConfig",
        model_class="models_lib.families.roberta:RobertaForPreTraining",
        objectives=("mlm",),
        required_objectives=("mlm",),
        default_objectives=("mlm",),
        tokenizer_algorithms=("bpe",),
        masking_units=_WORDS,
        # Liu et al. 2019: Adam b2 0.98 (stabler with large batches), eps 1e-6, wd 0.01; lr 6e-4 (base).
        optimizer_defaults={"lr": 6e-4, "betas": [0.9, 0.98], "eps": 1e-6, "weight_decay": 0.01,
                            "schedule": "linear"},
        default_preset="roberta-tiny",
        refusals={"nsp": "RoBERTa is trained without next sentence prediction (NSP): Liu et al. found that "
                         "dropping it does not hurt. Train MLM only."},
        about="BERT's encoder with a byte-level BPE vocabulary, dynamic masking, packed full-length "
              "inputs and no NSP.",
    ),
    "albert": ArchitectureSpec(
        name="albert",
        label="ALBERT",
        family="albert",
        preset_table=_presets("albert"),
        config_class="models_lib.core.config:EncoderConfig",
        model_class="models_lib.families.albert:AlbertForPreTraining",
        objectives=("mlm", "sop"),
        required_objectives=("mlm",),
        default_objectives=("mlm", "sop"),
        tokenizer_algorithms=("unigram",),
        masking_units=("ngram", "token", "word", "phrase"),
        optimizer_defaults=dict(_BERT_ADAM),  # ALBERT used LAMB (lr 0.00176); AdamW here
        default_preset="albert-tiny",
        model_fields=(
            ModelField("share_layers", "Cross-layer sharing",
                       "Which weights the layers share: all of them (ALBERT's default), only the attention, "
                       "only the feed-forward network, or none.",
                       choices=("all", "attention", "ffn", "none"),
                       choice_labels=("All layers", "Attention only", "Feed-forward only", "None")),
        ),
        refusals={"nsp": "ALBERT replaces next sentence prediction (NSP) with sentence order prediction "
                         "(SOP); choose SOP."},
        about="Factorised embeddings (vocab x E, then E -> H) and layers that share weights; MLM with "
              "n-gram masking plus sentence order prediction.",
    ),
    "spanbert": ArchitectureSpec(
        name="spanbert",
        label="SpanBERT",
        family="spanbert",
        preset_table=_presets("spanbert"),
        config_class="models_lib.core.config:EncoderConfig",
        model_class="models_lib.families.spanbert:SpanBertForPreTraining",
        objectives=("mlm", "sbo"),
        required_objectives=("mlm", "sbo"),
        default_objectives=("mlm", "sbo"),
        tokenizer_algorithms=("wordpiece",),
        masking_units=("span",),
        optimizer_defaults=dict(_BERT_ADAM),
        default_preset="spanbert-tiny",
        refusals={"nsp": "SpanBERT trains on single segments without next sentence prediction (NSP)."},
        about="BERT's encoder trained on single segments with span masking and the span boundary objective.",
    ),
    "electra": ArchitectureSpec(
        name="electra",
        label="ELECTRA",
        family="electra",
        preset_table=_presets("electra"),
        config_class="models_lib.core.config:EncoderConfig",
        model_class="models_lib.families.electra:ElectraForPreTraining",
        objectives=("mlm", "rtd"),
        required_objectives=("mlm", "rtd"),
        default_objectives=("mlm", "rtd"),
        tokenizer_algorithms=("wordpiece",),
        masking_units=_WORDS,
        # Clark et al. 2020: Adam lr 5e-4 (small), eps 1e-6, wd 0.01, linear decay.
        optimizer_defaults={"lr": 5e-4, "betas": [0.9, 0.999], "eps": 1e-6, "weight_decay": 0.01,
                            "schedule": "linear"},
        default_preset="electra-tiny",
        config_fields=("rtd_weight",),
        model_fields=(
            ModelField("generator_size", "Generator size",
                       "The generator's width as a fraction of the discriminator's (ELECTRA: 1/4 to 1/2; "
                       "hidden size, FFN and heads scale, depth stays).",
                       bounds=(0.25, 0.5)),
        ),
        refusals={"nsp": "ELECTRA's discriminator is trained on single segments without next sentence "
                         "prediction (NSP)."},
        about="A small generator fills the masks, a discriminator spots replaced tokens; only the "
              "discriminator is kept for fine-tuning.",
    ),
    "distilbert": ArchitectureSpec(
        name="distilbert",
        label="DistilBERT",
        family="distilbert",
        preset_table=_presets("distilbert"),
        config_class="models_lib.core.config:EncoderConfig",
        model_class="models_lib.families.distilbert:DistilBertForPreTraining",
        objectives=("mlm", "distill"),
        required_objectives=("mlm", "distill"),
        default_objectives=("mlm", "distill"),
        tokenizer_algorithms=("wordpiece",),
        masking_units=_WORDS,
        # Sanh et al. 2019: Adam lr 5e-4, eps 1e-6, warm-up then linear decay.
        optimizer_defaults={"lr": 5e-4, "betas": [0.9, 0.999], "eps": 1e-6, "weight_decay": 0.01,
                            "schedule": "linear"},
        default_preset="distilbert-tiny",
        config_fields=("teacher_checkpoint", "distill_temperature", "distill_soft_weight", "distill_mlm_weight",
                       "distill_cos_weight"),
        refusals={"nsp": "DistilBERT drops token types and the pooler, so it has no next sentence "
                         "prediction (NSP)."},
        about="A student with half a trained BERT teacher's layers, distilled from its soft predictions "
              "and hidden states.",
    ),
    "unilm": ArchitectureSpec(
        name="unilm",
        label="UniLM",
        family="unilm",
        preset_table=_presets("unilm"),
        config_class="models_lib.core.config:EncoderConfig",
        model_class="models_lib.families.unilm:UniLMForPreTraining",
        objectives=("mlm", "unilm"),
        required_objectives=("mlm", "unilm"),
        default_objectives=("mlm", "unilm"),
        tokenizer_algorithms=("wordpiece",),
        masking_units=_WORDS,
        optimizer_defaults=dict(_BERT_ADAM),
        default_preset="unilm-tiny",
        refusals={"nsp": "UniLM here trains its four attention modes without next sentence prediction (NSP)."},
        about="BERT's encoder trained with bidirectional, left-to-right, right-to-left and seq2seq attention "
              "masks, so it can also generate text.",
    ),
    "t5": ArchitectureSpec(
        name="t5",
        label="T5",
        family="t5",
        preset_table="models_lib.families.t5:T5_PRESETS",
        config_class="models_lib.families.t5:T5Config",
        model_class="models_lib.families.t5:T5ForConditionalGeneration",
        objectives=SEQ2SEQ_OBJECTIVES,
        required_objectives=(),
        default_objectives=("span_corruption",),
        one_objective=True,
        # SentencePiece (Unigram) with 100 sentinels, as T5; span corruption checks the sentinels
        # (validate_tokenizer), the other objectives need none.
        tokenizer_algorithms=("unigram",),
        masking_units=(),
        packings=("full-sentences",),
        # Raffel et al. 2020: Adafactor, lr = 1/sqrt(max(step, 10^4)), i.e. 0.01 for the first 10^4
        # steps, then inverse-square-root decay; no weight decay. warmup_steps is the constant phase.
        optimizer_defaults={"optimizer": "adafactor", "lr": 0.01, "weight_decay": 0.0, "schedule": "inverse_sqrt"},
        default_preset="t5-tiny",
        token_fields={"pad_token_id": "pad", "eos_token_id": "eos", "decoder_start_token_id": "pad"},
        hidden_fields=("masking_unit", "packing"),
        model_fields=(
            ModelField("version", "T5 version",
                       "v1.0: ReLU feed-forward, input and output embeddings tied (decoder output scaled by "
                       "d_model^-0.5); v1.1: gated-GELU feed-forward, untied output layer.",
                       choices=("1.0", "1.1"),
                       choice_labels=("v1.0 (ReLU, tied embeddings)", "v1.1 (gated-GELU, untied)")),
        ),
        refusals={
            "mlm": "T5 is an encoder-decoder: its BERT-style objective has the decoder write the whole original "
                   "text; choose \"BERT-style MLM, encoder-decoder (T5 study)\" (t5_mlm) instead of mlm.",
            "nsp": "T5 treats every task as text to text and is pre-trained without next sentence prediction "
                   "(NSP); choose one denoising objective such as span corruption.",
            "clm": "T5 is an encoder-decoder: for left-to-right generation after a prefix choose the prefix LM "
                   "objective, or train GPT for a causal language model.",
            "bilm": "The bidirectional LM (biLM) is ELMo's; choose ELMo, or one of T5's denoising objectives.",
        },
        about="Encoder-decoder transformer (pre-norm RMSNorm, relative position buckets, no biases) that maps "
              "text to text; pre-trained by span corruption or another denoising objective.",
    ),
    "gpt": ArchitectureSpec(
        name="gpt",
        label="GPT",
        family="gpt",
        preset_table="models_lib.families.gpt:GPT_PRESETS",
        config_class="models_lib.families.gpt:GPTConfig",
        model_class="models_lib.families.gpt:GPTLMHeadModel",
        objectives=("clm",),
        required_objectives=("clm",),
        default_objectives=("clm",),
        tokenizer_algorithms=("bpe",),  # GPT-2's byte-level BPE
        masking_units=(),
        packings=("full-sentences",),
        # GPT-2's paper gives no optimizer settings; these are GPT-3 Small's (Brown et al. 2020,
        # table 2.1 and appendix B: the GPT-2-small shape): Adam lr 6e-4, b2 0.95, eps 1e-8,
        # weight decay 0.1, cosine decay (GPT-1: lr 2.5e-4, also cosine).
        optimizer_defaults={"optimizer": "adamw", "lr": 6e-4, "betas": [0.9, 0.95], "eps": 1e-8,
                            "weight_decay": 0.1, "schedule": "cosine"},
        default_preset="gpt-tiny",
        token_fields={"pad_token_id": "pad", "eos_token_id": "eos"},
        hidden_fields=("masking", "mask_prob", "masking_unit", "packing"),
        model_fields=(
            ModelField("norm_placement", "LayerNorm placement",
                       "Pre-LN (GPT-2): LayerNorm at the input of each sublayer plus a final one; Post-LN "
                       "(GPT-1): LayerNorm after each residual addition.",
                       choices=("pre", "post"), choice_labels=("Pre-LN (GPT-2)", "Post-LN (GPT-1)")),
        ),
        refusals={
            "nsp": "GPT is a decoder-only causal language model: it reads left to right and predicts the next "
                   "token, with no [CLS] classifier for next sentence prediction (NSP); train the causal LM "
                   "objective (clm).",
            "mlm": "GPT's causal mask hides every later token, so it cannot fill in masked tokens from both sides "
                   "(MLM); train the causal LM objective (clm), or choose BERT.",
            "bilm": "The bidirectional LM (biLM) is ELMo's; GPT trains the forward, causal LM objective (clm).",
            **{o: "GPT is decoder-only; the denoising objectives need an encoder and a decoder: choose T5, or the "
                  "causal LM objective (clm) for GPT." for o in SEQ2SEQ_OBJECTIVES},
        },
        about="Decoder-only transformer with a causal mask and learned positions (GPT-2: pre-LN); predicts the "
              "next token on packed sequences.",
    ),
    "elmo": ArchitectureSpec(
        name="elmo",
        label="ELMo",
        family="elmo",
        preset_table="models_lib.families.elmo:ELMO_PRESETS",
        config_class="models_lib.families.elmo:ElmoConfig",
        model_class="models_lib.families.elmo:ElmoLanguageModel",
        objectives=("bilm",),
        required_objectives=("bilm",),
        default_objectives=("bilm",),
        tokenizer_algorithms=("wordpiece", "bpe", "unigram"),  # any subword vocabulary
        masking_units=(),
        packings=("full-sentences",),
        # Peters et al. trained with Adagrad (lr 0.2), which this app does not offer; Adam at its
        # usual lr 1e-3 without weight decay trains the small LSTMs well, at a constant rate.
        optimizer_defaults={"optimizer": "adamw", "lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8,
                            "weight_decay": 0.0, "schedule": "constant"},
        default_preset="elmo-tiny",
        hidden_fields=("masking", "mask_prob", "masking_unit", "packing"),
        model_fields=(
            ModelField("char_cnn", "Character CNN",
                       "Build each token's representation from its characters (ELMo's character CNN with "
                       "highway layers) instead of an embedding table.",
                       boolean=True),
        ),
        refusals={
            "mlm": "ELMo's LSTMs each read in one direction, so they cannot fill in masked tokens (MLM); its "
                   "objective is the forward + backward language model (biLM).",
            "nsp": "ELMo has no sentence-pair classifier for next sentence prediction (NSP); its objective is the "
                   "forward + backward language model (biLM).",
            "clm": "ELMo trains a forward and a backward LM together: choose the biLM objective (or GPT for a "
                   "forward-only causal LM).",
            **{o: "ELMo is a pair of LSTM language models without a decoder; the denoising objectives are T5's. "
                  "Choose the biLM objective." for o in SEQ2SEQ_OBJECTIVES},
        },
        about="A forward and a backward 2-layer LSTM language model sharing the token representation "
              "(embeddings or a character CNN) and the softmax; their layers become contextual features.",
    ),
}

# The teacher families DistilBERT distils (models_lib.families.distilbert.distil_from_teacher).
TEACHER_FAMILIES = ("bert",)
# Fields of the student that follow from the teacher (the rest come from the preset).
STUDENT_SHAPE = ("num_layers", "hidden_size", "num_heads", "intermediate_size", "max_position_embeddings")


def get(architecture: str) -> ArchitectureSpec:
    try:
        return ARCHITECTURES[architecture]
    except KeyError:
        known = ", ".join(repr(a) for a in ARCHITECTURES)
        raise ConfigError(f"Unknown architecture {architecture!r}; choose one of {known}.") from None


def validate(config: "RunConfig") -> None:
    """Raise ConfigError unless the config's architecture, preset, objectives, masking unit,
    packing, family settings and seq_len fit together. Reads no files: a DistilBERT teacher
    (a BERT checkpoint on disk that the student's shape fits) is checked by validate_teacher,
    which the engine, the CLI and the web app call before training, so that a stored config
    stays loadable after its teacher is deleted, and the web app can check that the teacher
    is the user's own before anything reads it."""
    spec = get(config.architecture)
    presets = spec.presets
    if config.preset not in presets:
        raise ConfigError(
            f"Unknown {spec.label} preset {config.preset!r}; choose one of {', '.join(presets)}."
        )
    _check_objectives(spec, config)
    _check_masking_and_packing(spec, config)
    _check_family_fields(spec, config)
    reserved = sorted(set(config.model_overrides) & {"vocab_size", "family", *spec.token_fields})
    if reserved:
        raise ConfigError(f"model_overrides cannot set {', '.join(reserved)}: "
                          f"{'the architecture sets it' if reserved == ['family'] else 'it comes from the tokenizer'}.")
    try:
        model_cfg = spec.preset_config(config.preset, vocab_size=1024, **config.model_overrides)
    except ConfigError:
        raise
    except (TypeError, ValueError, KeyError) as e:
        raise ConfigError(f"model_overrides do not fit the {config.preset} preset: {_msg(e)}") from None
    for mf in spec.model_fields:
        mf.check(getattr(model_cfg, mf.name), spec.label)
    if spec.name == "spanbert" and getattr(model_cfg, "max_span_length", 10) < 10:
        raise ConfigError("SpanBERT's spans are up to 10 words long, so max_span_length (the SBO head's position "
                          f"table) must be at least 10, not {model_cfg.max_span_length}.")
    from trainer.config import BOUNDS

    positions, cap = max_positions(model_cfg), int(BOUNDS["seq_len"][1])
    if positions >= cap:  # no position table (T5's relative buckets, ELMo's LSTMs): RunConfig's own bound
        if not 16 <= config.seq_len <= cap:
            raise ConfigError(f"seq_len must be between 16 and {cap:,} tokens, not {config.seq_len}.")
    elif not (16 <= config.seq_len <= positions):
        raise ConfigError(f"seq_len must be between 16 and the model's {positions} positions, not {config.seq_len}.")


def _check_objectives(spec: ArchitectureSpec, config: "RunConfig") -> None:
    for o in config.objectives:
        if o not in OBJECTIVES:
            raise ConfigError(f"Unknown objective {o!r}; known objectives are {', '.join(OBJECTIVES)}.")
        if o not in spec.objectives:
            raise ConfigError(spec.refusals.get(o) or f"{spec.label} cannot be trained with {OBJECTIVES[o].label}.")
    if spec.one_objective and len(config.objectives) != 1:
        raise ConfigError(f"{spec.label} trains one objective per run; choose one of "
                          f"{', '.join(spec.objectives)}, not {' + '.join(config.objectives)}.")
    missing = [o for o in spec.required_objectives if o not in config.objectives]
    if missing:
        names = " and ".join(OBJECTIVES[o].label for o in missing)
        raise ConfigError(f"{spec.label} needs the {names}{'' if 'objective' in names.lower() else ' objective'}.")
    if sorted(config.objectives) not in [sorted(s) for s in spec.allowed_objective_sets()]:
        raise ConfigError(f"{spec.label} cannot combine the objectives {', '.join(config.objectives)}.")


def _check_masking_and_packing(spec: ArchitectureSpec, config: "RunConfig") -> None:
    unit = config.masking_unit
    if not spec.masking_units:
        if unit != spec.default_masking_unit:
            raise ConfigError(f"masking_unit applies to masked-LM objectives; {spec.label} masks no words or spans "
                              f"that way, so leave it out (not {unit!r}).")
        if config.packing not in spec.packings:
            raise ConfigError(f"packing applies to the encoder family's single segments; {spec.label} reads the "
                              f"corpus as one stream cut into pieces of seq_len tokens, so leave it out "
                              f"(not {config.packing!r}).")
        return
    if unit not in spec.masking_units:
        if unit == "span":
            raise ConfigError(f"Span masking (masking_unit \"span\") belongs to SpanBERT's span boundary objective "
                              f"(SBO); choose the SpanBERT architecture, or another masking unit for {spec.label} "
                              f"({', '.join(spec.masking_units)}).")
        if spec.masking_units == ("span",):
            raise ConfigError(f"{spec.label}'s span boundary objective (SBO) needs span masking: masking_unit must be "
                              f"\"span\", not {unit!r}.")
        raise ConfigError(f"{spec.label} cannot use {unit!r} masking; choose one of {', '.join(spec.masking_units)}.")
    if config.packing not in spec.packings:
        raise ConfigError(f"{spec.label} cannot use {config.packing!r} packing; choose one of {', '.join(spec.packings)}.")
    pairs = [o for o in config.objectives if o in PAIR_OBJECTIVES]
    if config.packing == "doc-sentences" and pairs:
        label = OBJECTIVES[pairs[0]].label
        raise ConfigError(f"packing \"doc-sentences\" applies to single-segment inputs, but {label} trains on "
                          f"sentence pairs it makes itself; keep packing \"full-sentences\" or train without it.")


def _check_family_fields(spec: ArchitectureSpec, config: "RunConfig") -> None:
    """A setting of another family is refused when it differs from its default, so that nobody
    believes it had an effect. (A models_lib field another family lacks, e.g. generator_size
    for BERT, is refused by the preset's config class.)"""
    from trainer.config import field_defaults

    defaults = field_defaults()
    for other in ARCHITECTURES.values():
        if other.name == spec.name:
            continue
        for name in other.config_fields:
            if name not in spec.config_fields and getattr(config, name) != defaults[name]:
                raise ConfigError(f"{name} applies to {other.label} only; leave it out for {spec.label}.")
    if spec.name == "distilbert" and not config.teacher_checkpoint:
        raise ConfigError("DistilBERT distils a trained BERT teacher: set teacher_checkpoint to the folder of a BERT "
                          "checkpoint trained with the same tokenizer (on the web form, choose one of your BERT "
                          "checkpoints).")


def validate_teacher(config: "RunConfig") -> dict[str, Any]:
    """For a DistilBERT config: the teacher's model_config.json ({"family", "config", ...}),
    after checking that the folder exists and holds a BERT checkpoint the student's preset
    fits. ConfigError otherwise. The engine and the web app call this before training."""
    spec = get(config.architecture)
    if not config.teacher_checkpoint:
        raise ConfigError(f"{spec.label} has no teacher to check: teacher_checkpoint is empty.")
    model_cfg = spec.preset_config(config.preset, vocab_size=1024, **config.model_overrides)
    folder = Path(config.teacher_checkpoint)
    meta_path = folder / "model_config.json"
    if not meta_path.is_file() or not (folder / "model.safetensors").is_file():
        raise ConfigError(f"The teacher checkpoint {folder} does not exist or is incomplete "
                          f"(model_config.json and model.safetensors are needed).")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        teacher = dict(meta["config"])
        family = meta.get("family", "bert")
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise ConfigError(f"The teacher checkpoint {folder.name} has an unreadable model_config.json.") from None
    if family not in TEACHER_FAMILIES:
        label = ARCHITECTURES[family].label if family in ARCHITECTURES else family
        raise ConfigError(f"The teacher checkpoint {folder.name} holds a model of another family ({label}); "
                          f"DistilBERT's teacher must be a BERT checkpoint.")
    if (teacher.get("share_layers", "none") != "none" or teacher.get("norm_placement", "post") != "post"
            or teacher.get("embedding_size") is not None):
        raise ConfigError(f"The teacher checkpoint {folder.name} is a BERT with shared layers, pre-LN blocks or "
                          f"factorised embeddings; a DistilBERT student copies every other layer of a plain BERT.")
    wanted = student_overrides(teacher)
    have = {k: getattr(model_cfg, k) for k in STUDENT_SHAPE}
    if have != wanted:
        teacher_shape = f"L{teacher.get('num_layers')} H{teacher.get('hidden_size')} A{teacher.get('num_heads')}"
        differ = ", ".join(f"{k} {have[k]} (needs {wanted[k]})" for k in STUDENT_SHAPE if have[k] != wanted[k])
        raise ConfigError(f"The student must have half the teacher's layers and its width: the teacher is "
                          f"{teacher_shape}, but the {config.preset} preset with these model_overrides gives "
                          f"{differ}. Set model_overrides to {json.dumps(wanted)}.")
    return meta


def student_overrides(teacher_config: dict[str, Any]) -> dict[str, Any]:
    """The student's shape fields for a teacher's config dict: half its layers (rounded up, as
    distil_from_teacher takes layers 0, 2, 4, ...), the same width, heads and positions."""
    from models_lib.core.config import EncoderConfig  # defaults for fields an old config lacks

    base = EncoderConfig()
    value = {k: teacher_config.get(k, getattr(base, k)) for k in STUDENT_SHAPE}
    if value["intermediate_size"] is None:
        value["intermediate_size"] = 4 * value["hidden_size"]
    value["num_layers"] = math.ceil(int(value["num_layers"]) / 2)
    return value


def validate_tokenizer(config: "RunConfig", algorithm: str, meta: dict[str, Any] | None = None) -> None:
    """Raise ConfigError when a tokenizer trained with `algorithm` does not suit the architecture,
    or (given its tokenizer_meta.json as `meta`) lacks the T5 sentinel tokens the objective reads.
    The collator checks the number of sentinels against seq_len again when training starts."""
    spec = get(config.architecture)
    needs = [o for o in config.objectives if o in OBJECTIVES and OBJECTIVES[o].needs_sentinels]
    if algorithm not in spec.tokenizer_algorithms:
        raise ConfigError(f"{spec.label} needs a {' or '.join(spec.tokenizer_algorithms)} tokenizer"
                          f"{' with T5 sentinel tokens (extra_ids, 100 in T5)' if needs else ''}; "
                          f"this one is {algorithm}.")
    if meta is not None:
        if needs and int(meta.get("extra_ids", 0) or 0) < 1:
            raise ConfigError(f"{OBJECTIVES[needs[0]].label} replaces each noise span by a sentinel token "
                              f"(<extra_id_0>, <extra_id_1>, ...), and this tokenizer has none; train a "
                              f"{algorithm_label(spec.tokenizer_algorithms[0])} tokenizer with 100 sentinel tokens "
                              f"(extra_ids), as T5 does, or choose another objective.")


def algorithm_label(name: str) -> str:
    from trainer.prep.tokenization import ALGORITHMS

    return ALGORITHMS[name].label if name in ALGORITHMS else name


def max_positions(model_cfg: Any) -> int:
    """Usable positions of a models_lib config (position_offset rows are not usable)."""
    n = getattr(model_cfg, "max_positions", None)
    if n is None:
        n = getattr(model_cfg, "max_position_embeddings") - getattr(model_cfg, "position_offset", 0)
    return int(n)


def as_json() -> dict[str, Any]:
    """Everything the launch form needs: architectures (presets with sizes, objectives, masking
    units, packings, tokenizer algorithm, family settings), objectives, field defaults, bounds,
    choices and help text."""
    from trainer import config as config_mod
    from trainer.objectives.examples import PACKINGS
    from trainer.objectives.masking import MASKING_UNITS

    archs = []
    for spec in ARCHITECTURES.values():
        presets = []
        for name in spec.presets:
            cfg = spec.preset_config(name, vocab_size=1024)
            presets.append({"name": name, **_preset_size(cfg)})
        default_preset = spec.default_preset or (presets[0]["name"] if presets else "")
        default_cfg = spec.preset_config(default_preset, vocab_size=1024)
        archs.append({
            "name": spec.name,
            "label": spec.label,
            "family": spec.family,
            "about": spec.about,
            "presets": presets,
            "default_preset": default_preset,
            "objectives": list(spec.objectives),
            "required_objectives": list(spec.required_objectives),
            "default_objectives": list(spec.default_objectives),
            "allowed_objective_sets": spec.allowed_objective_sets(),
            "refusals": dict(spec.refusals),
            "tokenizer_algorithms": list(spec.tokenizer_algorithms),
            "default_tokenizer_algorithm": spec.tokenizer_algorithms[0],
            "masking_units": list(spec.masking_units),
            "default_masking_unit": spec.default_masking_unit,
            "packings": list(spec.packings),
            "optimizer_defaults": dict(spec.optimizer_defaults),
            "config_fields": list(spec.config_fields),
            "model_fields": [mf.as_json(getattr(default_cfg, mf.name)) for mf in spec.model_fields],
            "needs_teacher": "teacher_checkpoint" in spec.config_fields,
            "one_objective": spec.one_objective,
            "hidden_fields": list(spec.hidden_fields),
            "sentinel_objectives": [o for o in spec.objectives if OBJECTIVES[o].needs_sentinels],
            "seq_len_help": _seq_len_help(spec),
        })
    bounds = {k: [lo, hi] for k, (lo, hi) in config_mod.BOUNDS.items()}
    all_choices = config_mod.choices()
    return {
        "architectures": archs,
        "objectives": {o.name: {"label": o.label, "help": o.help, "metrics": list(o.metrics)}
                       for o in OBJECTIVES.values()},
        "masking_units": dict(MASKING_UNITS),
        "packings": dict(PACKINGS),
        "tokenizer_algorithms": {a: algorithm_label(a) for spec in ARCHITECTURES.values()
                                 for a in spec.tokenizer_algorithms},
        "pair_objectives": list(PAIR_OBJECTIVES),
        "fields": {
            name: {
                "default": default,
                "help": config_mod.field_help().get(name, ""),
                **({"min": bounds[name][0], "max": bounds[name][1]} if name in bounds else {}),
                **({"choices": list(all_choices[name])} if name in all_choices else {}),
            }
            for name, default in config_mod.field_defaults().items()
        },
        "dupe_factor": config_mod.DUPE_FACTOR,
    }


def _seq_len_help(spec: ArchitectureSpec) -> str:
    """What seq_len means for a family, for the form (T5: the encoder's input; the span-corruption
    target's length follows from it, trainer.objectives.denoising.span_corruption_lengths)."""
    if spec.name == "t5":
        from trainer.objectives.denoising import span_corruption_lengths

        pairs = ", ".join(f"{n} → {span_corruption_lengths(n)[1]}" for n in (64, 128, 256, 512))
        return (f"T5: the encoder's input length. Span corruption's decoder targets follow from it at "
                f"mask probability 0.15 ({pairs} tokens); the other objectives' targets are at most seq_len. "
                f"Tokens per second count encoder and decoder tokens.")
    if spec.name == "gpt":
        return "GPT: the context length of the packed sequences (at most the preset's positions)."
    if spec.name == "elmo":
        return "ELMo: tokens per packed sequence; the LSTMs have no position limit."
    return ""


def _preset_size(cfg: Any) -> dict[str, Any]:
    """Shape of a preset and its parameter count without embeddings (those depend on the vocab:
    token embeddings, output layers and softmax are left out). Shared layers count once (ALBERT);
    ELECTRA's count includes its generator."""
    family = getattr(cfg, "family", "")
    if family == "t5":
        return _t5_size(cfg)
    if family == "elmo":
        return _elmo_size(cfg)
    H = _first(cfg, "hidden_size")
    L = _first(cfg, "num_layers", "num_hidden_layers")
    A = _first(cfg, "num_heads", "num_attention_heads")
    F = _first(cfg, "intermediate_size") or 4 * H
    params = _encoder_params(cfg)
    if family == "electra":
        params += _encoder_params(cfg.generator_config())
    if family == "gpt" and getattr(cfg, "norm_placement", "pre") == "pre":
        params += 2 * H  # GPT-2's final LayerNorm
    return {
        "layers": L, "hidden": H, "heads": A, "ffn": F,
        "max_positions": _usable_positions(cfg),
        "params_without_embeddings": params,
        "label": f"L{L} H{H} A{A}",
    }


def _usable_positions(cfg: Any) -> int:
    """The longest seq_len the form may offer: the model's positions, at most RunConfig's bound."""
    from trainer.config import BOUNDS

    return min(max_positions(cfg), int(BOUNDS["seq_len"][1]))


def _t5_size(cfg: Any) -> dict[str, Any]:
    """T5: no biases; attention projections H x (heads * d_kv); gated FFN (v1.1) has two input
    matrices; RMSNorm weights only; a relative-bias table (buckets x heads) and a final norm per stack."""
    H, F, A = int(cfg.d_model), int(cfg.d_ff), int(cfg.num_heads)
    Le, Ld = int(cfg.num_layers), int(cfg.num_decoder_layers or cfg.num_layers)
    inner = A * int(cfg.d_kv)
    attention = 4 * H * inner
    ffn = (3 if getattr(cfg, "is_gated", False) else 2) * H * F
    encoder = Le * (attention + ffn + 2 * H)
    decoder = Ld * (2 * attention + ffn + 3 * H)
    stacks = 2 * (int(cfg.relative_attention_num_buckets) * A + H)
    return {
        "layers": Le, "decoder_layers": Ld, "hidden": H, "heads": A, "ffn": F,
        "max_positions": _usable_positions(cfg),
        "params_without_embeddings": encoder + decoder + stacks,
        "label": f"L{Le}+{Ld} H{H} A{A}",
    }


def _elmo_size(cfg: Any) -> dict[str, Any]:
    """ELMo: per direction and layer an LSTM with H cells projected to P (nn.LSTM with proj_size:
    9HP + 8H weights and biases; without projection when P = H), plus the character CNN when on."""
    P, H, L = int(cfg.embedding_dim), int(cfg.hidden_size), int(cfg.num_layers)
    lstm = 9 * H * P + 8 * H if P < H else 4 * H * P + 4 * H * H + 8 * H
    params = 2 * L * lstm
    if getattr(cfg, "char_cnn", False):
        E, D = int(cfg.char_embedding_dim), int(cfg.char_cnn_output_size)
        params += 260 * E + sum(w * E * n + n for w, n in cfg.char_filters)
        params += int(cfg.highway_layers) * 2 * (D * D + D) + D * P + P
    return {
        "layers": L, "hidden": H, "projection": P, "heads": 0, "ffn": 0,
        "max_positions": _usable_positions(cfg),
        "params_without_embeddings": params,
        "label": f"L{L} H{H} P{P}",
    }


def _encoder_params(cfg: Any) -> int:
    H = _first(cfg, "hidden_size")
    L = _first(cfg, "num_layers", "num_hidden_layers")
    F = _first(cfg, "intermediate_size") or 4 * H
    # per block: QKV + output projection (4 H^2 + 4H), FFN (2 H F + F + H), two LayerNorms (4H)
    attention, ffn, norms = 4 * H * H + 4 * H, 2 * H * F + F + H, 4 * H
    shared = getattr(cfg, "share_layers", "none")
    return {"all": attention + ffn + norms,
            "attention": attention + L * (ffn + norms),
            "ffn": ffn + L * (attention + norms)}.get(shared, L * (attention + ffn + norms))


def _first(obj: Any, *names: str) -> int:
    for n in names:
        v = getattr(obj, n, None)
        if v is not None:
            return int(v)
    return 0


def _load(ref: str) -> Any:
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def _msg(e: BaseException) -> str:
    return str(e.args[0]) if e.args else type(e).__name__
