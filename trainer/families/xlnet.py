"""XLNet (Yang et al. 2019): the permutation language model with two-stream attention,
Transformer-XL's memory and relative positions, and relative segment encodings.

It trains the `plm` objective on batched streams (rows [A, SEP, B, SEP, CLS]); its checkpoints
move to and from transformers' XLNetLMHeadModel (models_lib.hf.xlnet). In the explorer a text is
laid out as in training ("text <sep> <cls>"); fill-in by permutation predicts chosen positions
in the order the user picks (trainer.inference.permutation), and the attention view shows both
streams: the content stream (each token sees every token) and the query stream (each position
sees every token but its own, as a target whose content is hidden)."""
from __future__ import annotations

from typing import Any

from trainer.families.base import Family, ModelField
from trainer.families.t5 import SEQ2SEQ_OBJECTIVES

STREAMS = ("content", "query")


class XLNetFamily(Family):
    def seq_len_help(self) -> str:
        return ("XLNet: tokens per row, [A, <sep>, B, <sep>, <cls>]; each row also attends to the memory of its "
                "stream's previous row.")

    def prompt_ids(self, tokenizer: Any, text: str) -> list[int]:
        ids = tokenizer.tok.encode(text, add_special_tokens=False).ids
        return [*ids, tokenizer.sep_id, tokenizer.cls_id]

    def attention_forward(self, model: Any, input_ids: Any, decoder_ids: list[int]) -> None:
        """Both streams in one pass: every position is a target whose own token is hidden from
        its query stream (perm_mask = the identity), the content stream sees everything."""
        import torch

        T = input_ids.shape[1]
        eye = torch.eye(T)[None]
        types = torch.zeros_like(input_ids)
        types[:, -1] = 2  # <cls>, as in training
        model(input_ids, token_type_ids=types, perm_mask=eye, target_mapping=eye)


FAMILY = XLNetFamily(
    name="xlnet",
    recomputes_blocks=False,  # its relative-attention stack has no activation checkpointing yet
    activation_factor=2.0,  # a content and a query stream through every layer
    permutation_fill=True,
    label="XLNet",
    about="Permutation LM: predicts about 1/K of the tokens in a random factorisation order through a query "
          "stream that knows the position but not the content; Transformer-XL memory and relative positions.",
    preset_table="models_lib.families.xlnet:XLNET_PRESETS",
    config_class="models_lib.families.xlnet:XLNetConfig",
    model_class="models_lib.families.xlnet:XLNetLMHeadModel",
    flops_formula="trainer.training.flops:xlnet_flops",
    default_preset="xlnet-tiny",
    objectives=("plm",),
    required_objectives=("plm",),
    default_objectives=("plm",),
    tokenizer_algorithms=("unigram", "wordpiece", "bpe"),  # the paper: SentencePiece
    masking_units=(),
    packings=("full-sentences",),
    # The paper (appendix A.3): Adam lr 4e-4 (large; base the same recipe), eps 1e-6, weight decay
    # 0.01, linear decay, warm-up.
    optimizer_defaults={"optimizer": "adamw", "lr": 4e-4, "betas": [0.9, 0.999], "eps": 1e-6,
                        "weight_decay": 0.01, "schedule": "linear"},
    config_fields=("plm_k",),
    token_fields={"pad_token_id": "pad", "eos_token_id": "eos"},
    hidden_fields=("masking", "mask_prob", "masking_unit", "packing"),
    model_fields=(
        ModelField("mem_len", "Memory length",
                   "Content states of the previous rows of the stream each layer attends to (0: none).",
                   bounds=(0, 4096)),
    ),
    refusals={
        "mlm": "XLNet has no [MASK] token: it predicts tokens in a permuted factorisation order (plm).",
        "nsp": "XLNet dropped next sentence prediction (NSP); train the permutation LM (plm).",
        "clm": "XLNet trains the permutation LM (plm); for a left-to-right LM choose GPT or Transformer-XL.",
        "xl_lm": "The causal LM over segments is Transformer-XL's; XLNet trains the permutation LM (plm).",
        **{o: "XLNet has no decoder; the denoising objectives are T5's. Train the permutation LM (plm)."
           for o in SEQ2SEQ_OBJECTIVES},
    },
    hf_model_types=("xlnet",),
    hf_objective="plm",
    hf_tokenizer_roles={"pad": ("<pad>",), "unk": ("<unk>",), "cls": ("<cls>",), "sep": ("<sep>",),
                        "mask": ("<mask>",)},
    explorer_kind="xlnet",
    cls_sep_inputs=False,
    not_masked_lm="XLNet predicts tokens by permutation: use fill-in by permutation",
    attention_stacks=STREAMS,
    explorer_about="XLNet: fill in chosen positions by permutation, in the order you pick; look at the attention "
                   "of both streams.",
    explorer_about_tuned="",
    sentence_vectors=False,
)
