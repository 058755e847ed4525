"""Subword tokenizers trained on a prepared corpus, with the Hugging Face ``tokenizers`` library.

Each algorithm is one entry of :data:`ALGORITHMS`: how to build the untrained pipeline
(normalizer, pre-tokenizer, model, decoder), its trainer, its special tokens and its
post-processor. The five special tokens always take ids 0..4 in the order of
:data:`ROLES` (pad, unk, cls, sep, mask), whatever their spelling.

- ``wordpiece`` — BERT exactly: BertNormalizer (clean text, CJK characters split apart,
  optional lowercasing with accent stripping), BertPreTokenizer, WordPiece with ``##``
  continuations, ``[CLS] A [SEP] B [SEP]`` with segment ids 0/1. Also writes ``vocab.txt``.
- ``bpe`` — byte-level BPE as in GPT-2/RoBERTa (no unknown tokens), ``<s> A </s></s> B </s>``.
- ``unigram`` — a SentencePiece-style Unigram model as in ALBERT (NFKC, ``▁`` word marks).

Any of them can get T5's sentinel tokens (``extra_ids``): ``<extra_id_0>`` ... ``<extra_id_{n-1}>``
are added as special tokens after training, so they sit on top of the learned vocabulary (as
T5's 100 sit on top of its 32,000 pieces) with contiguous ids in order, are never split, and
are never masked or used as random replacements (they are in ``TokenizerBundle.special_ids``).

Folder layout written by :func:`train_tokenizer`::

    tokenizer.json          the whole pipeline (HF tokenizers format)
    tokenizer_meta.json     {"algorithm", "lowercase", "vocab_size", "special_tokens": {role: id},
                             "extra_ids": n (T5 sentinels; absent in older folders = 0), ...}
    tokenizer_config.json   lets ``transformers.AutoTokenizer.from_pretrained(folder)`` load it
    vocab.txt               WordPiece only: the vocabulary in id order (HF BertTokenizer)

Training the same corpus twice can give slightly different vocabularies: the library's
BPE/WordPiece trainer breaks ties between equally frequent merges in hash-map order
(huggingface/tokenizers issue #1794). What makes later steps reproducible is the saved
``tokenizer.json``, which checkpoints copy.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from trainer import jsonio
from trainer.errors import TokenizerError
from trainer.prep.sentences import count_words
from trainer.progress import Stages

ROLES = ("pad", "unk", "cls", "sep", "mask")
MIN_VOCAB_SIZE = 100
MAX_VOCAB_SIZE = 200_000
STATS_MAX_SENTENCES = 50_000  # evaluate tokens/word and [UNK] rate on at most this many
N_EXAMPLES = 3
META_VERSION = 1
MAX_EXTRA_IDS = 1000  # T5 uses 100 sentinels
T5_EXTRA_IDS = 100  # T5's sentinels: the default for a tokenizer trained for T5 (trainer.catalog.schema)
SENTINEL_FORMAT = "<extra_id_{}>"


def sentinel_token(i: int) -> str:
    """The spelling of T5's i-th sentinel token (``<extra_id_0>`` marks the first span)."""
    return SENTINEL_FORMAT.format(i)


# ---------------------------------------------------------------------------------------------
# The algorithms
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Algorithm:
    name: str
    label: str
    special_tokens: tuple[str, ...]  # spelling of ROLES, in that order (ids 0..4)
    build: Callable[[bool], Tokenizer]  # lowercase -> untrained pipeline
    make_trainer: Callable[[int, tuple[str, ...]], trainers.Trainer]  # vocab_size, specials
    post_processor: Callable[[dict[str, tuple[str, int]]], processors.PostProcessor]
    min_vocab_size: int = MIN_VOCAB_SIZE
    hf_class: str = "PreTrainedTokenizerFast"

    def role_tokens(self) -> dict[str, str]:
        return dict(zip(ROLES, self.special_tokens))


def _bert_normalizer(lowercase: bool) -> normalizers.Normalizer:
    return normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=lowercase, lowercase=lowercase
    )


def _build_wordpiece(lowercase: bool) -> Tokenizer:
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", continuing_subword_prefix="##", max_input_chars_per_word=100))
    tok.normalizer = _bert_normalizer(lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    return tok


def _wordpiece_trainer(vocab_size: int, specials: tuple[str, ...]) -> trainers.Trainer:
    # Every character of the alphabet can also appear as a "##" continuation, so an alphabet
    # of half the vocabulary keeps the requested size an upper bound. Rarer characters
    # become [UNK] (the unk_rate statistic shows how often).
    return trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(specials),
        limit_alphabet=max(1, (vocab_size - len(specials)) // 2),
        continuing_subword_prefix="##",
        show_progress=False,
    )


def _bert_pair_template(ids: dict[str, tuple[str, int]]) -> processors.PostProcessor:
    cls, sep = ids["cls"], ids["sep"]
    return processors.TemplateProcessing(
        single=f"{cls[0]} $A {sep[0]}",
        pair=f"{cls[0]} $A {sep[0]} $B:1 {sep[0]}:1",
        special_tokens=[cls, sep],
    )


def _build_bpe(lowercase: bool) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    if lowercase:
        tok.normalizer = normalizers.Lowercase()
    # add_prefix_space: a sentence's first word is tokenized like the same word mid-text.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    return tok


def _bpe_trainer(vocab_size: int, specials: tuple[str, ...]) -> trainers.Trainer:
    return trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(specials),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )


def _roberta_pair(ids: dict[str, tuple[str, int]]) -> processors.PostProcessor:
    return processors.RobertaProcessing(ids["sep"], ids["cls"], trim_offsets=True, add_prefix_space=True)


def _build_unigram(lowercase: bool) -> Tokenizer:
    tok = Tokenizer(models.Unigram())
    steps = [normalizers.NFKC()] + ([normalizers.Lowercase()] if lowercase else [])
    tok.normalizer = normalizers.Sequence(steps)
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    return tok


def _unigram_trainer(vocab_size: int, specials: tuple[str, ...]) -> trainers.Trainer:
    return trainers.UnigramTrainer(
        vocab_size=vocab_size,
        special_tokens=list(specials),
        unk_token=specials[ROLES.index("unk")],
        max_piece_length=16,
        show_progress=False,
    )


ALGORITHMS: dict[str, Algorithm] = {
    "wordpiece": Algorithm(
        name="wordpiece",
        label="WordPiece (BERT)",
        special_tokens=("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"),
        build=_build_wordpiece,
        make_trainer=_wordpiece_trainer,
        post_processor=_bert_pair_template,
        hf_class="BertTokenizer",
    ),
    "bpe": Algorithm(
        name="bpe",
        label="Byte-level BPE (GPT-2, RoBERTa)",
        special_tokens=("<pad>", "<unk>", "<s>", "</s>", "<mask>"),
        build=_build_bpe,
        make_trainer=_bpe_trainer,
        post_processor=_roberta_pair,
        min_vocab_size=300,  # 256 byte symbols + specials + some merges
    ),
    "unigram": Algorithm(
        name="unigram",
        label="Unigram (SentencePiece, ALBERT/T5)",
        special_tokens=("<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"),
        build=_build_unigram,
        make_trainer=_unigram_trainer,
        post_processor=_bert_pair_template,
    ),
}


# ---------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------


def train_tokenizer(
    corpus_dir: Path,
    out_dir: Path,
    *,
    algorithm: str = "wordpiece",
    vocab_size: int = 8000,
    lowercase: bool = True,
    progress: Callable[[float], None] | None = None,
    extra_ids: int = 0,
) -> dict:
    """Train a tokenizer on ``corpus_dir/train.txt`` and write it to ``out_dir``.

    ``extra_ids`` adds that many T5 sentinel tokens (``<extra_id_0>``...) after the learned
    vocabulary (0..1000; T5 uses 100); span corruption needs them.

    Returns statistics: ``vocab_size`` (actual; at most the requested size when the corpus
    has enough distinct text), ``tokens_per_word`` and ``unk_rate`` (fraction of tokens
    that are the unknown token), both measured on ``valid.txt``, and ``examples``.
    ``progress`` gets percentages from 0 to 100.
    """
    spec = _algorithm(algorithm)
    vocab_size = _check_vocab_size(vocab_size, spec)
    extra_ids = _check_extra_ids(extra_ids)
    corpus_dir, out_dir = Path(corpus_dir), Path(out_dir)
    train_path = corpus_dir / "train.txt"
    if not train_path.is_file():
        raise TokenizerError("The corpus has no training text (train.txt is missing); prepare the corpus first.")
    # A large corpus's ingest draws a seeded sample of its train split (sample.txt, a size the
    # corpus settings choose): the vocabulary is learned from it, in memory bounded by its size.
    sample_path = corpus_dir / "sample.txt"
    learn_path = sample_path if sample_path.is_file() else train_path
    report = Stages(progress, {"train_tokenizer": ("Training the tokenizer", 85.0),
                               "evaluate": ("Measuring the tokenizer", 15.0)})
    report.percent(0)
    started = time.monotonic()

    tok = spec.build(bool(lowercase))
    total = max(1, learn_path.stat().st_size)
    batches = _line_batches(learn_path, on_bytes=lambda done: report.update("train_tokenizer", done / 1e6, total / 1e6))
    tok.train_from_iterator(batches, trainer=spec.make_trainer(vocab_size, spec.special_tokens))
    ids = {}
    for role, token in spec.role_tokens().items():
        ids[role] = (token, tok.token_to_id(token))
        if ids[role][1] != ROLES.index(role):  # the trainer puts special tokens first, in order
            raise RuntimeError(f"special token {token} got id {ids[role][1]}")
    tok.post_processor = spec.post_processor(ids)
    if tok.get_vocab_size() <= len(ROLES):
        raise TokenizerError("The corpus has too little text to learn a vocabulary from.")
    sentinels = _add_sentinels(tok, extra_ids)
    report.finish("train_tokenizer", total / 1e6)

    meta = {
        "algorithm": spec.name,
        "lowercase": bool(lowercase),
        "vocab_size": tok.get_vocab_size(with_added_tokens=True),
        "requested_vocab_size": vocab_size,
        "special_tokens": {role: i for role, (_, i) in ids.items()},
        "special_token_strings": spec.role_tokens(),
        "extra_ids": extra_ids,
        "version": META_VERSION,
    }
    if sentinels:
        meta["sentinel_id_range"] = [sentinels[0], sentinels[-1]]  # first and last id, contiguous
    eval_path = corpus_dir / "valid.txt"
    if not eval_path.is_file() or eval_path.stat().st_size == 0:
        eval_path = train_path
    stats = {
        "algorithm": spec.name,
        "lowercase": bool(lowercase),
        "requested_vocab_size": vocab_size,
        "extra_ids": extra_ids,
        **_evaluate(tok, eval_path, unk_id=ids["unk"][1]),
        "vocab_size": meta["vocab_size"],
        "evaluated_on": eval_path.stem,
        "trained_on": learn_path.stem,
        "trained_on_bytes": learn_path.stat().st_size,
    }
    report.update("evaluate", 0.66, 1.0, "steps")
    meta["stats"] = stats
    stats["seconds"] = round(time.monotonic() - started, 3)
    shutil.rmtree(out_dir / "shards", ignore_errors=True)  # encoded with a previous tokenizer
    _write_folder(tok, spec, meta, out_dir)
    stats["sha256"] = tokenizer_sha256(out_dir)  # what the runs that read it record (not in tokenizer_meta.json)
    report.finish("evaluate", 1.0, "steps")
    return stats


def _algorithm(name: str) -> Algorithm:
    if name not in ALGORITHMS:
        raise TokenizerError(
            f'Unknown tokenizer algorithm "{name}"; choose one of: {", ".join(ALGORITHMS)}.'
        )
    return ALGORITHMS[name]


def _check_vocab_size(vocab_size, spec: Algorithm) -> int:
    try:
        value = int(vocab_size)
    except (TypeError, ValueError):
        raise TokenizerError(f'The vocabulary size must be a whole number, not "{vocab_size}".') from None
    if isinstance(vocab_size, float) and value != vocab_size:
        raise TokenizerError(f"The vocabulary size must be a whole number, not {vocab_size}.")
    if not spec.min_vocab_size <= value <= MAX_VOCAB_SIZE:
        raise TokenizerError(
            f"The vocabulary size must be between {spec.min_vocab_size:,} and {MAX_VOCAB_SIZE:,} "
            f"for {spec.label}; {value:,} was asked for."
        )
    return value


def _check_extra_ids(extra_ids) -> int:
    try:
        value = int(extra_ids)
    except (TypeError, ValueError):
        raise TokenizerError(f'The number of T5 sentinel tokens must be a whole number, not "{extra_ids}".') from None
    if isinstance(extra_ids, float) and value != extra_ids:
        raise TokenizerError(f"The number of T5 sentinel tokens must be a whole number, not {extra_ids}.")
    if not 0 <= value <= MAX_EXTRA_IDS:
        raise TokenizerError(
            f"The number of T5 sentinel tokens must be between 0 and {MAX_EXTRA_IDS:,}; {value:,} was asked for."
        )
    return value


def _add_sentinels(tok: Tokenizer, n: int) -> list[int]:
    """Add ``<extra_id_0>``..``<extra_id_{n-1}>`` as special tokens after the vocabulary.

    Special added tokens are matched before normalisation and pre-tokenisation, so the
    sentinel stays one token wherever it appears in a text. Returns their ids, in order."""
    if n == 0:
        return []
    first = tok.get_vocab_size(with_added_tokens=True)
    names = [sentinel_token(i) for i in range(n)]
    taken = [name for name in names if tok.token_to_id(name) is not None]
    if taken:  # a learned piece spelled like a sentinel would break the contiguous ids
        raise TokenizerError(f"The corpus vocabulary already contains {taken[0]}, so T5 sentinel tokens cannot "
                             "be added; remove that text from the corpus or train without sentinels.")
    tok.add_special_tokens(names)
    ids = [tok.token_to_id(name) for name in names]
    if ids != list(range(first, first + n)):
        raise RuntimeError(f"sentinel tokens got ids {ids[:3]}..., expected {first}..{first + n - 1}")
    return ids


def _line_batches(
    path: Path, *, on_bytes: Callable[[int], None] | None = None, batch: int = 1000
) -> Iterator[list[str]]:
    """Non-blank lines (sentences) of a corpus file, in lists of ``batch``."""
    out: list[str] = []
    done = 0
    with open(path, "rb") as fh:
        for raw in fh:
            done += len(raw)
            line = raw.decode("utf-8").strip()
            if line:
                out.append(line)
            if len(out) >= batch:
                yield out
                out = []
                if on_bytes:
                    on_bytes(done)
    if out:
        yield out
    if on_bytes:
        on_bytes(done)


def _evaluate(tok: Tokenizer, path: Path, unk_id: int) -> dict:
    n_sent = n_words = n_tokens = n_unk = 0
    examples = []
    for lines in _line_batches(path):
        lines = lines[: STATS_MAX_SENTENCES - n_sent]
        for line, enc in zip(lines, tok.encode_batch(lines, add_special_tokens=False)):
            n_words += count_words(line)
            n_tokens += len(enc.ids)
            n_unk += enc.ids.count(unk_id)
            if len(examples) < N_EXAMPLES and 5 <= len(enc.ids) <= 40:
                examples.append({"text": line, "tokens": enc.tokens})
        n_sent += len(lines)
        if n_sent >= STATS_MAX_SENTENCES:
            break
    return {
        "tokens_per_word": round(n_tokens / n_words, 4) if n_words else 0.0,
        "unk_rate": round(n_unk / n_tokens, 6) if n_tokens else 0.0,
        "evaluated_sentences": n_sent,
        "evaluated_words": n_words,
        "evaluated_tokens": n_tokens,
        "examples": examples,
    }


def _write_folder(tok: Tokenizer, spec: Algorithm, meta: dict, out_dir: Path) -> None:
    """Write all files under temporary names first, then rename them into place."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {
        "tokenizer.json": tok.to_str(pretty=True),
        "tokenizer_meta.json": json.dumps(meta, indent=2, ensure_ascii=False),
        "tokenizer_config.json": json.dumps(_hf_config(spec, meta), indent=2),
    }
    if spec.name == "wordpiece":
        vocab = tok.get_vocab(with_added_tokens=True)
        by_id = sorted(vocab.items(), key=lambda kv: kv[1])
        assert [i for _, i in by_id] == list(range(len(by_id))), "vocabulary ids must be contiguous"
        files["vocab.txt"] = "".join(token + "\n" for token, _ in by_id)
    tmp_names = {}
    try:
        for name, text in files.items():
            tmp_names[name] = out_dir / f".{name}.tmp-{os.getpid()}"
            tmp_names[name].write_text(text, encoding="utf-8")
        for name in [n for n in files if n != "tokenizer_meta.json"] + ["tokenizer_meta.json"]:
            os.replace(tmp_names[name], out_dir / name)
    finally:
        for path in tmp_names.values():
            path.unlink(missing_ok=True)


def _hf_config(spec: Algorithm, meta: dict) -> dict:
    names = meta["special_token_strings"]
    config = {
        "tokenizer_class": spec.hf_class,
        "pad_token": names["pad"],
        "unk_token": names["unk"],
        "cls_token": names["cls"],
        "sep_token": names["sep"],
        "mask_token": names["mask"],
    }
    if spec.name == "wordpiece":
        config.update(do_lower_case=meta["lowercase"], strip_accents=None, tokenize_chinese_chars=True)
    else:
        config.update(bos_token=names["cls"], eos_token=names["sep"])
    if meta.get("extra_ids"):
        config["additional_special_tokens"] = [sentinel_token(i) for i in range(meta["extra_ids"])]
    return config




# ---------------------------------------------------------------------------------------------
# Loading and using
# ---------------------------------------------------------------------------------------------


@dataclass
class TokenizerBundle:
    """A trained tokenizer with its metadata and the ids of its special tokens."""

    tok: Tokenizer
    meta: dict
    folder: Path | None = None
    pad_id: int = 0
    unk_id: int = 1
    cls_id: int = 2
    sep_id: int = 3
    mask_id: int = 4
    vocab_size: int = 0
    special_ids: frozenset[int] = field(default_factory=frozenset)  # the roles' ids and the sentinels
    sentinel_ids: list[int] = field(default_factory=list)  # <extra_id_0>, <extra_id_1>, ... (T5)

    @functools.cached_property
    def sha256(self) -> str | None:
        """tokenizer_sha256 of the folder it was loaded from (None: built in memory, or no tokenizer.json)."""
        return tokenizer_sha256(self.folder) if self.folder is not None else None

    @classmethod
    def from_tokenizer(cls, tok: Tokenizer, meta: dict, folder: Path | None = None) -> TokenizerBundle:
        ids = meta["special_tokens"]
        sentinels = _sentinel_ids(tok, int(meta.get("extra_ids", 0) or 0), folder)
        return cls(
            tok=tok,
            meta=meta,
            folder=folder,
            pad_id=ids["pad"],
            unk_id=ids["unk"],
            cls_id=ids["cls"],
            sep_id=ids["sep"],
            mask_id=ids["mask"],
            vocab_size=tok.get_vocab_size(with_added_tokens=True),
            special_ids=frozenset(ids.values()) | frozenset(sentinels),
            sentinel_ids=sentinels,
        )

    @property
    def extra_ids(self) -> int:
        """How many T5 sentinel tokens the tokenizer has (0 for tokenizers without)."""
        return len(self.sentinel_ids)

    def encode(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
        return self.tok.encode(text, add_special_tokens=add_special_tokens).ids

    def encode_words(self, texts: list[str]) -> list[tuple[list[int], list[bool]]]:
        """Token ids of each text (no special tokens) and, per token, whether it starts a word.

        A "word" is a unit of the pre-tokenizer: for WordPiece a run of letters/digits, a
        punctuation mark, or a single CJK character; ``##`` pieces continue the word before.
        """
        out = []
        for enc in self.tok.encode_batch(texts, add_special_tokens=False):
            words = enc.word_ids
            starts = [i == 0 or words[i] != words[i - 1] for i in range(len(words))]
            out.append((enc.ids, starts))
        return out

    def decode(self, ids, *, skip_special_tokens: bool = True) -> str:
        return self.tok.decode(list(map(int, ids)), skip_special_tokens=skip_special_tokens)

    def id_to_token(self, i: int) -> str | None:
        return self.tok.id_to_token(int(i))

    def token_to_id(self, token: str) -> int | None:
        return self.tok.token_to_id(token)


def tokenizer_sha256(folder: str | Path) -> str | None:
    """The sha256 of a folder's tokenizer.json (a tokenizer's, a checkpoint's): its vocabulary and
    rules byte for byte, the tokenizer's identity. Training again on the same corpus may give
    another vocabulary (the tokenizers library's trainers break ties between merges in another
    order in another process), so a run records this, not the corpus and settings. None without one."""
    path = Path(folder) / "tokenizer.json"
    if not path.is_file():
        return None
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def tokenizers_differ(folder_a: str | Path, folder_b: str | Path) -> bool:
    """True when both folders (a tokenizer's, a checkpoint's) hold a tokenizer.json and the two
    differ (tokenizer_sha256): a model then reads ids of another vocabulary. A folder without
    one has nothing to compare (False); loading its tokenizer fails with its own message."""
    a, b = tokenizer_sha256(folder_a), tokenizer_sha256(folder_b)
    return a is not None and b is not None and a != b


def load_tokenizer(folder: Path) -> TokenizerBundle:
    """Load a tokenizer folder written by :func:`train_tokenizer`.

    Also accepts a Hugging Face folder: ``tokenizer.json`` without our metadata (the
    special tokens are recognised by their usual spellings), or a BERT ``vocab.txt`` alone
    (lowercasing taken from ``tokenizer_config.json``'s ``do_lower_case``, default true).
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise TokenizerError(f'The tokenizer folder "{folder.name}" does not exist; train the tokenizer first.')
    tok_path, meta_path, vocab_path = folder / "tokenizer.json", folder / "tokenizer_meta.json", folder / "vocab.txt"
    if tok_path.is_file():
        try:
            tok = Tokenizer.from_file(str(tok_path))
        except Exception as e:  # the Rust side raises a plain Exception on bad JSON
            raise TokenizerError(f"tokenizer.json in \"{folder.name}\" cannot be read: {e}") from None
    elif vocab_path.is_file():
        tok = _bert_from_vocab(vocab_path, _hf_lowercase(folder))
    else:
        raise TokenizerError(
            f'No tokenizer in "{folder.name}": tokenizer.json (or a BERT vocab.txt) is missing. '
            "Train the tokenizer first."
        )
    if meta_path.is_file():
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            meta["special_tokens"] = {role: int(meta["special_tokens"][role]) for role in ROLES}
            meta["extra_ids"] = int(meta.get("extra_ids", 0) or 0)  # tokenizers from before sentinels: 0
        except (ValueError, KeyError, TypeError) as e:
            raise TokenizerError(f'tokenizer_meta.json in "{folder.name}" is damaged ({e}).') from None
    else:
        meta = _infer_meta(tok, folder)
    return TokenizerBundle.from_tokenizer(tok, meta, folder)


def _sentinel_ids(tok: Tokenizer, n: int, folder: Path | None) -> list[int]:
    ids = [tok.token_to_id(sentinel_token(i)) for i in range(n)]
    if any(i is None for i in ids):
        name = folder.name if folder is not None else "the tokenizer"
        raise TokenizerError(f'tokenizer_meta.json in "{name}" lists {n} T5 sentinel tokens, but '
                             f"{sentinel_token(ids.index(None))} is not in the vocabulary; train the tokenizer again.")
    return ids


def _count_sentinels(tok: Tokenizer) -> int:
    """How many of <extra_id_0>, <extra_id_1>, ... a tokenizer without our metadata has."""
    n = 0
    while n < MAX_EXTRA_IDS and tok.token_to_id(sentinel_token(n)) is not None:
        n += 1
    return n


_USUAL_SPELLINGS = {
    "pad": ("[PAD]", "<pad>"),
    "unk": ("[UNK]", "<unk>"),
    "cls": ("[CLS]", "<s>", "<cls>"),
    "sep": ("[SEP]", "</s>", "<sep>"),
    "mask": ("[MASK]", "<mask>"),
}


def _infer_meta(tok: Tokenizer, folder: Path) -> dict:
    ids, names = {}, {}
    for role, spellings in _USUAL_SPELLINGS.items():
        for s in spellings:
            if tok.token_to_id(s) is not None:
                ids[role], names[role] = tok.token_to_id(s), s
                break
        else:
            raise TokenizerError(
                f'The tokenizer in "{folder.name}" has no {role} token (looked for {", ".join(spellings)}), '
                "so it cannot be used for masked-language-model training."
            )
    model = type(tok.model).__name__.lower()
    algorithm = {"wordpiece": "wordpiece", "bpe": "bpe", "unigram": "unigram"}.get(model, model)
    return {
        "algorithm": algorithm,
        "lowercase": _hf_lowercase(folder),
        "vocab_size": tok.get_vocab_size(with_added_tokens=True),
        "special_tokens": ids,
        "special_token_strings": names,
        "extra_ids": _count_sentinels(tok),
        "inferred": True,
    }


def _hf_lowercase(folder: Path) -> bool:
    try:
        config = jsonio.load_path(folder / "tokenizer_config.json")
        return bool(config.get("do_lower_case", True))
    except (OSError, ValueError):
        return True


def _bert_from_vocab(vocab_path: Path, lowercase: bool) -> Tokenizer:
    lines = vocab_path.read_text(encoding="utf-8").splitlines()
    vocab = {token: i for i, token in enumerate(lines) if token not in ("",)}
    if "[UNK]" not in vocab:
        raise TokenizerError(f'vocab.txt in "{vocab_path.parent.name}" has no [UNK] token.')
    tok = _build_wordpiece(lowercase)
    tok.model = models.WordPiece(
        vocab=vocab, unk_token="[UNK]", continuing_subword_prefix="##", max_input_chars_per_word=100
    )
    if "[CLS]" in vocab and "[SEP]" in vocab:
        tok.post_processor = _bert_pair_template({"cls": ("[CLS]", vocab["[CLS]"]), "sep": ("[SEP]", vocab["[SEP]"])})
    return tok


@functools.lru_cache(maxsize=8)
def _cached_bundle(folder: str, mtime_ns: int) -> TokenizerBundle:
    return load_tokenizer(Path(folder))


def tokenize_preview(folder: Path, text: str) -> list[dict]:
    """How ``text`` is tokenized (no special tokens): ``[{"token": "hel", "id": 123}, ...]``."""
    folder = Path(folder)
    try:
        mtime = (folder / "tokenizer.json").stat().st_mtime_ns
    except OSError:
        mtime = 0
    bundle = _cached_bundle(str(folder.resolve()), mtime)
    enc = bundle.tok.encode(text, add_special_tokens=False)
    return [{"token": t, "id": i} for t, i in zip(enc.tokens, enc.ids)]
