"""One configuration for the whole encoder family (BERT, RoBERTa, ALBERT, ELECTRA, DistilBERT,
SpanBERT, UniLM), plus tiny subclasses for the two families that add fields of their own.

The defaults are BERT's. A family is BERT with some fields set differently (see presets.py):
RoBERTa counts positions from the padding, ALBERT factorises the embeddings and shares layers,
DistilBERT drops token types and the pooler. `family` names which pre-training model and which
Hugging Face format the config belongs to; it does not change the modules by itself. Which
families there are, their labels and config classes, is models_lib.checkpoint's registry
(`register_family`), read here through `encoder_family`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from models_lib.core import vocab
from models_lib.core.layers import ACTIVATIONS
from models_lib.core.registry import FAMILIES



def registered_family(name: Any) -> Any:
    """The registration of family `name` (its label, config class, presets, heads; a
    models_lib.core.registry.Family), or None."""
    return FAMILIES.get(name) if isinstance(name, str) else None


def encoder_family(name: Any) -> Any:
    """The registration of the encoder family `name` (one configured by an EncoderConfig);
    ValueError naming the registered ones otherwise."""
    family = registered_family(name)
    if family is None or not issubclass(family.config_cls, EncoderConfig):
        known = [n for n, f in FAMILIES.items() if issubclass(f.config_cls, EncoderConfig)]
        raise ValueError(f"Unknown model family {name!r}; choose one of {', '.join(known)}.")
    return family


def block_params(hidden: int, ffn: int) -> int:
    """Weights and biases of one transformer block (models_lib.core.encoder.Block): fused QKV and
    the output projection (4 H^2 + 4H), the feed-forward network (2 H F + F + H) and two
    LayerNorms (4H)."""
    return (4 * hidden * hidden + 4 * hidden) + (2 * hidden * ffn + ffn + hidden) + 4 * hidden


def mlm_head_params(hidden: int, width: int, vocab: int) -> int:
    """models_lib.heads.pretraining.MLMHead: dense H -> E, LayerNorm(E) and the output bias (the
    decoder weight is the word embedding table, counted with the embeddings)."""
    return hidden * width + width + 2 * width + vocab


def refuse_unknown_fields(cls: type, d: Any, label: str) -> None:
    """ValueError naming the fields of `d` that the dataclass `cls` does not have."""
    if not isinstance(d, dict):
        raise ValueError(f"A {label} config is a JSON object of fields, got {type(d).__name__}.")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise ValueError(f"Unknown {label} config field(s): {', '.join(unknown)}. "
                         f"Known fields: {', '.join(sorted(known))}.")


def positive_int(name: str, value: Any) -> None:
    """ValueError unless value is a positive whole number (a bool is not one)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive whole number, got {value!r}.")


def check_sizes(config: Any, names: tuple[str, ...]) -> None:
    """Each named field of config must be a positive whole number."""
    for name in names:
        positive_int(name, getattr(config, name))


def check_lengths(config: Any, names: tuple[str, ...]) -> None:
    """Each named field of config must be a whole number of positions, 0 or more; a whole float
    (a form's number field gives 32.0) becomes an int in place."""
    for name in names:
        value = getattr(config, name)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
            setattr(config, name, value)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a whole number of positions, 0 or more, not {value!r}.")


def check_probabilities(config: Any, names: tuple[str, ...]) -> None:
    """Each named field of config must be a number in [0, 1) (a dropout rate)."""
    for name in names:
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
            raise ValueError(f"{name} must be between 0 and 1, got {value!r}.")


def check_token_ids(config: Any, names: tuple[str, ...]) -> None:
    """Each named field of config must be None or a token id of its vocabulary (config.vocab_size)."""
    for name in names:
        value = getattr(config, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or not 0 <= value < config.vocab_size):
            raise ValueError(f"{name} {value!r} is outside the vocabulary (size {config.vocab_size}).")


class PresetConfig:
    """Serialisation of the configs that are not EncoderConfigs (T5, GPT, ELMo): a JSON-able dict,
    unknown fields refused by name, named presets. A subclass (a dataclass) sets `config_label`
    ("T5") and `presets` (name -> the fields that differ from its defaults)."""

    config_label: ClassVar[str] = ""
    presets: ClassVar[dict[str, dict[str, Any]]] = {}

    @property
    def padded_vocab_size(self) -> int:
        """The rows of the model's vocabulary tables: vocab_size rounded up to a multiple of 64
        (models_lib.core.vocab). Not a field: it is derived, and configs stay as they were."""
        return vocab.padded_size(self.vocab_size)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Any:
        refuse_unknown_fields(cls, d, cls.config_label)
        return cls(**d)

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> Any:
        """A preset, with any field overridden (e.g. vocab_size from the tokenizer)."""
        if name not in cls.presets:
            raise ValueError(f"Unknown {cls.config_label} preset {name!r}; choose one of {', '.join(cls.presets)}.")
        return cls.from_dict({**cls.presets[name], **overrides})


@dataclass
class EncoderConfig:
    # Which model this is (decides the pre-training heads and the transformers format)
    family: str = "bert"

    # Size
    vocab_size: int = 30522
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    intermediate_size: int | None = None  # None -> 4 * hidden_size
    max_position_embeddings: int = 512
    type_vocab_size: int = 2  # segments A/B; 0 = no token-type embeddings

    # Regularisation and numerics
    hidden_dropout: float = 0.1
    attention_dropout: float = 0.1
    hidden_act: str = "gelu"  # exact erf GELU
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02

    # Tokens
    pad_token_id: int | None = 0  # its embedding row starts at zero and gets no gradient

    # Encoder variants (defaults are BERT; see models_lib/core/encoder.py)
    embedding_size: int | None = None  # ALBERT/ELECTRA: embeddings of this size + an E -> H projection
    share_layers: str = "none"  # "none" | "all" | "attention" | "ffn" (ALBERT: "all")
    norm_placement: str = "post"  # "post" | "pre"
    position_offset: int = 0  # first position id; derived when positions_from_padding
    positions_from_padding: bool = False  # RoBERTa: ids count non-pad tokens from pad_token_id + 1
    use_pooler: bool = True  # the [CLS] pooler, which the NSP/SOP head needs

    def __post_init__(self) -> None:
        family = encoder_family(self.family)
        expected = family.config_cls
        if not isinstance(self, expected):
            raise ValueError(f"A {family.label} configuration is a {expected.__name__}, "
                             f"not a {type(self).__name__}; use EncoderConfig.from_dict or a preset.")
        if self.intermediate_size is None:
            self.intermediate_size = 4 * self.hidden_size
        check_sizes(self, ("vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size",
                           "max_position_embeddings"))
        if self.hidden_size % self.num_heads:
            raise ValueError(f"The hidden size ({self.hidden_size}) must be divisible by the number of "
                             f"attention heads ({self.num_heads}).")
        if self.type_vocab_size < 0:
            raise ValueError(f"type_vocab_size must be 0 or more, got {self.type_vocab_size}.")
        for name in ("hidden_dropout", "attention_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} must be between 0 and 1, got {getattr(self, name)}.")
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(f"Unknown activation {self.hidden_act!r}; choose one of {', '.join(sorted(ACTIVATIONS))}.")
        if self.layer_norm_eps <= 0 or self.initializer_range <= 0:
            raise ValueError("layer_norm_eps and initializer_range must be positive.")
        if self.pad_token_id is not None and not 0 <= self.pad_token_id < self.vocab_size:
            raise ValueError(f"pad_token_id {self.pad_token_id} is outside the vocabulary (size {self.vocab_size}).")
        if self.embedding_size is not None and self.embedding_size < 1:
            raise ValueError(f"embedding_size must be positive or None, got {self.embedding_size}.")
        if self.share_layers not in ("none", "all", "attention", "ffn"):
            raise ValueError(f"share_layers must be 'none', 'all', 'attention' or 'ffn', got {self.share_layers!r}.")
        if self.norm_placement not in ("post", "pre"):
            raise ValueError(f"norm_placement must be 'post' or 'pre', got {self.norm_placement!r}.")
        if self.positions_from_padding:
            if self.pad_token_id is None:
                raise ValueError("positions_from_padding (RoBERTa) counts positions from the padding token, "
                                 "so pad_token_id must be set.")
            # RoBERTa (fairseq): the pad token owns position id pad_token_id; real tokens follow it.
            self.position_offset = self.pad_token_id + 1
        if not 0 <= self.position_offset < self.max_position_embeddings:
            raise ValueError(f"position_offset, the first position id ({self.position_offset}), must be at least 0 "
                             f"and below max_position_embeddings ({self.max_position_embeddings}).")

    @property
    def label(self) -> str:
        return encoder_family(self.family).label

    @property
    def max_positions(self) -> int:
        """The longest input (in tokens, [CLS] and [SEP] included) the model accepts."""
        return self.max_position_embeddings - self.position_offset

    @property
    def padded_vocab_size(self) -> int:
        """The rows of the word embedding table and the entries of the token heads' output bias:
        vocab_size rounded up to a multiple of 64 (models_lib.core.vocab). Not a field: it is
        derived, so configs (and the checkpoints that record them) stay as they were."""
        return vocab.padded_size(self.vocab_size)

    # Size
    def count_params(self, embeddings: bool = False) -> int:
        """Parameters of the family's pre-training model. Without `embeddings`, only the
        transformer layers (what the launch form shows: the rest depends on the vocabulary or
        sits around the stack); shared layers count once (ALBERT). With `embeddings`, every
        parameter: embeddings, the E -> H projection, the pooler and the pre-training heads too,
        i.e. sum(p.numel() for p in model.parameters()): the vocabulary's tables count with their
        padding rows (padded_vocab_size), as they are allocated."""
        n = self._layer_params()
        if embeddings:
            n += self._embedding_params() + self._around_stack_params() + self._head_params()
        return n

    def shape(self) -> dict[str, Any]:
        """What the launch form shows of a preset: layers, hidden size, heads, FFN size, a label."""
        L, H, A = self.num_layers, self.hidden_size, self.num_heads
        return {"layers": L, "hidden": H, "heads": A, "ffn": self.intermediate_size, "label": f"L{L} H{H} A{A}"}

    @property
    def _width(self) -> int:
        """E: the width of the embeddings (and of the token-predicting heads)."""
        return self.embedding_size or self.hidden_size

    def _layer_params(self) -> int:
        H, F, L = self.hidden_size, self.intermediate_size, self.num_layers
        attention, ffn, norms = 4 * H * H + 4 * H, 2 * H * F + F + H, 4 * H
        if self.share_layers == "all":
            return attention + ffn + norms
        if self.share_layers == "attention":
            return attention + L * (ffn + norms)
        if self.share_layers == "ffn":
            return ffn + L * (attention + norms)
        return L * block_params(H, F)

    def _embedding_params(self) -> int:
        """models_lib.core.encoder.Embeddings: word, position and token-type tables, LayerNorm."""
        E = self._width
        return (self.padded_vocab_size + self.max_position_embeddings + self.type_vocab_size) * E + 2 * E

    def _around_stack_params(self) -> int:
        """The backbone's E -> H projection (factorised embeddings) and its [CLS] pooler."""
        H = self.hidden_size
        projection = self.embedding_size * H + H if self.embedding_size is not None else 0
        return projection + (H * H + H if self.use_pooler else 0)

    def _head_params(self) -> int:
        """The masked-LM head, plus NSP/SOP on the pooler for the families that have one (their
        registration's pair_head)."""
        pair = 2 * self.hidden_size + 2 if self.use_pooler and encoder_family(self.family).pair_head else 0
        return mlm_head_params(self.hidden_size, self._width, self.padded_vocab_size) + pair

    # Serialisation
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EncoderConfig:
        """Build the config class of d["family"] (BERT when absent: checkpoints before families)."""
        family = d.get("family", cls.family)
        registered = registered_family(family)
        encoder = registered is not None and issubclass(registered.config_cls, EncoderConfig)
        target = registered.config_cls if encoder else cls
        refuse_unknown_fields(target, d, registered.label if encoder else str(family))
        return target(**{**d, "family": family})

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> EncoderConfig:
        """Any preset of any family (see models_lib.families.presets); fields can be overridden."""
        from models_lib.families import presets

        return presets.get(name, **overrides)


@dataclass
class ElectraConfig(EncoderConfig):
    """The discriminator's sizes, plus the generator's width as a fraction of them.

    The generator keeps the number of layers and the embedding size; hidden size, FFN size and
    heads are scaled by `generator_size` (heads so that the head size stays the discriminator's).
    ELECTRA paper, Table 6: 1/4 for Small and Large, 1/3 for Base.
    """

    family: str = "electra"
    use_pooler: bool = False
    generator_size: float = 0.25

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 < self.generator_size <= 1.0:
            raise ValueError(f"generator_size is a fraction of the discriminator's width (ELECTRA uses 1/4 to "
                             f"1/2), so it must be in (0, 1], got {self.generator_size}.")
        hidden, heads = self._generator_width()
        if hidden % heads:
            raise ValueError(f"A generator_size of {self.generator_size} gives a generator hidden size of {hidden}, "
                             f"which {heads} attention heads do not divide; choose another fraction.")

    def _generator_width(self) -> tuple[int, int]:
        hidden = max(1, round(self.hidden_size * self.generator_size))
        head_size = self.hidden_size // self.num_heads
        return hidden, max(1, hidden // head_size)

    def count_params(self, embeddings: bool = False) -> int:
        """The discriminator's and the generator's layers; with `embeddings`, also the one
        embedding table they share, each one's projection and pooler, the discriminator's RTD
        head and the generator's MLM head."""
        generator = self.generator_config()
        n = super().count_params(embeddings) + generator._layer_params()
        if embeddings:
            n += generator._around_stack_params() + mlm_head_params(
                generator.hidden_size, generator._width, generator.padded_vocab_size)
        return n

    def _head_params(self) -> int:
        """models_lib.heads.pretraining.RTDHead: dense H -> H, then one logit per token."""
        H = self.hidden_size
        return H * H + H + H + 1

    def generator_config(self) -> ElectraConfig:
        """The generator's own config: same depth, vocabulary and embeddings, narrower."""
        hidden, heads = self._generator_width()
        embedding = self.embedding_size or self.hidden_size  # the shared embedding table's width
        return dataclasses.replace(
            self, hidden_size=hidden, num_heads=heads,
            intermediate_size=max(1, round(self.intermediate_size * self.generator_size)),
            # A projection only where the widths differ: what transformers' ElectraModel does.
            embedding_size=None if embedding == hidden else embedding,
            generator_size=1.0)


@dataclass
class SpanBertConfig(EncoderConfig):
    family: str = "spanbert"
    use_pooler: bool = False  # single segment, no NSP
    max_span_length: int = 10  # span lengths are clipped at 10; rows of the SBO position table

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_span_length < 1:
            raise ValueError(f"max_span_length must be at least 1, got {self.max_span_length}.")

    def _head_params(self) -> int:
        """MLM plus models_lib.heads.pretraining.SBOHead: a position table, 3H -> H, H -> E, two
        LayerNorms and the output bias."""
        H, E, V = self.hidden_size, self._width, self.padded_vocab_size
        sbo = self.max_span_length * H + (3 * H * H + H) + 2 * H + (H * E + E) + 2 * E + V
        return super()._head_params() + sbo


@dataclass
class TinyBertConfig(EncoderConfig):
    """TinyBERT's student (Jiao et al. 2020): a BERT encoder plus, when its teacher is wider,
    the learned projections W_e and W_h (hidden_size -> teacher_hidden_size) of the embedding-
    and hidden-state losses. teacher_hidden_size None or equal to hidden_size: no projection."""

    family: str = "tinybert"
    use_pooler: bool = False
    teacher_hidden_size: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.teacher_hidden_size is not None and self.teacher_hidden_size < 1:
            raise ValueError(f"teacher_hidden_size must be a positive width, got {self.teacher_hidden_size}.")

    @property
    def projects(self) -> bool:
        return self.teacher_hidden_size is not None and self.teacher_hidden_size != self.hidden_size

    def _head_params(self) -> int:
        """The MLM head, plus W_e and W_h (with biases) when the teacher is wider."""
        fit = 2 * (self.hidden_size * self.teacher_hidden_size + self.teacher_hidden_size) if self.projects else 0
        return super()._head_params() + fit

