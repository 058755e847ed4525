"""Transformer-XL (Dai et al. 2019): a causal language model over consecutive segments with a
memory of the previous segment's hidden states and relative positional encodings.

It trains on the batched streams of the `xl_lm` objective (each batch row continues the row
of the previous batch), generates like GPT (each new token reads the memory) and shows its
causal attention over the memory and the segment."""
from __future__ import annotations

from trainer.families.base import ModelField
from trainer.families.gpt import CAUSAL_ABOUT, ROLES, GPTFamily
from trainer.families.t5 import SEQ2SEQ_OBJECTIVES


class TransfoXLFamily(GPTFamily):
    def seq_len_help(self) -> str:
        return ("Transformer-XL: the segment length; each segment also attends to the memory (mem_len states of "
                "the previous segments of its stream).")


FAMILY = TransfoXLFamily(
    name="transfo_xl",
    recomputes_blocks=False,  # its relative-attention stack has no activation checkpointing yet
    label="Transformer-XL",
    about="Causal LM over consecutive segments: each layer also attends to the previous segment's hidden states "
          "(memory, no gradient), with relative positional encodings.",
    preset_table="models_lib.families.transfo_xl:TRANSFO_XL_PRESETS",
    config_class="models_lib.families.transfo_xl:TransfoXLConfig",
    model_class="models_lib.families.transfo_xl:TransfoXLLMHeadModel",
    flops_formula="trainer.training.flops:transfo_xl_flops",
    default_preset="transfo-xl-tiny",
    objectives=("xl_lm",),
    required_objectives=("xl_lm",),
    default_objectives=("xl_lm",),
    tokenizer_algorithms=("bpe", "wordpiece", "unigram"),
    masking_units=(),
    packings=("full-sentences",),
    # The paper's WikiText-103 base: Adam lr 2.5e-4, cosine decay, no weight decay.
    optimizer_defaults={"optimizer": "adamw", "lr": 2.5e-4, "betas": [0.9, 0.999], "eps": 1e-8,
                        "weight_decay": 0.0, "schedule": "cosine"},
    token_fields={"pad_token_id": "pad", "eos_token_id": "eos"},
    hidden_fields=("masking", "mask_prob", "masking_unit", "packing"),
    model_fields=(
        ModelField("mem_len", "Memory length",
                   "Hidden states of the previous segments each layer attends to, besides its own segment "
                   "(0: no recurrence, a plain causal LM over one segment).", bounds=(0, 4096)),
    ),
    refusals={
        "clm": "Transformer-XL trains its causal LM over consecutive segments with memory: choose xl_lm.",
        "mlm": "Transformer-XL is a causal LM; it cannot fill in masked tokens (MLM): train xl_lm.",
        "nsp": "Transformer-XL has no [CLS] classifier for next sentence prediction (NSP): train xl_lm.",
        "plm": "The permutation LM is XLNet's; Transformer-XL trains the causal LM over segments (xl_lm).",
        **{o: "Transformer-XL is decoder-only; the denoising objectives need an encoder and a decoder (T5)."
           for o in SEQ2SEQ_OBJECTIVES},
    },
    hf_tokenizer_roles={},
    explorer_kind="gpt",
    cls_sep_inputs=False,
    not_masked_lm="Transformer-XL predicts the next token",
    attention_stacks=("decoder",),
    generates=True,
    causal_lm=True,
    explorer_about=CAUSAL_ABOUT,
    explorer_about_tuned="",
    sentence_vectors=False,
)

__all__ = ["FAMILY", "ROLES"]
