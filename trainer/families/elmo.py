"""ELMo (Peters et al. 2018): a forward and a backward LSTM language model sharing the token
representation (an embedding table or a character CNN) and the softmax; their layers become
contextual word vectors. No attention, no masks to fill, no generation: the explorer compares
a word's vectors in two sentences instead."""
from __future__ import annotations

from typing import Any

from trainer.families.t5 import SEQ2SEQ_OBJECTIVES
from trainer.errors import ConfigError
from trainer.families import activations
from trainer.families.base import Family, ModelField


# Activations per token, direction and layer: 4 gates, the cell and the output, as wide as the cells.
LSTM_TENSORS = 6


class ElmoFamily(Family):
    def activation_bytes(self, model_cfg: Any, batch: Any) -> int:
        """Both directions' LSTM layers (no attention scores): per token, the gates, cell and output
        as wide as the cells, and the projection."""
        cells = int(model_cfg.hidden_size) * LSTM_TENSORS + int(model_cfg.embedding_dim)
        return activations.ACTIVATION_BYTES * batch.size * batch.length * 2 * cells * int(model_cfg.num_layers)

    def seq_len_help(self) -> str:
        return "ELMo: tokens per packed sequence; the LSTMs have no position limit."

    def prepare_model(self, model: Any, tokenizer: Any) -> None:
        """With the character CNN: each token id's spelling (its UTF-8 bytes between word
        markers), from the tokenizer's vocabulary; a checkpoint stores the table with the weights."""
        if not getattr(model.config, "char_cnn", False):
            return
        from models_lib.families.elmo import char_table
        from trainer.prep.segmenter import vocab_strings

        if tokenizer is None:
            raise ConfigError("ELMo's character CNN spells every token of the vocabulary, so it needs the run's "
                              "tokenizer; train with its tokenizer folder.")
        spellings = [s or "" for s in vocab_strings(tokenizer)]  # gaps in the ids: empty spellings
        model.set_char_table(char_table(spellings, max_chars=model.config.max_chars))


FAMILY = ElmoFamily(
    name="elmo",
    label="ELMo",
    preset_table="models_lib.families.elmo:ELMO_PRESETS",
    config_class="models_lib.families.elmo:ElmoConfig",
    model_class="models_lib.families.elmo:ElmoLanguageModel",
    flops_formula="trainer.training.flops:elmo_flops",
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
    recomputes_blocks=False,  # LSTMs: no transformer blocks to recompute
    hf_export_refusal="ELMo has no transformers class, so it cannot be exported to the Hugging Face format.",
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
    explorer_kind="elmo",
    cls_sep_inputs=False,
    not_masked_lm="ELMo is a pair of left-to-right and right-to-left LSTM language models",
    attention_stacks=(),
    no_attention="ELMo is a pair of LSTM language models: it has no attention to show. Its word vectors can be "
                 "compared with the word-similarity tool instead.",
    word_vectors=True,
    explorer_about="ELMo: compare a word's vectors in two sentences, layer by layer.",
    explorer_about_tuned="",
    sentence_vectors=False,
)
