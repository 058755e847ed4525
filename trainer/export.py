"""Export a checkpoint to the Hugging Face `transformers` format (a folder `from_pretrained` loads).

    export_checkpoint(checkpoint_dir, out_dir) -> ExportResult(folder, architecture, files)
    zip_export(result, archive, top=...)        the folder as one zip (what the web page downloads)

The weights and config.json come from models_lib.hf.to_pretrained: a fine-tuned checkpoint of an
encoder family is written as transformers' {Bert,Roberta,Albert,Electra,DistilBert}For{Sequence,
Token}Classification / ForQuestionAnswering with id2label / label2id and problem_type; a
pre-training checkpoint as its pre-training class (BertForPreTraining, ...), T5 and GPT-2 as their
LM-head models. Beside them: the checkpoint's own tokenizer.json and the tokenizer_config.json /
special_tokens_map.json that let transformers' AutoTokenizer read it as a PreTrainedTokenizerFast
with the same special tokens, and a README.md saying how to load it. No transformers import here.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from trainer.errors import UserError

README = """# {name}

Exported by LM Workbench from the checkpoint `{checkpoint}` as transformers' `{architecture}`.

```python
from transformers import AutoModel{auto}, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained("PATH/TO/THIS/FOLDER")
model = {auto_class}.from_pretrained("PATH/TO/THIS/FOLDER")
inputs = tokenizer("a sentence", return_tensors="pt")
outputs = model(**inputs)
```
{labels}"""

AUTO_CLASSES = {"ForSequenceClassification": "AutoModelForSequenceClassification",
                "ForTokenClassification": "AutoModelForTokenClassification",
                "ForQuestionAnswering": "AutoModelForQuestionAnswering",
                "ForConditionalGeneration": "AutoModelForSeq2SeqLM", "LMHeadModel": "AutoModelForCausalLM",
                "ForMaskedLM": "AutoModelForMaskedLM", "ForPreTraining": "AutoModelForPreTraining",
                "DoubleHeadsModel": "GPT2DoubleHeadsModel"}  # no Auto class has GPT-1's multiple choice
MULTIPLE_CHOICE_README = """
GPT-1's multiple choice: read each choice as `[start] context [delimiter] choice [extract]`, where
start, delimiter and extract are the ids {start}, {delimiter} and {extract} (not in the tokenizer; add
them to the ids it gives with `add_special_tokens=False`). Pass input_ids of shape (batch, choices,
length) and mc_token_ids = the position of each choice's extract token; the softmax of `mc_logits`
over the choices gives their probabilities.
"""


FORMATS = {"hf": "a folder transformers' from_pretrained loads",
           "zip": "that folder as a zip (what the web page's \u201cExport HF\u201d downloads)"}


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


class ExportError(UserError):
    """The checkpoint cannot be exported; the message says why."""


@dataclass(frozen=True)
class ExportResult:
    folder: Path
    architecture: str
    files: list[str]


def _auto_class(architecture: str) -> str:
    for suffix, auto in AUTO_CLASSES.items():
        if architecture.endswith(suffix):
            return auto
    return "AutoModel"


def write_tokenizer_files(checkpoint: Path, out: Path, *, max_positions: int, with_token_types: bool) -> None:
    """tokenizer.json as it is, and the configs that name its special tokens for transformers."""
    meta = json.loads((checkpoint / "tokenizer_meta.json").read_text(encoding="utf-8"))
    shutil.copyfile(checkpoint / "tokenizer.json", out / "tokenizer.json")
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(checkpoint / "tokenizer.json"))
    special = {f"{role}_token": tok.id_to_token(int(i)) for role, i in (meta.get("special_tokens") or {}).items()
               if role in ("pad", "unk", "cls", "sep", "mask") and tok.id_to_token(int(i)) is not None}
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": int(max_positions),
              "model_input_names": ["input_ids", *(["token_type_ids"] if with_token_types else []), "attention_mask"],
              "clean_up_tokenization_spaces": False, **special}
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    (out / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n", encoding="utf-8")


def check_exportable(checkpoint_dir: str | Path) -> None:
    """ExportError, before anything is loaded, for what export_checkpoint would refuse that the
    checkpoint's model_config.json already says: an ELMo model, a model with bottleneck adapters.
    Reads JSON only (no torch), so a web request can ask before queuing the export."""
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


def export_checkpoint(checkpoint_dir: str | Path, out_dir: str | Path, *, name: str = "",
                      progress: Callable[[float], None] = lambda p: None) -> ExportResult:
    """Write the checkpoint in `checkpoint_dir` as a transformers folder at `out_dir` (replaced
    whole, so a failed export leaves no half-written folder). progress: percentages, 0 to 100."""
    from models_lib import hf
    from models_lib.checkpoint import load_model

    checkpoint, out = Path(checkpoint_dir), Path(out_dir)
    try:
        model = load_model(checkpoint, map_location="cpu").eval()
    except (OSError, ValueError) as e:
        raise ExportError(f"The checkpoint {checkpoint.name} cannot be loaded, so it cannot be exported: {e}") from None
    family = str(getattr(model.config, "family", ""))
    if export_refusal(family):
        raise ExportError(export_refusal(family))
    progress(30)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
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
        auto = _auto_class(architecture)
        labels = hf_config.get("id2label") if architecture != "GPT2DoubleHeadsModel" else None
        (staging / "README.md").write_text(README.format(
            name=name or checkpoint.name, checkpoint=checkpoint.name, architecture=architecture,
            auto=f", {auto}" if auto != "AutoModel" else "", auto_class=auto,
            labels=f"\nLabels (id2label): {json.dumps(labels, ensure_ascii=False)}\n" if labels else "")
            + (MULTIPLE_CHOICE_README.format(start=hf_config["start_token_id"], delimiter=hf_config["delimiter_token_id"],
                                             extract=hf_config["extract_token_id"])
               if architecture == "GPT2DoubleHeadsModel" else ""),
            encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)
        os.replace(staging, out)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
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
