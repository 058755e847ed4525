"""T5 (Raffel et al. 2020): an encoder-decoder that maps text to text, pre-trained with one
denoising objective per run (span corruption by default; the T5 study's and BART's others).

Inputs are "text EOS" (as trainer.objectives.denoising lays out the encoder's side); the decoder
starts from the pad id. The explorer shows three attention stacks (the encoder's, the decoder's
causal self-attention and its cross-attention over the encoder's tokens), generates text and
fills sentinel spans."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainer.families import activations
from trainer.families.base import Family, GenerationPrompt, ModelField

# T5's objectives, one per run (trainer.objectives.denoising): span corruption and the T5 study's
# and BART's alternatives. GPT and ELMo refuse them by these names.
SEQ2SEQ_OBJECTIVES = ("span_corruption", "prefix_lm", "t5_mlm", "deshuffle", "drop_tokens", "text_infilling",
                      "sentence_permutation")

if TYPE_CHECKING:
    from trainer.inference.loading import Loaded

# A decoder layer keeps 1.5 encoder blocks' activations: self-attention, cross-attention, FFN.
DECODER_BLOCKS = 1.5


class T5Family(Family):
    def seq_len_help(self) -> str:
        """seq_len is the encoder's input; the span-corruption target's length follows from it
        (trainer.objectives.denoising.span_corruption_lengths)."""
        from trainer.objectives.denoising import span_corruption_lengths

        pairs = ", ".join(f"{n} → {span_corruption_lengths(n)[1]}" for n in (64, 128, 256, 512))
        return (f"T5: the encoder's input length. Span corruption's decoder targets follow from it at "
                f"mask probability 0.15 ({pairs} tokens); the other objectives' targets are at most seq_len. "
                f"Tokens per second count encoder and decoder tokens.")

    def activation_bytes(self, model_cfg: Any, batch: Any) -> int:
        """The encoder's layers and the decoder's, each decoder layer 1.5 blocks (its cross-attention)."""
        decoder = int(getattr(model_cfg, "num_decoder_layers", None) or model_cfg.num_layers)
        layers = model_cfg.num_layers + DECODER_BLOCKS * decoder
        return activations.transformer_activation_bytes(model_cfg, batch, layers=layers)

    def prompt_ids(self, tokenizer: Any, text: str) -> list[int]:
        """"text EOS" (EOS is the tokenizer's separator)."""
        return tokenizer.tok.encode(text, add_special_tokens=False).ids + [tokenizer.sep_id]

    def generation_prompt(self, loaded: "Loaded", text: str, max_new_tokens: int) -> GenerationPrompt:
        ids = self.prompt_ids(loaded.tokenizer, text)
        loaded.check_input(len(ids))
        return GenerationPrompt(ids, 1, max_new_tokens)  # the output starts with the decoder start token

    def attention_stack(self, module_name: str, module: Any) -> str:
        if getattr(module, "cross", False):
            return "cross"
        return "decoder" if module_name.startswith("decoder.") else "encoder"

    def attention_forward(self, model: Any, input_ids: Any, decoder_ids: list[int]) -> None:
        import torch

        state, _ = model.start_generation(input_ids, None)  # runs the encoder
        if decoder_ids:
            model.generation_step(state, torch.tensor([decoder_ids]))


FAMILY = T5Family(
    name="t5",
    label="T5",
    preset_table="models_lib.families.t5:T5_PRESETS",
    config_class="models_lib.families.t5:T5Config",
    model_class="models_lib.families.t5:T5ForConditionalGeneration",
    flops_formula="trainer.training.flops:t5_flops",
    objectives=SEQ2SEQ_OBJECTIVES,
    required_objectives=(),
    default_objectives=("span_corruption",),
    one_objective=True,
    # SentencePiece (Unigram) with 100 sentinels, as T5; span corruption checks the sentinels
    # (trainer.catalog.validation.validate_tokenizer), the other objectives need none.
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
    hf_model_types=("t5",),
    hf_token_types=False,
    hf_objective="span_corruption",
    # T5's tokenizer has no begin-of-text token (its inputs end with </s>) and no mask token (its
    # sentinels mark gaps instead).
    hf_tokenizer_roles={"pad": ("<pad>",), "unk": ("<unk>",), "cls": ("</s>",), "sep": ("</s>",),
                        "mask": ("<unk>",)},
    explorer_kind="t5",
    cls_sep_inputs=False,
    not_masked_lm="T5 is an encoder-decoder that writes text",
    attention_stacks=("encoder", "decoder", "cross"),
    attention_reads_target=True,
    generates=True,
    fills_spans=True,
    explorer_about="T5: text-to-text with task prefixes, span filling, attention of its three stacks.",
    explorer_about_tuned="",
    sentence_vectors=False,
)
