"""Import a Hugging Face model folder as a native checkpoint the explorer (and fine-tuning) can load.

Two steps, both usable on their own:

- `extract_archive(archive, dest)`: unpack an uploaded .zip / .tar.gz / .tgz / .tar safely.
  Only plain files are written; absolute paths, `..`, symbolic and hard links, device files,
  too many files and too many (uncompressed) bytes are refused before or while writing,
  so a zip bomb stops at the bound instead of filling the disk. Returns the model folder
  (the one holding config.json, at the top or inside one wrapping folder).
- `import_hf_directory(src, dest)`: load the folder with `models_lib.hf.from_pretrained`
  (every model type it supports: the encoders, T5ForConditionalGeneration and GPT-2), write `models_lib.checkpoint.save_model`'s files plus our
  `tokenizer.json` + `tokenizer_meta.json` (what a trained run's checkpoint holds, so
  the explorer (trainer.inference) reads it unchanged) and `import_info.json` (where it came from, which
  pre-training heads had weights). The folder appears complete or not at all.
- `import_model(source, dest)`: both, for a folder or an archive (what the web app's upload job
  and `python -m trainer import` call).

What is model-specific comes from the family a model_type imports as (trainer.families):
T5 and GPT-2 tokenizers lack roles our tokenizer metadata names (GPT-2 has only
<|endoftext|>; T5 has no [CLS] or [MASK]); they are filled from the tokens each model uses
(Family.hf_roles), so the checkpoint loads like any other. Their "objectives" are what the
model learnt to do (Family.hf_objective): "clm" for GPT-2 (next-token prediction),
"span_corruption" for T5. Only a family whose inputs are "[CLS] text [SEP]" gets that
template written into a tokenizer that lacks one.

Every problem with the upload raises `ModelImportError` (a UserError) with a sentence.
torch is imported only when a model is loaded.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import stat
import tarfile
import zipfile
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Iterator

from trainer import families, jsonio
from trainer.errors import TokenizerError, UserError
from trainer.families import Family

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip")  # longest first
MAX_FILES = 200                       # a model folder holds a dozen files; shards add a few
MAX_UNPACKED_BYTES = 4 * 1024**3      # bert-large in fp32 is 1.3 GB; .bin + .safetensors twice that
INFO_NAME = "import_info.json"
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")
TOKENIZER_SOURCES = ("tokenizer.json", "vocab.txt")
_CHUNK = 1 << 20
_JUNK = ("__MACOSX/",)  # resource forks a Mac's "Compress" adds; never part of a model


class ModelImportError(UserError):
    """The uploaded archive or model folder cannot be imported; the message says why."""


def archive_suffix(filename: str) -> str | None:
    """The archive extension of `filename` (lower case), or None when it is not one we unpack."""
    name = (filename or "").strip().lower()
    return next((s for s in ARCHIVE_SUFFIXES if name.endswith(s) and len(name) > len(s)), None)


def supported_model_types() -> tuple[str, ...]:
    """The `model_type`s of config.json that import: those the families name as their Hugging
    Face formats (Family.hf_model_types), in the families' order."""
    return tuple(t for family in families.all() for t in family.hf_model_types)


def _family_of(model_type: Any) -> Family | None:
    """The family a config.json model_type imports as (None for one no family names)."""
    return next((f for f in families.all() if model_type in f.hf_model_types), None)


def _lacks_roles(model_type: Any) -> bool:
    """Whether the model type's tokenizer lacks our roles ([CLS], [MASK], ...): T5's, GPT-2's."""
    family = _family_of(model_type)
    return family is not None and bool(family.hf_tokenizer_roles)


# ---------------------------------------------------------------------------- archives
def extract_archive(archive: str | Path, dest: str | Path, *, max_files: int = MAX_FILES,
                    max_bytes: int = MAX_UNPACKED_BYTES) -> Path:
    """Unpack `archive` into the (new or empty) folder `dest`; returns the model folder in it.

    On any refusal the partly written `dest` is removed and ModelImportError is raised."""
    archive, dest = Path(archive), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    try:
        if zipfile.is_zipfile(archive):
            _extract_zip(archive, dest, max_files, max_bytes)
        elif _is_tar(archive):
            _extract_tar(archive, dest, max_files, max_bytes)
        else:
            raise ModelImportError("The file is not an archive LM Workbench can unpack. Upload a .zip or .tar.gz "
                                   "of a Hugging Face model folder (config.json, the weights and the tokenizer files).")
        return find_model_folder(dest)
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise


def find_model_folder(root: Path) -> Path:
    """The folder holding config.json: `root` itself or the shallowest one below it."""
    found = sorted(root.rglob("config.json"), key=lambda p: (len(p.relative_to(root).parts), str(p)))
    if not found:
        raise ModelImportError("The archive has no config.json, so it is not a Hugging Face model folder. "
                               "Archive the folder that save_pretrained() wrote (config.json, model.safetensors "
                               "or pytorch_model.bin, and the tokenizer files).")
    depth = len(found[0].relative_to(root).parts)
    tops = [p for p in found if len(p.relative_to(root).parts) == depth]
    if len(tops) > 1:
        where = ", ".join(str(p.parent.relative_to(root)) for p in tops[:3])
        raise ModelImportError(f"The archive holds several models (config.json in {where}). Upload one model per archive.")
    return found[0].parent


def _is_tar(path: Path) -> bool:
    try:
        return tarfile.is_tarfile(path)
    except (OSError, EOFError, tarfile.TarError):
        return False


def _member_path(name: str) -> PurePosixPath | None:
    """The relative path a member may be written to; None for entries to skip; refuses escapes."""
    clean = name.replace("\\", "/")
    if "\x00" in clean:
        raise ModelImportError("The archive has a file name with a NUL character; refusing to unpack it.")
    if clean.startswith("/") or re.match(r"^[A-Za-z]:", clean):
        raise ModelImportError(f'The archive contains the absolute path "{name}"; refusing to unpack it. '
                               "Archive the model folder with relative paths.")
    parts = [p for p in clean.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ModelImportError(f'The archive contains "{name}", a path that leads outside the archive\'s folder; '
                               "refusing to unpack it.")
    if not parts or any(clean.startswith(j) for j in _JUNK):
        return None
    return PurePosixPath(*parts)


class _Budget:
    """Counts files and bytes written; refuses past the bounds."""

    def __init__(self, max_files: int, max_bytes: int):
        self.max_files, self.max_bytes = max_files, max_bytes
        self.files = self.bytes = 0

    def add_file(self) -> None:
        self.files += 1
        if self.files > self.max_files:
            raise ModelImportError(f"The archive holds more than {self.max_files} files; a model folder needs far "
                                   "fewer. Archive only the model folder.")

    def add_bytes(self, n: int) -> None:
        self.bytes += n
        if self.bytes > self.max_bytes:
            raise ModelImportError(f"The archive unpacks to more than {_gb(self.max_bytes)}, the most an import may "
                                   "take (a compressed archive that expands this much is refused as a zip bomb).")


def _write(dest: Path, rel: PurePosixPath, chunks: Iterator[bytes], budget: _Budget, declared: int) -> None:
    target = dest.joinpath(*rel.parts)
    if os.path.commonpath([dest.resolve(), target.resolve()]) != str(dest.resolve()):  # belt and braces
        raise ModelImportError(f'The archive member "{rel}" would be written outside its folder; refusing it.')
    target.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    try:
        with open(target, "xb") as out:
            for chunk in chunks:
                written += len(chunk)
                if written > declared:
                    raise ModelImportError(f'"{rel}" unpacks to more bytes than the archive declares; the archive '
                                           "is damaged or built to fool unpackers, so it is refused.")
                budget.add_bytes(len(chunk))
                out.write(chunk)
    except FileExistsError:
        raise ModelImportError(f'The archive lists "{rel}" twice; refusing to unpack it.') from None
    except IsADirectoryError:
        raise ModelImportError(f'The archive has both a file and a folder named "{rel}".') from None


def _extract_zip(archive: Path, dest: Path, max_files: int, max_bytes: int) -> None:
    try:
        zf = zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, OSError) as e:
        raise ModelImportError(f"The .zip archive cannot be read ({e}).") from None
    with zf:
        plan, budget = [], _Budget(max_files, max_bytes)
        declared = 0
        for info in zf.infolist():  # check every entry before writing anything
            rel = _member_path(info.filename)
            mode = info.external_attr >> 16
            if stat.S_ISLNK(mode):
                raise ModelImportError(f'The archive contains a symbolic link ("{info.filename}"). A model archive '
                                       "holds only plain files, so it is refused.")
            if rel is None or info.is_dir():
                continue
            if stat.S_IFMT(mode) not in (0, stat.S_IFREG):  # 0: written without Unix mode bits
                raise ModelImportError(f'"{info.filename}" in the archive is not a plain file; refusing to unpack it.')
            budget.add_file()
            declared += info.file_size
            if declared > max_bytes:
                budget.add_bytes(declared)  # raises with the size message
            plan.append((info, rel))
        budget.files = 0
        for info, rel in plan:
            budget.add_file()
            try:
                with zf.open(info) as src:
                    _write(dest, rel, iter(lambda: src.read(_CHUNK), b""), budget, info.file_size)
            except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, NotImplementedError) as e:
                raise ModelImportError(f'"{info.filename}" in the .zip archive cannot be unpacked ({e}).') from None


def _extract_tar(archive: Path, dest: Path, max_files: int, max_bytes: int) -> None:
    budget = _Budget(max_files, max_bytes)
    try:
        with tarfile.open(archive, "r:*") as tf:
            for member in tf:  # headers are read lazily: the bounds stop a bomb as it unfolds
                rel = _member_path(member.name)
                if member.issym() or member.islnk():
                    raise ModelImportError(f'The archive contains a {"symbolic" if member.issym() else "hard"} link '
                                           f'("{member.name}"). A model archive holds only plain files, so it is refused.')
                if rel is None or member.isdir():
                    continue
                if not member.isfile():
                    raise ModelImportError(f'"{member.name}" in the archive is not a plain file; refusing to unpack it.')
                budget.add_file()
                if budget.bytes + member.size > max_bytes:
                    budget.add_bytes(member.size)  # raises with the size message
                src = tf.extractfile(member)
                _write(dest, rel, iter(lambda: src.read(_CHUNK), b""), budget, member.size)
    except ModelImportError:
        raise
    except (tarfile.TarError, EOFError, OSError, ValueError) as e:  # gzip/zlib errors are OSError/ValueError
        raise ModelImportError(f"The archive is damaged and cannot be unpacked ({e}).") from None


def _gb(n: int) -> str:
    return f"{n / 1024**3:.1f} GB" if n >= 1024**3 else f"{n / 1024**2:.0f} MB"


# ---------------------------------------------------------------------------- model folders
def check_hf_directory(src: str | Path) -> dict[str, Any]:
    """Refuse early (before loading any weights) what cannot be imported; returns config.json."""
    src = Path(src)
    if not (src / "config.json").is_file():
        raise ModelImportError("The folder has no config.json, so it is not a Hugging Face model folder.")
    try:
        config = jsonio.load_path(src / "config.json")
    except jsonio.JsonNestingError as e:
        raise ModelImportError(str(e)) from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ModelImportError(f"config.json is not valid JSON ({e}).") from None
    if not isinstance(config, dict):
        raise ModelImportError("config.json does not hold a JSON object, so it is not a model configuration.")
    supported = supported_model_types()
    model_type = config.get("model_type")
    if not model_type:
        raise ModelImportError(f"config.json does not say which kind of model it is (no model_type). "
                               f"LM Workbench imports these model types: {', '.join(supported)}.")
    if model_type not in supported:
        raise ModelImportError(f'This is a "{model_type}" model, which LM Workbench cannot import yet. '
                               f"Supported model types: {', '.join(supported)}.")
    if not any((src / name).is_file() for name in WEIGHT_FILES):
        raise ModelImportError("The model has config.json but no weights: add model.safetensors "
                               "(or pytorch_model.bin) from save_pretrained().")
    if _lacks_roles(model_type):
        if not (src / "tokenizer.json").is_file():
            raise ModelImportError("The model has no tokenizer.json: save the tokenizer next to the model with a fast "
                                   "tokenizer (AutoTokenizer.from_pretrained(...).save_pretrained(folder) writes it).")
    elif not any((src / name).is_file() for name in TOKENIZER_SOURCES):
        raise ModelImportError("The model has no tokenizer: add tokenizer.json (or vocab.txt for a BERT "
                               "WordPiece vocabulary) next to config.json.")
    return config


def check_import_size(hf_config: dict[str, Any]) -> int:
    """The parameter count config.json describes, checked (trainer.catalog.size) before any
    weight is read or any tensor allocated; ModelImportError naming the field otherwise."""
    from models_lib import hf
    from trainer.catalog.size import check_model_size
    from trainer.errors import ConfigError

    try:
        model_cfg = hf.config_from_hf(hf_config)
    except (ValueError, TypeError, KeyError) as e:
        raise ModelImportError(f"config.json does not describe a model LM Workbench can build: {e.args[0] if e.args else type(e).__name__}") from None
    fields = {f"config.json's {k}": v for k, v in hf_config.items()}
    try:
        return check_model_size(model_cfg, training=False, fields=fields, where="This model")
    except ConfigError as e:
        raise ModelImportError(str(e)) from None


def import_hf_directory(src_dir: str | Path, dest_checkpoint_dir: str | Path) -> dict[str, Any]:
    """Convert a Hugging Face model folder into a native checkpoint folder; returns its import info:
    {"source", "model_type", "architectures", "family", "class", "objectives" (heads whose weights
    were in the upload, e.g. ["mlm"] for a BertForMaskedLM), "missing_keys", "unexpected_keys",
    "parameters", "vocab_size", "max_positions", "tokenizer": {"algorithm", "lowercase", "vocab_size"}}.
    """
    src, dest = Path(src_dir), Path(dest_checkpoint_dir)
    hf_config = check_hf_directory(src)
    check_import_size(hf_config)
    bundle = _load_tokenizer(src, hf_config)
    model = _load_model(src)

    model_vocab = int(getattr(model.config, "vocab_size", bundle.vocab_size))
    if bundle.vocab_size > model_vocab:
        raise ModelImportError(f"The tokenizer has {bundle.vocab_size:,} tokens but the model only {model_vocab:,} "
                               "embeddings: they do not belong together.")
    info = {
        "source": "huggingface",
        "model_type": hf_config["model_type"],
        "architectures": list(hf_config.get("architectures") or []),
        "class": type(model).__name__,
        "objectives": trained_heads(model),
        "missing_keys": list(getattr(model, "missing_keys", [])),
        "unexpected_keys": list(getattr(model, "unexpected_keys", [])),
        "parameters": sum(p.numel() for p in model.parameters()),
        "vocab_size": model_vocab,
        "max_positions": int(getattr(model.config, "max_positions", 0) or 0),
        "tokenizer": {"algorithm": bundle.meta.get("algorithm"), "lowercase": bundle.meta.get("lowercase"),
                      "vocab_size": bundle.vocab_size},
    }
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        from models_lib.checkpoint import read_model_config, save_model

        save_model(model, tmp)
        info["family"] = read_model_config(tmp)["family"]
        family = families.find(info["family"])
        _write_tokenizer(bundle, tmp, encoder=family is None or family.cls_sep_inputs)
        (tmp / INFO_NAME).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return info


def import_model(source: str | Path, dest_checkpoint_dir: str | Path, *, work_dir: str | Path | None = None,
                 max_bytes: int = MAX_UNPACKED_BYTES,
                 progress: Callable[[float], None] = lambda p: None) -> dict[str, Any]:
    """Import a Hugging Face model folder, or an archive of one (unpacked into `work_dir`, a new
    folder removed afterwards; default: a hidden one beside the destination), as the checkpoint
    folder `dest_checkpoint_dir`; returns import_hf_directory's info. progress: 0 to 100."""
    source, dest = Path(source), Path(dest_checkpoint_dir)
    progress(0)
    if source.is_dir():
        info = import_hf_directory(source, dest)
        progress(100)
        return info
    if not source.is_file():
        raise ModelImportError(f"{source} does not exist: name a Hugging Face model folder (what save_pretrained() "
                               f"wrote) or a .zip / .tar.gz of one.")
    work = Path(work_dir) if work_dir is not None else dest.with_name(f".{dest.name}.unpack")
    try:
        folder = extract_archive(source, work, max_bytes=max_bytes)
        progress(30)
        info = import_hf_directory(folder, dest)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    progress(100)
    return info


def read_import_info(folder: str | Path) -> dict[str, Any]:
    """import_info.json of an imported checkpoint ({} for a trained one or when unreadable)."""
    try:
        data = jsonio.load_path(Path(folder) / INFO_NAME)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def trained_heads(model: Any) -> list[str]:
    """Objectives whose head got weights from the upload: a child module `<objective>_head` none
    of whose tensors is in `model.missing_keys` (BertForMaskedLM has no NSP head: ["mlm"]).
    T5 and GPT-2 have one output layer (often tied to the embeddings): their own objective,
    unless the upload lacked it (a bare GPT2Model with an untied, freshly made lm_head)."""
    missing = set(getattr(model, "missing_keys", []))
    family = families.find(getattr(getattr(model, "config", None), "family", None))
    if family is not None and family.hf_objective:
        return [] if "lm_head.weight" in missing else [family.hf_objective]
    heads = []
    for name, module in model.named_children():
        if not name.endswith("_head") or module is None:
            continue
        keys = [f"{name}.{k}" for k in module.state_dict()]
        if name in ("nsp_head", "sop_head"):  # they classify the pooled [CLS]: no pooler weights, no head
            keys += [k for k in missing if ".pooler." in k]
        if keys and not any(k in missing for k in keys):
            heads.append(name.removesuffix("_head"))
    return heads


def _load_tokenizer(src: Path, hf_config: dict | None = None) -> Any:
    from trainer.prep.tokenization import load_tokenizer

    model_type = (hf_config or {}).get("model_type")
    if _lacks_roles(model_type) and _has_family_roles(src, model_type, hf_config or {}):
        # The family knows its tokens (XLNet: <sep> and <cls>, where the generic guess takes <s> and </s>).
        return _decoder_tokenizer(src, model_type, hf_config or {})
    try:
        return load_tokenizer(src)
    except TokenizerError as e:
        if not _lacks_roles(model_type):
            raise ModelImportError(f"The model's tokenizer cannot be used: {e}") from None
    return _decoder_tokenizer(src, model_type, hf_config or {})


def _has_family_roles(src: Path, model_type: str, hf_config: dict) -> bool:
    """Whether tokenizer.json has a spelling of every role the model type's family names."""
    from tokenizers import Tokenizer

    try:
        tok = Tokenizer.from_file(str(src / "tokenizer.json"))
    except Exception:  # unreadable: the usual path says why
        return False
    roles = _family_of(model_type).hf_roles(hf_config, tok) or {}
    return bool(roles) and all(any(tok.token_to_id(t) is not None for t in spellings) for spellings in roles.values())


def _decoder_tokenizer(src: Path, model_type: str, hf_config: dict) -> Any:
    """A T5 or GPT-2 tokenizer.json as a TokenizerBundle, its roles filled as its family says
    (Family.hf_roles; GPT-2: the token config.json names as eos_token_id, when it has one)."""
    from tokenizers import Tokenizer

    from trainer.prep.tokenization import MAX_EXTRA_IDS, TokenizerBundle, sentinel_token

    try:
        tok = Tokenizer.from_file(str(src / "tokenizer.json"))
    except Exception as e:  # the Rust side raises a plain Exception on bad JSON
        raise ModelImportError(f"tokenizer.json cannot be read: {e}") from None
    roles = _family_of(model_type).hf_roles(hf_config, tok)
    ids, names = {}, {}
    for role, spellings in roles.items():
        found = next((t for t in spellings if tok.token_to_id(t) is not None), None)
        if found is None:
            raise ModelImportError(f"The {model_type.upper()} tokenizer has no {' or '.join(spellings)} token, "
                                   "which the model needs; upload the tokenizer that belongs to it.")
        ids[role], names[role] = tok.token_to_id(found), found
    extra = 0
    while extra < MAX_EXTRA_IDS and tok.token_to_id(sentinel_token(extra)) is not None:
        extra += 1
    algorithm = type(tok.model).__name__.lower()
    meta = {"algorithm": algorithm, "lowercase": False, "vocab_size": tok.get_vocab_size(with_added_tokens=True),
            "special_tokens": ids, "special_token_strings": names, "extra_ids": extra, "inferred": True}
    return TokenizerBundle.from_tokenizer(tok, meta, src)


def _load_model(src: Path) -> Any:
    import pickle

    from safetensors import SafetensorError

    from models_lib import hf

    try:
        return hf.from_pretrained(src, map_location="cpu")
    except ValueError as e:
        raise ModelImportError(_without_path(f"The model cannot be imported: {e}", src)) from None
    except (RuntimeError, OSError, EOFError, KeyError, pickle.UnpicklingError, SafetensorError) as e:
        # unreadable weights: a damaged .safetensors, a .bin that is not a plain state dict
        raise ModelImportError(_without_path(f"The weights cannot be read ({type(e).__name__}: {e}).", src)) from None


def _without_path(message: str, src: Path) -> str:
    """Messages from models_lib name the (temporary, server-side) folder; the user knows it as the upload."""
    return message.replace(str(src) + "/", "").replace(str(src), "the upload")


def _write_tokenizer(bundle: Any, folder: Path, *, encoder: bool = True) -> None:
    """tokenizer.json + tokenizer_meta.json as train_tokenizer writes them (ids of the special roles).
    Only an encoder's tokenizer gets BERT's [CLS] ... [SEP] template when it has none: T5 and
    GPT inputs are laid out by the explorer itself."""
    from tokenizers import AddedToken, processors

    tok = bundle.tok
    tok.no_truncation()  # inference reports over-long texts itself; it must see them whole
    tok.no_padding()
    names = {role: tok.id_to_token(int(i)) for role, i in bundle.meta["special_tokens"].items()}
    # Register them as special tokens (a vocab.txt alone does not): they are then matched before
    # the normalizer runs, so a lowercasing tokenizer still reads "[MASK]" as the mask token.
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in dict.fromkeys(names.values())])
    if tok.post_processor is None and encoder:  # e.g. a tokenizer.json saved without its template: add BERT's
        cls, sep = (names["cls"], bundle.cls_id), (names["sep"], bundle.sep_id)
        tok.post_processor = processors.TemplateProcessing(
            single=f"{cls[0]} $A {sep[0]}", pair=f"{cls[0]} $A {sep[0]} $B:1 {sep[0]}:1", special_tokens=[cls, sep])
    meta = {**bundle.meta, "vocab_size": tok.get_vocab_size(with_added_tokens=True), "imported": True,
            "special_token_strings": names}
    (folder / "tokenizer.json").write_text(tok.to_str(pretty=True), encoding="utf-8")
    (folder / "tokenizer_meta.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False), encoding="utf-8")
