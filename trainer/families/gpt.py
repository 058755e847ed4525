"""GPT (Radford et al. 2018, 2019): a decoder-only transformer with a causal mask and learned
positions, trained to predict the next token on packed sequences of byte-level BPE tokens.

Its prompt is plain text (documents are only separated by EOS in training), its one attention
stack is causal, and its output continues the prompt within the model's positions."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainer.families.t5 import SEQ2SEQ_OBJECTIVES
from trainer.errors import InferenceError
from trainer.families.base import Family, GenerationPrompt, ModelField

if TYPE_CHECKING:
    from trainer.inference.loading import Loaded

ROLES = ("pad", "unk", "cls", "sep", "mask")
# The explorer's sentence for a causal LM's checkpoints (GPT's and Transformer-XL's).
CAUSAL_ABOUT = "A causal LM (GPT, Transformer-XL): generate text token by token, look at its causal attention."


class GPTFamily(Family):
    def seq_len_help(self) -> str:
        return "GPT: the context length of the packed sequences (at most the preset's positions)."

    def generation_prompt(self, loaded: "Loaded", text: str, max_new_tokens: int) -> GenerationPrompt:
        return self.prompt_of_ids(loaded, self.prompt_ids(loaded.tokenizer, text), max_new_tokens)

    @staticmethod
    def prompt_of_ids(loaded: "Loaded", ids: list[int], max_new_tokens: int, *, what: str = "The prompt",
                      output: str = "to generate") -> GenerationPrompt:
        """Prompt ids made ready: max_new_tokens cut to the room the model's positions leave
        (InferenceError when none: `what` is N tokens long ... no room `output`)."""
        room = loaded.max_positions - len(ids)
        if room < 1:
            raise InferenceError(f"{what} is {len(ids)} tokens long, but this model reads at most "
                                 f"{loaded.max_positions} in all, which leaves no room {output}. Shorten it.")
        # The output repeats the prompt; decoding the new ids after it keeps their spacing.
        return GenerationPrompt(ids, len(ids), min(max_new_tokens, room), ids)

    def attention_forward(self, model: Any, input_ids: Any, decoder_ids: list[int]) -> None:
        state, feed = model.start_generation(input_ids, None)
        model.generation_step(state, feed)

    def hf_roles(self, hf_config: dict[str, Any], tokenizer: Any) -> dict[str, tuple[str, ...]] | None:
        """GPT-2's one special token serves every role (transformers uses it as bos, eos and unk):
        the token config.json names as eos_token_id, else <|endoftext|>."""
        eos_id = hf_config.get("eos_token_id")
        if isinstance(eos_id, int) and tokenizer.id_to_token(eos_id) is not None:
            return {role: (tokenizer.id_to_token(eos_id),) for role in ROLES}
        return dict(self.hf_tokenizer_roles)


FAMILY = GPTFamily(
    name="gpt",
    label="GPT",
    preset_table="models_lib.families.gpt:GPT_PRESETS",
    config_class="models_lib.families.gpt:GPTConfig",
    model_class="models_lib.families.gpt:GPTLMHeadModel",
    flops_formula="trainer.training.flops:gpt_flops",
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
    hf_model_types=("gpt2",),
    hf_token_types=False,
    hf_objective="clm",
    hf_tokenizer_roles={role: ("<|endoftext|>",) for role in ROLES},
    explorer_kind="gpt",
    cls_sep_inputs=False,
    not_masked_lm="GPT predicts the next token",
    attention_stacks=("decoder",),
    generates=True,
    batched_generation=True,
    causal_lm=True,
    explorer_about=CAUSAL_ABOUT,
    explorer_about_tuned="",
    sentence_vectors=False,
)
