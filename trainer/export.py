"""Export a checkpoint to the Hugging Face `transformers` format (a folder `from_pretrained` loads).

    export_checkpoint(checkpoint_dir, out_dir) -> ExportResult(folder, architecture, files)
    zip_export(result, archive, top=...)        the folder as one zip (what the web page downloads)

The weights and config.json come from models_lib.hf.to_pretrained: a fine-tuned checkpoint of an
encoder family is written as transformers' {Bert,Roberta,Albert,Electra,DistilBert}For{Sequence,
Token}Classification / ForQuestionAnswering with id2label / label2id and problem_type; a
pre-training checkpoint as its pre-training class (BertForPreTraining, ...), T5 and GPT-2 as their
LM-head models. Beside them: the checkpoint's own tokenizer.json and the tokenizer_config.json /
special_tokens_map.json that let transformers' AutoTokenizer read it as a PreTrainedTokenizerFast
with the same special tokens, and the model card README.md (trainer.model_card). No transformers import here.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from trainer.errors import ExportError

FORMATS = {"hf": "a folder transformers' from_pretrained loads",
           "zip": "that folder as a zip (what the web page's \u201cExport HF\u201d downloads)",
           "onnx": "ONNX files onnxruntime runs (checked against the model before they are given)",
           "gguf": "one GGUF file llama.cpp and Ollama load (GPT-2 checkpoints)"}
# format -> (module, function) of the writer of its folder: each is called as
# fn(checkpoint_dir, out_dir, *, name="", license="other", progress=lambda p: None) -> ExportResult,
# replaces out_dir whole (a failure leaves none) and raises ExportError with a sentence. "zip" is
# the "hf" folder zipped (zip_export).
EXPORTERS = {"hf": ("trainer.export", "export_checkpoint"),
             "onnx": ("trainer.export_onnx", "export_onnx"),
             "gguf": ("trainer.export_gguf", "export_gguf")}


def exporter(fmt: str) -> Callable[..., "ExportResult"]:
    """The function that writes a `fmt` export (EXPORTERS)."""
    if fmt not in EXPORTERS:
        raise ExportError(f"There is no {fmt!r} export; the formats are {', '.join(EXPORTERS)}.")
    module, name = EXPORTERS[fmt]
    return getattr(_module(module, fmt), name)


def _module(module: str, fmt: str):
    """A format's module, imported when first asked for (trainer.export_onnx, ...): one that is not
    installed here is an ExportError with a sentence, and the other formats go on working."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ExportError(f"The {fmt.upper()} export is not available on this installation ({module} cannot be "
                          f"imported: {e}).") from None


def export_refusal(family: str) -> str:
    """Why a `family` model has no Hugging Face export, as its Family says (ELMo: no transformers
    class); "" when it has one, or for a family nobody registered (the writer then says why)."""
    from trainer import families

    return families.get(family).hf_export_refusal if family in families.names() else ""


def _token_types(family: str) -> bool:
    """Whether the exported tokenizer gives token_type_ids (Family.hf_token_types)."""
    from trainer import families

    found = families.find(family)
    return found.hf_token_types if found is not None else True



@dataclass(frozen=True)
class ExportResult:
    folder: Path
    architecture: str
    files: list[str]


def write_tokenizer_files(checkpoint: Path, out: Path, *, max_positions: int, with_token_types: bool,
                          eos_token_id: int | None = None) -> None:
    """tokenizer.json as it is, and the configs that name its special tokens for transformers: its
    roles, the end-of-text token the model's config names (eos_token_id, else config.json's in `out`
    when it is there), and T5's sentinels <extra_id_N> as additional special tokens."""
    from trainer.prep.tokenization import sentinel_token

    meta = json.loads((checkpoint / "tokenizer_meta.json").read_text(encoding="utf-8"))
    shutil.copyfile(checkpoint / "tokenizer.json", out / "tokenizer.json")
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(checkpoint / "tokenizer.json"))
    special: dict[str, object] = {
        f"{role}_token": tok.id_to_token(int(i)) for role, i in (meta.get("special_tokens") or {}).items()
        if role in ("pad", "unk", "cls", "sep", "mask") and tok.id_to_token(int(i)) is not None}
    if eos_token_id is None and (out / "config.json").is_file():
        found = json.loads((out / "config.json").read_text(encoding="utf-8")).get("eos_token_id")
        eos_token_id = found if isinstance(found, int) else None
    if eos_token_id is not None and tok.id_to_token(int(eos_token_id)) is not None:
        special["eos_token"] = tok.id_to_token(int(eos_token_id))
    sentinels = [sentinel_token(i) for i in range(int(meta.get("extra_ids") or 0))]
    if sentinels and all(tok.token_to_id(s) is not None for s in sentinels):
        special["additional_special_tokens"] = sentinels
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": int(max_positions),
              "model_input_names": ["input_ids", *(["token_type_ids"] if with_token_types else []), "attention_mask"],
              "clean_up_tokenization_spaces": False, **special}
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    (out / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n", encoding="utf-8")


@contextmanager
def staged(out: Path) -> Iterator[Path]:
    """A staging folder beside `out` for an export to write into; when the block ends without an
    error it becomes `out` (an older one replaced whole), else it is removed, so a failed export
    leaves no half-written folder."""
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        yield staging
        if out.exists():
            shutil.rmtree(out)
        os.replace(staging, out)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def check_exportable(checkpoint_dir: str | Path, fmt: str = "hf") -> None:
    """ExportError, before anything is loaded, for what the `fmt` export would refuse that the
    checkpoint's model_config.json already says (hf and zip: an ELMo model, a model with bottleneck
    adapters; onnx and gguf: their module's own check_exportable). Reads JSON only (no torch), so a
    web request can ask before queuing the export."""
    if fmt not in ("hf", "zip"):
        if fmt not in EXPORTERS:
            raise ExportError(f"There is no {fmt!r} export; the formats are {', '.join(FORMATS)}.")
        _module(EXPORTERS[fmt][0], fmt).check_exportable(checkpoint_dir)
        return
    try:
        meta = json.loads((Path(checkpoint_dir) / "model_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise ExportError("This checkpoint's model_config.json cannot be read, so it cannot be exported.") from None
    family = str(meta.get("family", "")) if isinstance(meta, dict) else ""
    if export_refusal(family):
        raise ExportError(export_refusal(family))
    adapters = meta.get("adapters") if isinstance(meta, dict) else None
    size = adapters.get("size") if isinstance(adapters, dict) else None
    if size:
        raise ExportError(f"This {family} model cannot be written in the Hugging Face format: it carries bottleneck "
                          f"adapters (size {size}) after its attention and feed-forward layers, which transformers' "
                          f"classes do not have. Its native checkpoint keeps them: it loads in the explorer and can "
                          f"be fine-tuned again.")


def export_checkpoint(checkpoint_dir: str | Path, out_dir: str | Path, *, name: str = "", license: str = "other",
                      progress: Callable[[float], None] = lambda p: None) -> ExportResult:
    """Write the checkpoint in `checkpoint_dir` as a transformers folder at `out_dir` (replaced
    whole, so a failed export leaves no half-written folder), with its model card (README.md,
    trainer.model_card; `license` one of its LICENSES). progress: percentages, 0 to 100."""
    from models_lib import hf
    from models_lib.checkpoint import load_model
    from trainer.model_card import check_license, write_model_card

    license = check_license(license)  # a sentence before anything is loaded
    checkpoint, out = Path(checkpoint_dir), Path(out_dir)
    try:
        model = load_model(checkpoint, map_location="cpu").eval()
    except (OSError, ValueError) as e:
        raise ExportError(f"The checkpoint {checkpoint.name} cannot be loaded, so it cannot be exported: {e}") from None
    family = str(getattr(model.config, "family", ""))
    if export_refusal(family):
        raise ExportError(export_refusal(family))
    progress(30)
    with staged(out) as staging:
        try:
            hf.to_pretrained(model, staging)
        except (TypeError, ValueError) as e:
            raise ExportError(f"This {family} model cannot be written in the Hugging Face format: {e}") from None
        progress(90)
        hf_config = json.loads((staging / "config.json").read_text(encoding="utf-8"))
        architecture = (hf_config.get("architectures") or [type(model).__name__])[0]
        with_types = bool(getattr(model.config, "type_vocab_size", 0)) and _token_types(family)
        write_tokenizer_files(checkpoint, staging, max_positions=int(getattr(model.config, "max_positions", 512)),
                         with_token_types=with_types)
        write_model_card(checkpoint, staging, fmt="hf", architecture=architecture, name=name or checkpoint.name,
                         license=license, files=sorted(p.name for p in staging.iterdir()))
    progress(100)
    return ExportResult(out, architecture, sorted(p.name for p in out.iterdir()))


def zip_export(result: ExportResult, archive: str | Path, *, top: str,
               progress: Callable[[float], None] = lambda p: None) -> Path:
    """Zip an export's files under one folder `top` (so that unzipping makes one folder) into
    `archive`, written beside it first and moved into place, so a failure leaves no broken zip.
    progress: percentages, 0 to 100 (one step per file)."""
    archive = Path(archive)
    archive.parent.mkdir(parents=True, exist_ok=True)
    tmp = archive.with_name(archive.name + ".tmp")
    try:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for i, name in enumerate(result.files, 1):
                zf.write(result.folder / name, arcname=f"{top}/{name}")
                progress(100 * i / len(result.files))
        os.replace(tmp, archive)
    finally:
        tmp.unlink(missing_ok=True)
    return archive
