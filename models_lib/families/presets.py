"""Named model sizes for every family, in one registry.

    from models_lib.families import presets
    cfg = presets.get("albert-base", vocab_size=8000)   # the right config class, fields overridden
    presets.list_presets("electra")                    # ['electra-tiny', 'electra-small', ...]

The encoder families' tables are here (BERT_PRESETS, ROBERTA_PRESETS, ...; an entry holds only
what differs from EncoderConfig's, BERT's, defaults); the other families keep theirs on their
config class (T5Config.presets, ...). Each family names its table when it registers
(models_lib.checkpoint.register_family), and get / list_presets read them from there.
"""
from __future__ import annotations

from typing import Any

from models_lib.core.config import EncoderConfig
from models_lib.core.registry import FAMILIES

# Sizes: Turc et al. 2019 for the small BERTs; Devlin et al. 2019 for base/large. FFN = 4H.
_SIZES = {
    "tiny": dict(num_layers=2, hidden_size=128, num_heads=2),
    "mini": dict(num_layers=4, hidden_size=256, num_heads=4),
    "small": dict(num_layers=4, hidden_size=512, num_heads=8),
    "medium": dict(num_layers=8, hidden_size=512, num_heads=8),
    "base": dict(num_layers=12, hidden_size=768, num_heads=12),
    "large": dict(num_layers=24, hidden_size=1024, num_heads=16),
}


def _family(family: str, sizes: dict[str, dict], **common: Any) -> dict[str, dict[str, Any]]:
    return {f"{family}-{size}": {"family": family, **common, **fields} for size, fields in sizes.items()}


BERT_PRESETS = _family("bert", _SIZES)

# RoBERTa (Liu et al. 2019): BERT's encoder; byte-level BPE 50k (<s>=0, <pad>=1); positions
# counted from pad+1, so 514 rows serve 512 tokens; one token type; no NSP, hence no pooler.
ROBERTA_PRESETS = _family("roberta", _SIZES, vocab_size=50265, pad_token_id=1, max_position_embeddings=514,
                          type_vocab_size=1, layer_norm_eps=1e-5, positions_from_padding=True, use_pooler=False)

# ALBERT (Lan et al. 2020, v2 settings): E=128 factorised embeddings, all layers shared, SOP on
# the pooler, gelu_new, no dropout, SentencePiece 30k. albert-tiny uses E=64 so that the
# factorisation still shrinks something at H=128.
ALBERT_PRESETS = _family("albert", {
    "tiny": dict(num_layers=2, hidden_size=128, num_heads=2, embedding_size=64),
    "base": dict(num_layers=12, hidden_size=768, num_heads=12),
    "large": dict(num_layers=24, hidden_size=1024, num_heads=16),
    "xlarge": dict(num_layers=24, hidden_size=2048, num_heads=16),
    "xxlarge": dict(num_layers=12, hidden_size=4096, num_heads=64),
}, vocab_size=30000, embedding_size=128, share_layers="all", hidden_act="gelu_new",
    hidden_dropout=0.0, attention_dropout=0.0)

# ELECTRA (Clark et al. 2020, Table 6): sizes are the discriminator's; generator_size the
# generator's width as a fraction of it. Small: E=128 under H=256; Base/Large: E=H.
ELECTRA_PRESETS = _family("electra", {
    "tiny": dict(num_layers=2, hidden_size=128, num_heads=2, generator_size=0.25),
    "small": dict(num_layers=12, hidden_size=256, num_heads=4, embedding_size=128, generator_size=0.25),
    "base": dict(num_layers=12, hidden_size=768, num_heads=12, generator_size=1 / 3),
    "large": dict(num_layers=24, hidden_size=1024, num_heads=16, generator_size=0.25),
}, use_pooler=False)

# DistilBERT (Sanh et al. 2019): half the layers of the BERT preset of the same name; no token
# types, no pooler. A student is usually made with distilbert.distil_from_teacher(teacher).
DISTILBERT_PRESETS = _family(
    "distilbert", {size: {**fields, "num_layers": max(1, fields["num_layers"] // 2)} for size, fields in _SIZES.items()},
    type_vocab_size=0, use_pooler=False)

# SpanBERT (Joshi et al. 2020): BERT sizes, one segment, MLM + SBO, no NSP (so no pooler).
SPANBERT_PRESETS = _family("spanbert", {k: _SIZES[k] for k in ("tiny", "mini", "small", "base", "large")},
                           use_pooler=False)

# UniLM (Dong et al. 2019): the BERT encoder trained with self-attention masks; MLM only.
UNILM_PRESETS = _family("unilm", {k: _SIZES[k] for k in ("tiny", "mini", "small", "base", "large")},
                        use_pooler=False)

# TinyBERT (Jiao et al. 2020): a narrow BERT student. TinyBERT-4 is the paper's (L4, H312,
# 12 heads, FFN 1200); TinyBERT-6 has BERT-base's width; the tiny and mini shapes are
# scaled-down students of bert-tiny / bert-mini teachers (same heads, half the width).
TINYBERT_PRESETS = _family("tinybert", {
    "tiny": dict(num_layers=1, hidden_size=64, num_heads=2, intermediate_size=256),
    "mini": dict(num_layers=2, hidden_size=128, num_heads=4, intermediate_size=512),
    "4": dict(num_layers=4, hidden_size=312, num_heads=12, intermediate_size=1200),
    "6": dict(num_layers=6, hidden_size=768, num_heads=12, intermediate_size=3072),
}, use_pooler=False)

def _tables() -> dict[str, dict[str, dict[str, Any]]]:
    """Every registered family's presets, family -> its table, in registry order (each family
    declares its table when it registers in models_lib.checkpoint)."""
    return {name: family.presets for name, family in FAMILIES.items() if family.presets}


def list_presets(family: str | None = None) -> list[str]:
    """Preset names, of one family or of all (in the family registry's order)."""
    tables = _tables()
    if family is None:
        return [name for table in tables.values() for name in table]
    if family not in tables:
        raise ValueError(f"Unknown model family {family!r}; choose one of {', '.join(tables)}.")
    return list(tables[family])


def get(name: str, **overrides: Any) -> Any:
    """The config of a preset of any family, with any field overridden (e.g. vocab_size from the
    tokenizer): an EncoderConfig (or its ELECTRA/SpanBERT/TinyBERT subclass), or the family's own
    PresetConfig."""
    family = next((FAMILIES[f] for f, table in _tables().items() if name in table), None)
    if family is None:
        raise ValueError(f"Unknown preset {name!r}. Available presets: {', '.join(list_presets())}.")
    if not issubclass(family.config_cls, EncoderConfig):
        return family.config_cls.from_preset(name, **overrides)
    fields = {"family": family.name, **family.presets[name], **overrides}
    if fields["family"] != family.name:
        raise ValueError(f"The preset {name} is a {family.label} model; its family cannot be overridden.")
    return EncoderConfig.from_dict(fields)
