"""UniLM (Dong et al. 2019): BERT's encoder trained with bidirectional, left-to-right,
right-to-left and seq2seq self-attention masks, so it fills masks and also writes a target for
a source: "[CLS] source [SEP]", then one token at a [MASK] it appends at each step."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainer.errors import InferenceError
from trainer.families.base import Family, GenerationPrompt
from trainer.families.encoders import BERT_ADAM, ENCODER_CONFIG, ENCODER_FLOPS, WORD_UNITS, preset_table

if TYPE_CHECKING:
    from trainer.inference.loading import Loaded


class UniLMFamily(Family):
    def generation_prompt(self, loaded: "Loaded", text: str, max_new_tokens: int) -> GenerationPrompt:
        if loaded.lacks("unilm"):
            raise InferenceError(loaded.untrained("seq2seq", "UniLM's attention modes"))
        ids = self.prompt_ids(loaded.tokenizer, text)  # [CLS] source [SEP]
        room = loaded.max_positions - len(ids)
        if room < 1:
            raise InferenceError(f"The source is {len(ids)} tokens long (with the special tokens), but this model "
                                 f"reads at most {loaded.max_positions} in all, which leaves no room for a target. "
                                 f"Shorten it.")
        return GenerationPrompt(ids, len(ids), min(max_new_tokens, room))  # the source comes first

    def generate_kwargs(self, tokenizer: Any) -> dict[str, Any]:
        """UniLM writes each next token at a [MASK] it appends: its generate needs that id."""
        return {"mask_token_id": tokenizer.mask_id}


FAMILY = UniLMFamily(
    name="unilm",
    label="UniLM",
    preset_table=preset_table("unilm"),
    config_class=ENCODER_CONFIG,
    model_class="models_lib.families.unilm:UniLMForPreTraining",
    flops_formula=ENCODER_FLOPS,
    objectives=("mlm", "unilm"),
    required_objectives=("mlm", "unilm"),
    default_objectives=("mlm", "unilm"),
    tokenizer_algorithms=("wordpiece",),
    masking_units=WORD_UNITS,
    optimizer_defaults=dict(BERT_ADAM),
    default_preset="unilm-tiny",
    refusals={"nsp": "UniLM here trains its four attention modes without next sentence prediction (NSP)."},
    about="BERT's encoder trained with bidirectional, left-to-right, right-to-left and seq2seq attention "
          "masks, so it can also generate text.",
    explorer_kind="unilm",
    generates=True,
    explorer_about="UniLM: fill in masks, generate a target for a source, look at its attention.",
    explorer_about_tuned="UniLM fine-tuned for {task}: ask it what it was fine-tuned for below, generate a target "
                         "for a source, look at its attention. It no longer fills in masks or scores sentence pairs.",
)
