"""The model card (README.md) of every export: Hugging Face's format, filled from the run's record.

    write_model_card(checkpoint_dir, out_dir, fmt=..., architecture=..., name=..., license=..., files=...)
    check_license(license) -> the id (ModelCardError with a sentence for one the Hub does not take here)
    read_record(checkpoint_dir) -> dict   what the checkpoint and its run folder say about it

The front matter (library_name, pipeline_tag, tags, license and a model-index of our own held-out
metrics) is built with huggingface_hub's ModelCardData and the written file is read back with
ModelCard.load, so a card the Hub would not parse is never given. Nothing is fetched or pushed.

What the card says comes only from files: the checkpoint's model_config.json, trainer_state.json
(its config, metrics, data_dir and hardware), tokenizer_meta.json and tokenizer.json; its run
folder's test_metrics.json (a fine-tuning run) and RECORD_FILE (what the web app knows that the
files do not: the corpus and tokenizer folders, the dataset and its baselines); the corpus
folder's stats.json and the tokenizer folder's shards. What none of them holds is "not recorded".
A fine-tuned checkpoint's corpus and tokenizer are its base checkpoint's (the config's
`checkpoint`). No torch, no Django.
"""
from __future__ import annotations

import hashlib
import json
import math
import struct
from pathlib import Path
from typing import Any

from trainer.errors import ExportError

RECORD_FILE = "run_record.json"  # in the run folder: {"corpus_dir", "tokenizer_dir", "corpus_name", "dataset"}
NOT_RECORDED = "not recorded"
# SPDX-style ids the Hub's license field accepts, offered by the CLI and the web page.
LICENSES = {"apache-2.0": "Apache License 2.0", "mit": "MIT License",
            "bsd-3-clause": "BSD 3-Clause License", "cc-by-4.0": "Creative Commons Attribution 4.0",
            "cc-by-sa-4.0": "Creative Commons Attribution-ShareAlike 4.0",
            "cc-by-nc-4.0": "Creative Commons Attribution-NonCommercial 4.0", "openrail": "OpenRAIL",
            "other": "another license (say which in this README before sharing the model)"}
LIBRARIES = {"hf": "transformers", "zip": "transformers", "onnx": "onnx", "gguf": "gguf"}
FORMAT_NAMES = {"hf": "Hugging Face transformers", "zip": "Hugging Face transformers", "onnx": "ONNX",
                "gguf": "GGUF"}
# a fine-tuning task -> the Hub's pipeline tag of its head
TASK_PIPELINES = {"classification": "text-classification", "regression": "text-classification",
                  "multilabel": "text-classification", "multiple_choice": "text-classification",
                  "token_classification": "token-classification", "extractive_qa": "question-answering",
                  "text_to_text": "text2text-generation", "sft": "text-generation"}
HEAD_PIPELINES = {"sequence_classification": "text-classification", "multiple_choice": "text-classification",
                  "token_classification": "token-classification", "question_answering": "question-answering"}
MASKED = {"mlm", "t5_mlm"}  # objectives whose head fills in masks
CLEANING_RULES = {"terminal_punct": "lines without terminal punctuation dropped",
                  "min_words": "short lines dropped", "min_sentences": "pages with too few sentences dropped",
                  "no_javascript": "lines mentioning JavaScript dropped",
                  "no_lorem_or_braces": "pages with lorem ipsum or curly braces dropped",
                  "dedup_spans": "repeated three-sentence spans removed", "bad_words": "pages with listed words dropped",
                  "minhash": "near-duplicate pages removed (MinHash)", "gopher_quality": "Gopher quality rules",
                  "gopher_repetition": "Gopher repetition rules", "fineweb_quality": "FineWeb quality rules"}


# A model card that cannot be written as asked (a license the Hub does not take here, ...) stops its export.
ModelCardError = ExportError


def check_license(license: str) -> str:
    """The license id, lower-cased; ModelCardError with a sentence naming the choices for any other."""
    value = str(license or "").strip().lower()
    if value not in LICENSES:
        raise ExportError(f"{license!r} is not a license an export can name; choose one of "
                            f"{', '.join(LICENSES)} (\u201cother\u201d for any other, then say which in the README).")
    return value


# ---------------------------------------------------------------------------- reading the record
def _json(path: Path | None) -> dict[str, Any]:
    """A JSON object from a file, {} when it is missing or broken (the card then says "not recorded")."""
    if path is None:
        return {}
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _run_folder(checkpoint: Path) -> Path | None:
    return checkpoint.parent.parent if checkpoint.parent.name == "checkpoints" else None


def sha256_of(path: Path) -> str | None:
    try:
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        return digest.hexdigest()
    except OSError:
        return None


def parameter_count(weights: Path) -> int | None:
    """The parameters in a safetensors file, from its JSON header alone (no tensor is read)."""
    try:
        with open(weights, "rb") as f:
            size = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(size))
    except (OSError, ValueError, struct.error):
        return None
    total = 0
    for key, entry in header.items():
        if key != "__metadata__" and isinstance(entry, dict):
            total += math.prod(int(n) for n in entry.get("shape", []))
    return total


def _folder(value: Any) -> Path | None:
    if not value:
        return None
    path = Path(str(value))
    return path if path.is_dir() else None


def _base_checkpoint(value: Any) -> Path | None:
    """A fine-tuning config's `checkpoint`: a checkpoint folder, or a run folder (its latest)."""
    path = _folder(value)
    if path is None:
        return None
    if (path / "model_config.json").is_file():
        return path
    found = sorted(p for p in (path / "checkpoints").glob("step-*") if (p / "model_config.json").is_file()) \
        if (path / "checkpoints").is_dir() else []
    return found[-1] if found else None


def read_record(checkpoint_dir: str | Path) -> dict[str, Any]:
    """Everything the card may say, from the files: {"meta", "state", "run_folder", "record",
    "finetune", "base_state", "tokenizer_dir", "corpus_dir", "corpus", "shards", "test_metrics",
    "baselines", "tokenizer_meta", "tokenizer_sha256", "parameters"}."""
    checkpoint = Path(checkpoint_dir)
    meta, state = _json(checkpoint / "model_config.json"), _json(checkpoint / "trainer_state.json")
    run_folder = _run_folder(checkpoint)
    record = _json(run_folder / RECORD_FILE) if run_folder else {}
    config = state.get("config") if isinstance(state.get("config"), dict) else {}
    finetune = bool(meta.get("task")) or "dataset" in config
    base = _base_checkpoint(config.get("checkpoint")) if finetune else None
    base_state = _json(base / "trainer_state.json") if base else {}
    base_run = _run_folder(base) if base else None
    pre_state, pre_run = (base_state, base_run) if finetune else (state, run_folder)
    base_record = _json(base_run / RECORD_FILE) if finetune and base_run else record
    tokenizer_dir = next((p for p in (_folder(base_record.get("tokenizer_dir")), _folder(pre_state.get("data_dir")),
                                      _folder(pre_run / "tokenizer") if pre_run else None) if p is not None), None)
    corpus_dir = next((p for p in (_folder(base_record.get("corpus_dir")),
                                   _folder(pre_run / "corpus") if pre_run else None,
                                   _folder(tokenizer_dir.parent / "corpus") if tokenizer_dir else None)
                       if p is not None and (p / "stats.json").is_file()), None)
    shards = {split: _json(tokenizer_dir / "shards" / split / "shard.json") for split in ("train", "valid")} \
        if tokenizer_dir else {}
    test_metrics: dict[str, Any] = {}
    if finetune and run_folder is not None:
        latest = sorted(p.name for p in (run_folder / "checkpoints").glob("step-*") if p.is_dir()
                        and not p.name.endswith((".tmp", ".old")))
        if latest and latest[-1] == checkpoint.name:  # the run's test split scored its last checkpoint
            test_metrics = _json(run_folder / "test_metrics.json")
    dataset = record.get("dataset") if isinstance(record.get("dataset"), dict) else {}
    baselines = dataset.get("baselines") if isinstance(dataset.get("baselines"), dict) else {}
    if not baselines and run_folder is not None:
        baselines = _json(run_folder / "baselines.json")
    return {"meta": meta, "state": state, "run_folder": run_folder, "record": record, "finetune": finetune,
            "base": base, "base_state": base_state, "pre_state": pre_state, "base_record": base_record,
            "tokenizer_dir": tokenizer_dir, "corpus_dir": corpus_dir,
            "corpus": _json(corpus_dir / "stats.json") if corpus_dir else {}, "shards": shards,
            "test_metrics": test_metrics, "dataset": dataset, "baselines": baselines,
            "tokenizer_meta": _json(checkpoint / "tokenizer_meta.json"),
            "tokenizer_sha256": sha256_of(checkpoint / "tokenizer.json"),
            "parameters": parameter_count(checkpoint / "model.safetensors")}


# ---------------------------------------------------------------------------- what it is
def _family(rec: dict) -> str:
    return str(rec["meta"].get("family") or rec["state"].get("family") or "")


def _explorer_kind(family: str) -> str:
    from trainer import families

    found = families.find(family)
    return found.explorer_kind if found is not None else ""


def _task(rec: dict) -> str:
    config = rec["state"].get("config") or {}
    return str(config.get("task") or "") if rec["finetune"] else ""


def pipeline_tag(rec: dict) -> str:
    """The Hub's pipeline tag for what the checkpoint's head does."""
    family, task = _family(rec), _task(rec)
    if rec["finetune"]:
        if family == "t5" and task in ("classification", "regression", "text_to_text"):
            return "text2text-generation"  # T5 writes the label as text
        if task in TASK_PIPELINES:
            return TASK_PIPELINES[task]
        head = (rec["meta"].get("task") or {}).get("task") if isinstance(rec["meta"].get("task"), dict) else ""
        return HEAD_PIPELINES.get(str(head), "feature-extraction")
    kind = _explorer_kind(family)
    if kind == "gpt":
        return "text-generation"
    if kind == "t5":
        return "text2text-generation"
    objectives = set(rec["state"].get("objectives") or [])
    if objectives & MASKED and family != "electra":  # ELECTRA's export is its discriminator
        return "fill-mask"
    return "feature-extraction"


def _objectives(rec: dict) -> list[str]:
    own = [str(o) for o in rec["state"].get("objectives") or []]
    base = [str(o) for o in rec["pre_state"].get("objectives") or []] if rec["finetune"] else []
    return list(dict.fromkeys(base + own))


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value) else None


def _metrics(values: Any) -> dict[str, float]:
    """The numeric held-out metrics of a split (train-only bookkeeping such as lr left out)."""
    if not isinstance(values, dict):
        return {}
    return {k: v for k, v in ((k, _finite(v)) for k, v in values.items()) if v is not None}


def held_out(rec: dict) -> dict[str, dict[str, float]]:
    """{"validation": {...}, "test": {...}} of the checkpoint as recorded."""
    metrics = rec["state"].get("metrics") or {}
    out = {"validation": _metrics(metrics.get("valid")) if isinstance(metrics, dict) else {},
           "test": _metrics(rec["test_metrics"])}
    return {split: values for split, values in out.items() if values}


def eval_results(rec: dict, *, model_name: str, task_type: str) -> list:
    """The model-index rows: validation loss and perplexity of a pre-training checkpoint; every
    validation and test metric of a fine-tuned one."""
    from huggingface_hub import EvalResult

    dataset_name = (str(rec["dataset"].get("name") or "") or Path(str((rec["state"].get("config") or {})
                                                                        .get("dataset") or "dataset")).name) \
        if rec["finetune"] else (str(rec["base_record"].get("corpus_name") or "")
                                 or str((rec["corpus"].get("original_filename") or "")) or "pre-training corpus")
    rows = []
    for split, values in held_out(rec).items():
        keys = [k for k in values if k in ("loss", "perplexity")] if not rec["finetune"] else list(values)
        for key in keys:
            rows.append(EvalResult(task_type=task_type, dataset_type="lm-workbench", dataset_name=dataset_name,
                                   dataset_split=split, metric_type=key, metric_name=f"{split} {key}",
                                   metric_value=values[key]))
    return rows


# ---------------------------------------------------------------------------- the text
def _num(value: Any, fmt: str = ",") -> str:
    if value is None or value == "":
        return NOT_RECORDED
    if isinstance(value, float) and fmt == ",":
        return f"{value:.4g}"
    try:
        return format(value, fmt)
    except (TypeError, ValueError):
        return str(value)


def _table(rows: list[tuple[str, Any]]) -> str:
    lines = ["| | |", "|---|---|"]
    lines += [f"| {k} | {v if v not in (None, '') else NOT_RECORDED} |" for k, v in rows]
    return "\n".join(lines)


def _duration(seconds: Any) -> str:
    s = _finite(seconds)
    if s is None:
        return NOT_RECORDED
    h, rest = divmod(int(round(s)), 3600)
    m, sec = divmod(rest, 60)
    return f"{h}h {m:02d}m {sec:02d}s" if h else f"{m}m {sec:02d}s" if m else f"{s:.1f} s"


def corpus_section(rec: dict) -> str:
    corpus, shards = rec["corpus"], rec["shards"]
    if not corpus and not any(shards.values()):
        return "## Corpus\n\nThe pre-training corpus is not recorded with this checkpoint (an imported model, or " \
               "its corpus folder is gone).\n"
    stats = corpus.get("stats") or {}
    files = ((stats.get("input") or {}).get("file_list") or []) if isinstance(stats.get("input"), dict) else []
    sources = ", ".join(f"{f.get('name')} ({_num(f.get('bytes'))} bytes)" for f in files[:10]) if files else \
        str(rec["base_record"].get("corpus_name") or corpus.get("original_filename") or "") or NOT_RECORDED
    if len(files) > 10:
        sources += f" and {len(files) - 10} more"
    tokens = {split: (shards.get(split) or {}).get("n_tokens") for split in ("train", "valid")}
    options = corpus.get("options") if isinstance(corpus.get("options"), dict) else None
    rules = ", ".join(CLEANING_RULES.get(k, k) for k, on in options.items() if on) if options is not None else None
    removed = corpus.get("removed") if isinstance(corpus.get("removed"), dict) else None
    removed_text = ", ".join(f"{k.replace('_', ' ')}: {_num(v)}" for k, v in removed.items()) if removed else \
        ("nothing" if removed is not None else None)
    rows = [("Sources", sources), ("Input bytes", _num((stats.get("input") or {}).get("bytes")
                                                       if isinstance(stats.get("input"), dict) else None)),
            ("Bytes after cleaning", _num(stats.get("bytes"))), ("Documents", _num(stats.get("documents"))),
            ("Sentences", _num(stats.get("sentences"))),
            ("Train / validation documents", f"{_num((stats.get('train') or {}).get('documents'))} / "
                                             f"{_num((stats.get('valid') or {}).get('documents'))}"),
            ("Tokens (train / validation)", f"{_num(tokens['train'])} / {_num(tokens['valid'])}"),
            ("Validation share", _num(corpus.get("valid_fraction"))),
            ("Cleaning rules", (rules or "none (the text as read)") if rules is not None else NOT_RECORDED),
            ("Removed by the rules", removed_text)]
    return "## Corpus\n\n" + _table(rows) + "\n"


def tokenizer_section(rec: dict) -> str:
    meta, state = rec["tokenizer_meta"], rec["state"]
    recorded = state.get("tokenizer_sha256") or rec["pre_state"].get("tokenizer_sha256")
    sha = rec["tokenizer_sha256"]
    rows = [("Kind", meta.get("algorithm")), ("Vocabulary size", _num(meta.get("vocab_size"))),
            ("Lower-cased", {True: "yes", False: "no"}.get(meta.get("lowercase"))),
            ("Sentinel tokens (extra_ids)", _num(meta.get("extra_ids"))),
            ("Special tokens", ", ".join(f"{k}={v}" for k, v in (meta.get("special_token_strings") or {}).items())),
            ("sha256 of tokenizer.json", f"`{sha}`" if sha else None)]
    note = ""
    if sha and recorded and recorded != sha:
        note = f"\nThe run recorded another tokenizer (sha256 `{recorded}`) than the one in this checkpoint.\n"
    return "## Tokenizer\n\n" + _table(rows) + "\n" + note


def model_section(rec: dict, architecture: str, fmt: str) -> str:
    config = rec["meta"].get("config") or {}
    run_config = rec["pre_state"].get("config") or {}
    rows = [("Family", _family(rec)), ("Preset", run_config.get("preset")),
            ("Exported as", f"`{architecture}` ({FORMAT_NAMES.get(fmt, fmt)})"),
            ("Layers", _num(config.get("num_layers"))), ("Hidden size", _num(config.get("hidden_size"))),
            ("Attention heads", _num(config.get("num_heads"))),
            ("Feed-forward size", _num(config.get("intermediate_size"))),
            ("Parameters", _num(rec["parameters"])),
            ("Pre-training objective(s)", ", ".join(_objectives(rec)) or None)]
    if rec["finetune"]:
        task = rec["meta"].get("task") if isinstance(rec["meta"].get("task"), dict) else {}
        rows.append(("Fine-tuned for", _task(rec).replace("_", " ") or task.get("task")))
        if task.get("labels"):
            rows.append(("Labels", ", ".join(str(x) for x in task["labels"])))
    return "## Model\n\n" + _table(rows) + "\n"


def _training_rows(state: dict) -> list[tuple[str, Any]]:
    config = state.get("config") or {}
    hardware = state.get("hardware") if isinstance(state.get("hardware"), dict) else {}
    batch = config.get("batch_size")
    tokens_per_step = ""
    if batch and (config.get("seq_len") or config.get("max_length")):
        tokens_per_step = f" x {config.get('seq_len') or config.get('max_length')} tokens"
    accum, devices = config.get("grad_accum") or 1, hardware.get("devices") or config.get("devices") or 1
    schedule = config.get("schedule")
    if schedule:
        warmup = config.get("warmup_steps") if "warmup_steps" in config else config.get("warmup_ratio")
        schedule = f"{schedule}, {config.get('optimizer', 'optimizer ' + NOT_RECORDED)} at lr {config.get('lr')}" + \
            (f", warm-up {warmup}" if warmup else "")
    precision = hardware.get("precision") or config.get("precision")
    device = f"{hardware.get('name')} ({hardware.get('device')}) x {devices}" if hardware else None
    return [("Steps", _num(state.get("step"))), ("Tokens seen", _num(state.get("tokens_seen"))),
            ("Batch", f"{batch}{tokens_per_step} per device, gradient accumulation {accum}, {devices} device(s)"
             if batch else None),
            ("Schedule", schedule), ("Precision", precision), ("Hardware", device),
            ("Wall time", _duration(state.get("elapsed_s"))), ("Seed", _num(config.get("seed")))]


def training_section(rec: dict) -> str:
    out = "## Training\n\n"
    if rec["finetune"]:
        if rec["pre_state"]:
            out += "Pre-training (the base checkpoint):\n\n" + _table(_training_rows(rec["pre_state"])) + "\n\n"
        else:
            out += "Pre-training (the base checkpoint): not recorded.\n\n"
        dataset = rec["dataset"].get("name") or Path(str((rec["state"].get("config") or {}).get("dataset") or "")).name
        out += f"Fine-tuning on {dataset or 'a dataset ' + NOT_RECORDED}:\n\n"
    if not rec["state"]:
        return out + "Not recorded (this checkpoint has no trainer_state.json: an imported model).\n"
    return out + _table(_training_rows(rec["state"])) + "\n"


def evaluation_section(rec: dict) -> str:
    metrics = held_out(rec)
    out = "## Evaluation\n\nOn LM Workbench's own held-out splits"
    if not metrics:
        return out + ": not recorded.\n"
    if not rec["finetune"]:
        valid = metrics.get("validation", {})
        return (out + " (the corpus's validation documents, as last evaluated before this checkpoint):\n\n"
                + _table([("Validation loss", _num(valid.get("loss"), ".4f") if "loss" in valid else None),
                          ("Validation perplexity", _num(valid.get("perplexity"), ".2f")
                           if "perplexity" in valid else None)]
                         + [(f"Validation {k}", _num(v, ".4f")) for k, v in valid.items()
                            if k not in ("loss", "perplexity")]) + "\n")
    baselines = rec["baselines"].get("baselines") if isinstance(rec["baselines"], dict) else None
    rows = [row for row in baselines or [] if isinstance(row, dict)]
    splits = [s for s in ("test", "validation") if s in metrics]
    keys = list(dict.fromkeys(k for s in splits for k in metrics[s]))
    header = "| Metric | " + " | ".join(f"this model ({s})" for s in splits) + \
        "".join(f" | {row.get('label') or row.get('name')} ({s})" for row in rows for s in splits) + " |"
    lines = [header, "|---" * (1 + len(splits) * (1 + len(rows))) + "|"]
    for key in keys:
        cells = [_num(metrics[s].get(key), ".4f") if key in metrics[s] else "" for s in splits]
        cells += [_num(((row.get(s) or {}).get(key)), ".4f") if key in (row.get(s) or {}) else ""
                  for row in rows for s in splits]
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    note = "" if rows else "\nBaselines: not recorded.\n"
    return out + ":\n\n" + "\n".join(lines) + "\n" + note


AUTO_CLASSES = {"ForSequenceClassification": "AutoModelForSequenceClassification",
                "ForTokenClassification": "AutoModelForTokenClassification",
                "ForQuestionAnswering": "AutoModelForQuestionAnswering",
                "ForConditionalGeneration": "AutoModelForSeq2SeqLM", "LMHeadModel": "AutoModelForCausalLM",
                "ForMaskedLM": "AutoModelForMaskedLM", "ForPreTraining": "AutoModelForPreTraining",
                "DoubleHeadsModel": "GPT2DoubleHeadsModel"}  # no Auto class has GPT-1's multiple choice
MULTIPLE_CHOICE = """
GPT-1's multiple choice: read each choice as `[start] context [delimiter] choice [extract]`, where
start, delimiter and extract are the ids {start}, {delimiter} and {extract} (not in the tokenizer; add
them to the ids it gives with `add_special_tokens=False`). Pass input_ids of shape (batch, choices,
length) and mc_token_ids = the position of each choice's extract token; the softmax of `mc_logits`
over the choices gives their probabilities.
"""


def auto_class(architecture: str) -> str:
    for suffix, auto in AUTO_CLASSES.items():
        if architecture.endswith(suffix):
            return auto
    return "AutoModel"


def _hf_config(out: Path) -> dict:
    return _json(out / "config.json")


def loading_section(rec: dict, fmt: str, architecture: str, out: Path, files: list[str]) -> str:
    if fmt in ("hf", "zip"):
        auto = auto_class(architecture)
        imports = "AutoModel" if auto == "AutoModel" else auto
        text = f"""## How to load it (transformers)

```python
from transformers import {imports}, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained("PATH/TO/THIS/FOLDER")
model = {auto}.from_pretrained("PATH/TO/THIS/FOLDER")
inputs = tokenizer("a sentence", return_tensors="pt")
outputs = model(**inputs)
```
"""
        hf = _hf_config(out)
        labels = hf.get("id2label") if architecture != "GPT2DoubleHeadsModel" else None
        if labels:
            text += f"\nLabels (id2label): {json.dumps(labels, ensure_ascii=False)}\n"
        if architecture == "GPT2DoubleHeadsModel" and {"start_token_id", "delimiter_token_id",
                                                       "extract_token_id"} <= set(hf):
            text += MULTIPLE_CHOICE.format(start=hf["start_token_id"], delimiter=hf["delimiter_token_id"],
                                           extract=hf["extract_token_id"])
        return text
    if fmt == "onnx":
        model = next((f for f in files if f.endswith(".onnx")), "model.onnx")
        return f"""## How to load it (onnxruntime)

```python
import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

tokenizer = Tokenizer.from_file("PATH/TO/THIS/FOLDER/tokenizer.json")
session = ort.InferenceSession("PATH/TO/THIS/FOLDER/{model}")
ids = np.array([tokenizer.encode("a sentence").ids], dtype=np.int64)
names = [i.name for i in session.get_inputs()]
feeds = {{"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}}
outputs = session.run(None, {{name: feeds[name] for name in names if name in feeds}})
```

Files: {", ".join(f"`{f}`" for f in files) or NOT_RECORDED}.
"""
    model = next((f for f in files if f.endswith(".gguf")), "model.gguf")
    config = rec["meta"].get("config") if isinstance(rec["meta"].get("config"), dict) else {}
    # transformers' GGUF reader takes gpt2.context_length as n_ctx and never reads feed_forward_length,
    # so a model with other than GPT-2's 1024 positions or 4 x hidden feed-forward needs them named
    sizes = "".join(f", {name}={config[key]}" for name, key, usual in (
        ("n_positions", "max_position_embeddings", 1024), ("n_inner", "intermediate_size", None))
        if isinstance(config.get(key), int) and config[key] != (usual if usual is not None
                                                               else 4 * int(config.get("hidden_size") or 0)))
    return f"""## How to load it (llama.cpp, Ollama, transformers)

```sh
llama-cli -m {model} -p "Once upon a time"          # llama.cpp
printf 'FROM ./{model}\\n' > Modelfile && ollama create my-model -f Modelfile && ollama run my-model
```

```python
from transformers import AutoModelForCausalLM, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained("PATH/TO/THIS/FOLDER", gguf_file="{model}")
model = AutoModelForCausalLM.from_pretrained("PATH/TO/THIS/FOLDER", gguf_file="{model}"{sizes})
```
{_gguf_prompt_note(out)}"""


def _gguf_prompt_note(out: Path) -> str:
    """What the tokenizer does that llama.cpp's GPT-2 tokenizer does not (lower-casing, a space before
    the text), read from the export's tokenizer.json; "" when it does neither."""
    data = _json(out / "tokenizer.json")
    normalizer = data.get("normalizer") if isinstance(data.get("normalizer"), dict) else {}
    steps = normalizer.get("normalizers") or [normalizer] if normalizer.get("type") == "Sequence" else [normalizer]
    lower = any(isinstance(step, dict) and step.get("type") == "Lowercase" for step in steps)
    pre = data.get("pre_tokenizer") if isinstance(data.get("pre_tokenizer"), dict) else {}
    space = bool(pre.get("add_prefix_space"))
    does = [what for what, on in (("lower-cases the text", lower), ("begins it with a space", space)) if on]
    if not does:
        return ""
    return (f"\nThe tokenizer this model was trained with {' and '.join(does)}; llama.cpp does not, so write "
            f"the prompt that way yourself to get the ids the model was trained on.\n")


POOLING = """## Sentence embeddings (mean pooling)

LM Workbench's explorer and its checks of a checkpoint compare sentences by the mean of the last
layer's token vectors over the real (unpadded) tokens. To get the same vectors:

```python
import torch
from transformers import AutoModel, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained("PATH/TO/THIS/FOLDER")
encoder = AutoModel.from_pretrained("PATH/TO/THIS/FOLDER")
batch = tokenizer(["a sentence", "another one"], padding=True, return_tensors="pt")
hidden = encoder(**batch).last_hidden_state
mask = batch["attention_mask"].unsqueeze(-1).float()
vectors = (hidden * mask).sum(1) / mask.sum(1)
```
"""


def limitations_section(rec: dict, fmt: str) -> str:
    size = rec["corpus"].get("stats", {}).get("bytes") if isinstance(rec["corpus"].get("stats"), dict) else None
    lines = ["## Limitations", "",
             f"- It knows only its pre-training corpus ({_num(size)} bytes of text after cleaning) and carries "
             "that text's biases and gaps; nothing here was checked for harmful or private content.",
             "- Its scores above are on LM Workbench's held-out splits of the same data, not on a public "
             "benchmark; they do not say how it does on other text."]
    if not rec["finetune"]:
        lines.append("- It is a pre-trained model, not fine-tuned for any task: fine-tune it before relying on "
                     "its outputs.")
    else:
        lines.append("- A fine-tuned model predicts only the labels or outputs of its dataset.")
    if fmt == "gguf":
        lines.append("- The GGUF file holds the weights and the tokenizer for llama.cpp-style runtimes; check its "
                     "outputs against the original checkpoint before relying on them.")
    if fmt == "onnx":
        lines.append("- The ONNX graph has the export's fixed inputs and opset; other runtimes may differ slightly "
                     "in their numbers.")
    return "\n".join(lines) + "\n"


def _tags(rec: dict, fmt: str) -> list[str]:
    tags = ["lm-workbench", _family(rec), *_objectives(rec), {"zip": "hf"}.get(fmt, fmt)]
    if fmt in ("hf", "zip"):
        tags.append("safetensors")
    if rec["finetune"] and _task(rec):
        tags.append(_task(rec).replace("_", "-"))
    return [t for t in dict.fromkeys(tags) if t]


def write_model_card(checkpoint_dir: str | Path, out_dir: str | Path, *, fmt: str, architecture: str,
                     name: str = "", license: str = "other", files: list[str] | None = None) -> Path:
    """Write out_dir/README.md, the model card of the `fmt` export ("hf", "onnx", "gguf") of the
    checkpoint in checkpoint_dir, and return its path. license: one of LICENSES (ModelCardError with a
    sentence for any other); files: the export's files the card names (default: out_dir's)."""
    from huggingface_hub import ModelCard, ModelCardData

    license = check_license(license)
    if fmt not in LIBRARIES:
        raise ExportError(f"There is no model card for the {fmt!r} format; the formats are "
                            f"{', '.join(k for k in LIBRARIES if k != 'zip')}.")
    checkpoint, out = Path(checkpoint_dir), Path(out_dir)
    rec = read_record(checkpoint)
    files = sorted(files) if files is not None else sorted(p.name for p in out.iterdir() if p.name != "README.md")
    title = name or checkpoint.name
    tag = pipeline_tag(rec)
    results = eval_results(rec, model_name=title, task_type=tag)
    data = ModelCardData(library_name=LIBRARIES[fmt], pipeline_tag=tag, tags=_tags(rec, fmt), license=license,
                         model_name=title if results else None, eval_results=results or None)
    kind = "fine-tuned" if rec["finetune"] else "pre-trained"
    intro = (f"# {title}\n\nA {_family(rec) or 'language'} model {kind} with LM Workbench on the user's own "
             f"{'labelled dataset' if rec['finetune'] else 'corpus'}, exported from the checkpoint "
             f"`{checkpoint.name}` as `{architecture}` in the {FORMAT_NAMES[fmt]} format. License: {license} "
             f"({LICENSES[license]}).\n")
    sections = [intro, loading_section(rec, fmt, architecture, out, files), model_section(rec, architecture, fmt),
                corpus_section(rec), tokenizer_section(rec), training_section(rec), evaluation_section(rec)]
    if _explorer_kind(_family(rec)) in ("encoder", "unilm") and not rec["finetune"]:
        sections.append(POOLING)
    sections.append(limitations_section(rec, fmt))
    card = ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(sections))
    path = out / "README.md"
    card.save(path)
    try:  # read back as the Hub reads it: a card it could not parse is not given
        ModelCard.load(path)
    except Exception as e:  # noqa: BLE001 - huggingface_hub's parse errors have several types
        path.unlink(missing_ok=True)
        raise ExportError(f"The model card of this export could not be written as the Hub reads it ({e}).") \
            from None
    return path
