"""Helpers for the import tests (imported by them; holds no tests): tiny transformers BERT
folders written by save_pretrained, and archives of them built the ways users (and attackers) do."""
from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "dog", "a", "ran",
         "to", "park", "paris", "is", "capital", "of", "france", "it", "was", "cold", "she", "wore", "coat",
         ".", ",", "##s", "##ed", "big", "small", "red", "blue", "and", "then", "home", "went", "he", "we"]


def write_tiny_hf_bert(folder: Path, *, kind: str = "masked-lm", seed: int = 0, vocab: bool = True,
                       tokenizer_json: bool = False) -> Path:
    """save_pretrained() of a 2-layer, 32-wide transformers BERT (BertForMaskedLM, BertForPreTraining
    with kind="pretraining", or a bare BertModel, a sentence encoder's shape, with kind="model") plus
    vocab.txt and/or tokenizer.json."""
    import torch
    import transformers

    torch.manual_seed(seed)
    config = transformers.BertConfig(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)
    cls = {"pretraining": transformers.BertForPreTraining,
           "model": transformers.BertModel}.get(kind, transformers.BertForMaskedLM)
    model = cls(config).eval()
    folder = Path(folder)
    model.save_pretrained(folder)
    if vocab:
        (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    if tokenizer_json:
        _bert_tokenizer().save(str(folder / "tokenizer.json"))
    return folder


def _bert_tokenizer():
    """A BERT WordPiece tokenizer.json over VOCAB, built with the tokenizers library."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(VOCAB)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return tok


def zip_folder(folder: Path, archive: Path, *, prefix: str = "tiny-bert/") -> Path:
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for f in sorted(Path(folder).iterdir()):
            zf.write(f, prefix + f.name)
    return archive


def tar_folder(folder: Path, archive: Path, *, prefix: str = "tiny-bert/") -> Path:
    with tarfile.open(archive, "w:gz") as tf:
        for f in sorted(Path(folder).iterdir()):
            tf.add(f, prefix + f.name)
    return archive


def zip_with(archive: Path, entries: dict[str, bytes], *, symlink: str | None = None) -> Path:
    """A .zip of the given name -> bytes entries; `symlink` adds a symbolic link of that name."""
    with zipfile.ZipFile(archive, "w") as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
        if symlink:
            info = zipfile.ZipInfo(symlink)
            info.external_attr = (0o120777 << 16)
            zf.writestr(info, "/etc/passwd")
    return archive


def tar_with(archive: Path, entries: dict[str, bytes], *, symlink: str | None = None) -> Path:
    with tarfile.open(archive, "w:gz") as tf:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        if symlink:
            info = tarfile.TarInfo(symlink)
            info.type = tarfile.SYMTYPE
            info.linkname = "/etc/passwd"
            tf.addfile(info)
    return archive
