"""Stand-alone training: `python -m trainer run config.yaml [--resume]` (no Django, no Redis),
fine-tuning: `python -m trainer finetune config.yaml` (see cmd_finetune for its YAML), and GPT-3's
in-context evaluation: `python -m trainer incontext --checkpoint DIR --dataset DIR --k-max N`.
What the web pages do with models, from the command line: `import DIR_OR_ARCHIVE OUT` (a Hugging
Face model as a checkpoint), `export CHECKPOINT OUT [--format hf|zip|onnx|gguf] [--license ID]` (a checkpoint in the
Hugging Face format, ONNX or GGUF), `evaluate CHECKPOINT DATASET` (a fine-tuned checkpoint's test report)
and `serve PATH` (an OpenAI-compatible server for one checkpoint: trainer.serve).
Long steps draw a progress bar when the command runs in a terminal (trainer.progress.TerminalBar).

The YAML file holds the RunConfig fields plus:
  corpus:      the raw corpus: a file, a folder, a glob, or a list of them (relative paths: from the
               YAML file's folder), in .txt, .jsonl/.json, .parquet or Arrow (a save_to_disk folder),
               the text ones optionally gzip-, zstd- or bz2-compressed, mixed freely
  text_field:  the JSON field or Parquet/Arrow column holding the text (default: text)
  tokenizer:   {algorithm: wordpiece, vocab_size: 8000, lowercase: true, extra_ids: 0} (the algorithm
               defaults to the family's: bpe for RoBERTa and GPT, unigram for ALBERT and T5,
               wordpiece otherwise; extra_ids, T5's sentinel tokens, defaults to 100 for T5, else 0)
  output_dir:  where everything goes (relative paths: from the YAML file's folder)
  cleaning:    optional C4 rules, e.g. {terminal_punct: true, min_words: true}
  valid_fraction: optional share of documents held out for validation (default 0.05)

output_dir/ gets corpus/ (cleaned text), tokenizer/ (tokenizer + shards/), checkpoints/ and
metrics.jsonl.

Several devices: `--devices N` (or `devices:` in the YAML) prepares the data, then hands the run
to torchrun (torch.distributed.run, --standalone), which starts N copies of this command; each
sees torchrun's WORLD_SIZE and trains as one rank (trainer.training.distributed). Several
machines: the same command on each with `--nnodes M --node-rank R --rdzv-endpoint host:port`
(c10d rendezvous at host:port, a machine of the run); output_dir should be on a filesystem they
share (checkpoints are written by global rank 0, resume reads them on every machine). A DistilBERT run's teacher_checkpoint is a checkpoint folder (relative paths: from
the YAML file's folder). Preparation steps whose outputs exist are skipped. Ctrl-C stops after the
current step and saves a checkpoint (none when one was saved after the last logged loss: a resume
trains those few steps again); `--resume` continues from the latest one. A problem
the user can fix is printed as one line on stderr and the exit code is 2.
"""
from __future__ import annotations

import argparse
import contextlib
import errno
import dataclasses
import json
import os
import re
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

import yaml

from trainer.errors import ConfigError, InferenceError, UserError

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130
RUN_FILE_KEYS = ("corpus", "tokenizer", "output_dir", "cleaning", "valid_fraction", "text_field")
TOKENIZER_DEFAULTS = {"algorithm": "wordpiece", "vocab_size": 8000, "lowercase": True}
TOKENIZER_KEYS = (*TOKENIZER_DEFAULTS, "extra_ids")  # extra_ids: T5's sentinel tokens (absent = 0)


@dataclass
class RunFile:
    """A parsed run YAML: where the data is, how to tokenize it, and the RunConfig."""

    corpus: list  # trainer.prep.sources.SourceFile, in reading order
    output_dir: Path
    config: Any  # RunConfig
    tokenizer: dict[str, Any] = field(default_factory=lambda: dict(TOKENIZER_DEFAULTS))
    cleaning: dict[str, bool] = field(default_factory=dict)
    valid_fraction: float = 0.05
    text_field: str = "text"

    @property
    def corpus_label(self) -> str:
        return self.corpus[0].name if len(self.corpus) == 1 else f"{len(self.corpus)} files"

    @property
    def corpus_dir(self) -> Path:
        return self.output_dir / "corpus"

    @property
    def tokenizer_dir(self) -> Path:
        return self.output_dir / "tokenizer"


IMPORT_EXAMPLES = """examples:
  python -m trainer import ./bert-base-uncased ./checkpoints/bert-base     # a folder save_pretrained() wrote
  python -m trainer import ./my-model.zip ./checkpoints/my-model           # or a .zip / .tar.gz / .tgz / .tar of one
"""
EXPORT_EXAMPLES = """examples:
  python -m trainer export out/checkpoints/step-00000300 ./hf-model        # a folder transformers loads
  python -m trainer export out ./model-hf.zip                              # a run folder: its latest checkpoint, zipped
  python -m trainer export ft-out ./model-onnx --format onnx               # model.onnx (T5: encoder + decoder), checked in onnxruntime
  python -m trainer export gpt-out ./model-gguf --format gguf              # a GPT-2 run: model.gguf for llama.cpp / Ollama
"""
EVALUATE_EXAMPLES = """examples:
  python -m trainer evaluate ft-out/checkpoints/step-00000300 ft-out/dataset          # its test split
  python -m trainer evaluate ft-out reviews-2024.csv --out report/                    # every row of a file
  python -m trainer evaluate ft-out ft-out/dataset --split validation
"""


SERVE_EXAMPLES = """examples:
  python -m trainer serve out                                  # a run folder: its latest checkpoint, on 127.0.0.1:8000
  python -m trainer serve out/checkpoints/step-00000300 --port 9000 --api-key-file keys.txt
  LMWB_SERVE_API_KEYS=sk-local python -m trainer serve ft-out --host 0.0.0.0 --name my-gpt

then, with the official client (pip install openai):
  from openai import OpenAI
  client = OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="sk-local")
  client.completions.create(model="my-gpt", prompt="The cat", max_tokens=20)
"""


FINETUNE_EXAMPLES = """examples:
  python -m trainer finetune examples/finetune-classification.yaml     # a demo dataset, a tiny checkpoint
  python -m trainer finetune my-task.yaml                               # then: evaluate, export

The YAML names `checkpoint` (a checkpoint folder, a run's folder or an imported model), `dataset`
(a prepared folder, such as the web app's var/datasets/<id>; {demo: NAME}; {file: PATH}; or
{train: PATH, validation: PATH, test: PATH}), `output_dir` and any fine-tuning setting (task,
max_steps or epochs, batch_size, lr, ...). The run ends with its test split's report.
"""


RUN_EXAMPLES = """examples:
  python -m trainer demo-corpus examples/demo.txt                  # the corpus examples/bert-tiny.yaml names
  python -m trainer run examples/bert-tiny.yaml                    # prepare, then pre-train (Ctrl-C: a checkpoint)
  python -m trainer run examples/bert-tiny.yaml --resume           # on from its latest checkpoint
  python -m trainer run examples/gpt-tiny.yaml --devices 2         # two processes on this machine (torchrun)

The YAML names the data: corpus (a file, a folder, a glob or a list of them: .txt, .jsonl/.json,
.parquet or Arrow, plain or gzip-, zstd- or bz2-compressed), text_field, tokenizer ({algorithm,
vocab_size, lowercase, extra_ids}), output_dir, cleaning (C4 rules) and valid_fraction; and any of
the training settings:
{settings}
Each setting's meaning and bounds are in the web app's launch form (Runs > New run), the
examples/*.yaml files show them commented, and README.md ("The command line") says how long a
run trains.
"""
TRAIN_EXAMPLES = """examples:
  python -m trainer train config.yaml --data runs/bert-tiny/tokenizer --out runs/again   # the shards `run` prepared
  python -m trainer train config.yaml --data runs/bert-tiny/tokenizer --out runs/again --resume
  torchrun --standalone --nproc-per-node 2 -m trainer train config.yaml --data runs/bert-tiny/tokenizer \\
      --out runs/two --events

config.yaml: a run page's "Export YAML", or a run YAML's training settings alone. `run` prepares the
corpus and the tokenizer folder (with its shards/) first, then trains as this does.
"""
INCONTEXT_EXAMPLES = """examples:
  python -m trainer incontext --checkpoint runs/gpt-tiny --dataset ft/dataset --k-max 8
  python -m trainer incontext --checkpoint runs/gpt-tiny --dataset ft/dataset --k-max 4 --queries 200 \\
      --template "Review: {text}\\nSentiment: {label}"
"""
DEMO_EXAMPLES = """examples:
  python -m trainer demo-corpus examples/demo.txt      # then: python -m trainer run examples/bert-tiny.yaml
"""


def run_examples() -> str:
    """RUN_EXAMPLES with the names of the training settings (trainer.settings_schema), wrapped."""
    import textwrap

    from trainer.settings_schema import PRETRAIN, settings

    names = ", ".join(s.name for s in settings(PRETRAIN))
    return RUN_EXAMPLES.replace("{settings}", textwrap.fill(names, width=100, initial_indent="  ",
                                                            subsequent_indent="  "))


def _command(sub: Any, name: str, help: str, examples: str = "") -> argparse.ArgumentParser:
    return sub.add_parser(name, help=help, description=help[0].upper() + help[1:] + ".", epilog=examples or None,
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def build_parser() -> argparse.ArgumentParser:
    """The command line's parser: every command has a description and examples (`_command`)."""
    import trainer

    parser = argparse.ArgumentParser(prog="python -m trainer", description="Train language models from the command line.")
    parser.add_argument("--version", action="version", version=f"LM Workbench {trainer.__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="show the traceback of a failure instead of its one-line sentence (also LMWB_DEBUG=1)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = _command(sub, "run", "prepare the corpus and tokenizer, then train, as a YAML file says", run_examples())
    run.add_argument("config", type=Path, help="the run's YAML file (see examples/bert-tiny.yaml)")
    run.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in output_dir")
    run.add_argument("--devices", default=None, metavar="N",
                     help="processes on this machine, one per GPU (on the CPU: over gloo), or \"all\"; "
                          "default: the YAML's devices")
    run.add_argument("--nnodes", type=int, default=1, metavar="M", help="machines that train the run together")
    run.add_argument("--node-rank", type=int, default=0, metavar="R", help="this machine's number, 0 to M-1")
    run.add_argument("--rdzv-endpoint", default="", metavar="HOST:PORT",
                     help="where the machines meet (c10d rendezvous): host:port of one of them")
    tr = _command(sub, "train", "train on prepared shards as a YAML file of settings says (how the web app starts a "
                                "run on several devices)", TRAIN_EXAMPLES)
    tr.add_argument("config", type=Path, help="the training settings (those `run --help` lists, without corpus, "
                                              "tokenizer and output_dir), as a YAML file")
    tr.add_argument("--data", type=Path, required=True, help="the tokenizer folder, with its shards/")
    tr.add_argument("--out", type=Path, required=True, help="the run's folder (checkpoints/ go there)")
    tr.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --out")
    tr.add_argument("--events", action="store_true",
                    help="report on stdout as one JSON object per line (metrics, log lines, checkpoints: what the "
                         "web app's worker reads) instead of text")
    tune = _command(sub, "finetune", "fine-tune a checkpoint on a labelled dataset, as a YAML file says, and print "
                                     "its test split's report", FINETUNE_EXAMPLES)
    tune.add_argument("config", type=Path, help="the fine-tuning YAML file (see examples/finetune-classification.yaml)")
    icl = _command(sub, "incontext", "zero-, one- and few-shot accuracy (GPT-3) of a causal checkpoint on a "
                                     "labelled classification dataset, for k = 0 .. --k-max", INCONTEXT_EXAMPLES)
    icl.add_argument("--checkpoint", type=Path, required=True,
                     help="a GPT checkpoint folder (or a run's folder: its latest checkpoint)")
    icl.add_argument("--dataset", type=Path, required=True,
                     help="a classification dataset folder (as trainer.prep.labelled.ingest writes it)")
    icl.add_argument("--k-max", type=int, required=True, metavar="N", help="the most demonstrations per prompt")
    icl.add_argument("--template", default=None, help="default: \"Text: {text}\\nLabel: {label}\" (write \\n for a "
                                                      "new line)")
    icl.add_argument("--seed", type=int, default=0, help="draws the demonstrations from the training split")
    icl.add_argument("--queries", type=int, default=100, metavar="Q", help="held-out examples evaluated (default 100)")
    icl.add_argument("--no-normalise", action="store_true", help="score labels by total, not per-token, log-likelihood")
    demo = _command(sub, "demo-corpus", "write a small English corpus (Python docstrings) to a .txt file",
                    DEMO_EXAMPLES)
    demo.add_argument("out", type=Path, help="the .txt file to write")
    imp = _command(sub, "import", "make a checkpoint of a Hugging Face model (BERT, RoBERTa, ALBERT, ELECTRA, "
                                  "DistilBERT, T5, GPT-2 or XLNet), as the explorer's import does", IMPORT_EXAMPLES)
    imp.add_argument("source", type=Path, metavar="DIR_OR_ARCHIVE",
                     help="the folder save_pretrained() wrote (config.json, the weights, tokenizer.json or vocab.txt), "
                          "or a .zip, .tar.gz, .tgz or .tar of it")
    imp.add_argument("out", type=Path, metavar="OUT", help="the checkpoint folder to write (a new one)")
    exp = _command(sub, "export", "write a checkpoint in the Hugging Face transformers format, as the web's "
                                  "\"Export HF\" does", EXPORT_EXAMPLES)
    exp.add_argument("checkpoint", type=Path, metavar="CHECKPOINT",
                     help="a checkpoint folder, or a run's folder (its latest checkpoint)")
    exp.add_argument("out", type=Path, metavar="OUT", help="the folder (or .zip) to write (a new one)")
    from trainer.export import FORMATS

    exp.add_argument("--format", choices=tuple(FORMATS), default=None,
                     help="; ".join(f"{k}: {v}" for k, v in FORMATS.items()) + " (default: zip when OUT ends in "
                                                                               ".zip, else hf)")
    from trainer.model_card import LICENSES

    exp.add_argument("--license", default="other", metavar="ID",
                     help=f"the license the model card names: {', '.join(LICENSES)} (default: other)")
    ev = _command(sub, "evaluate", "score a fine-tuned checkpoint on a labelled dataset: the test report its run "
                                   "ends with (the task's metrics, the confusion matrix and per-class table, and with "
                                   "--out the predictions)", EVALUATE_EXAMPLES)
    ev.add_argument("checkpoint", type=Path, metavar="CHECKPOINT",
                    help="a fine-tuned checkpoint folder, or a fine-tuning run's folder (its latest checkpoint)")
    ev.add_argument("dataset", type=Path, metavar="DATASET",
                    help="a labelled dataset folder (its --split is scored), or a CSV, TSV, JSONL, CoNLL or SQuAD "
                         "file of the checkpoint's task (every row is scored)")
    ev.add_argument("--split", choices=("test", "validation", "train"), default="test",
                    help="the split of a dataset folder to score (default: test)")
    ev.add_argument("--out", type=Path, default=None, metavar="DIR",
                    help="also write test_metrics.json, test_report.json and predictions.jsonl / .csv there")
    ev.add_argument("--batch-size", type=int, default=None, metavar="N", help="default: the run's batch size")
    ev.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="default: auto")
    srv = _command(sub, "serve", "answer OpenAI's API (completions, chat, embeddings) and Hugging Face's task "
                                 "shapes (fill-mask, classification, tagging, question answering) for one checkpoint",
                   SERVE_EXAMPLES)
    srv.add_argument("path", type=Path, metavar="PATH",
                     help="a checkpoint folder, a run's folder (its latest checkpoint), or an exported Hugging Face folder")
    srv.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: 127.0.0.1, this machine only)")
    srv.add_argument("--port", type=int, default=8000, help="the port (default: 8000; 0 picks a free one)")
    srv.add_argument("--api-key", action="append", default=[], metavar="KEY",
                     help="a key clients must send as 'Authorization: Bearer KEY' (repeat for several; also "
                          "LMWB_SERVE_API_KEYS, comma-separated)")
    srv.add_argument("--api-key-file", type=Path, default=None, metavar="FILE", help="keys, one per line")
    srv.add_argument("--name", default="", metavar="MODEL_ID",
                     help="the model id clients name (default: the run's or the folder's name)")
    srv.add_argument("--pooling", choices=("mean", "cls"), default="mean",
                     help="how /v1/embeddings makes one vector of a text's token vectors (default: mean)")
    srv.add_argument("--max-batch", type=int, default=16, metavar="N",
                     help="replies generated together in one batch (default: 16)")
    srv.add_argument("--max-waiting", type=int, default=64, metavar="N",
                     help="replies that may wait for the generator before requests get 429 (default: 64)")
    srv.add_argument("--ready-file", type=Path, default=None, metavar="FILE",
                     help="write {url, host, port, pid, model} there as JSON once the server listens")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "serve":
            return cmd_serve(args)
        if args.command == "run":
            return cmd_run(args.config, resume=args.resume, devices=args.devices,
                           nodes=Nodes(args.nnodes, args.node_rank, args.rdzv_endpoint))
        if args.command == "train":
            return cmd_train(args.config, data_dir=args.data, out_dir=args.out, resume=args.resume,
                             events=args.events)
        if args.command == "finetune":
            return cmd_finetune(args.config)
        if args.command == "import":
            return cmd_import(args.source, args.out)
        if args.command == "export":
            with named_as_given(args.out, zipped=args.format == "zip" or (args.format is None
                                                                          and args.out.suffix.lower() == ".zip")):
                return cmd_export(args.checkpoint, args.out, fmt=args.format, license=args.license)
        if args.command == "evaluate":
            return cmd_evaluate(args.checkpoint, args.dataset, split=args.split, out=args.out,
                                batch_size=args.batch_size, device=args.device)
        if args.command == "incontext":
            return cmd_incontext(args.checkpoint, args.dataset, k_max=args.k_max, template=args.template,
                                 seed=args.seed, n_queries=args.queries, normalise=not args.no_normalise)
        return cmd_demo_corpus(args.out)
    except UserError as e:
        if not under_torchrun() or os.environ.get("RANK") == "0":  # said once for all the processes
            print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        return EXIT_USER_ERROR
    except OSError as e:  # no space, no permission, a read-only disk, a missing file: the user's to fix
        if args.debug or os.environ.get("LMWB_DEBUG", "").strip() not in ("", "0"):
            raise
        if not under_torchrun() or os.environ.get("RANK") == "0":
            print(f"error: {os_error_sentence(e)} (--debug shows the traceback)", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


_OS_ERRORS = {
    errno.ENOSPC: "No space is left on the disk that holds {path}; free some space and run the command again.",
    errno.EDQUOT: "The disk quota is used up on the disk that holds {path}; free some space and try again.",
    errno.EACCES: "Permission denied: {path} cannot be written or read by this user.",
    errno.EPERM: "Permission denied: {path} cannot be written or read by this user.",
    errno.EROFS: "{path} is on a read-only file system; choose a folder that can be written.",
    errno.ENOENT: "{path} does not exist.",
    errno.ENOTDIR: "{path} is not a folder (a part of the path is a file).",
    errno.EISDIR: "{path} is a folder, not a file.",
    errno.EEXIST: "{path} exists already and is in the way (a file where a folder is needed, or the reverse); choose another path.",
    errno.ENOTEMPTY: "{path} is not empty.",
}


def os_error_sentence(error: OSError) -> str:
    """One sentence for an operating-system error, naming the path it happened on."""
    path = error.filename if error.filename is not None else "a file"
    template = _OS_ERRORS.get(error.errno)
    if template:
        return template.format(path=path)
    reason = error.strerror or str(error) or type(error).__name__
    return f"{reason} ({path})." if error.filename is not None else f"{reason}."


def cmd_demo_corpus(out: Path) -> int:
    from trainer.prep.corpus import write_demo_corpus

    path = write_demo_corpus(out)
    print(f"Wrote the demo corpus to {path} ({path.stat().st_size / 1e6:.1f} MB).")
    return 0


@dataclass(frozen=True)
class Nodes:
    """The machines of a multi-node run (one machine: the defaults)."""

    count: int = 1
    rank: int = 0
    endpoint: str = ""

    def check(self) -> None:
        if self.count < 1:
            raise ConfigError(f"--nnodes must be at least 1, not {self.count}.")
        if self.count == 1:
            return
        if not 0 <= self.rank < self.count:
            raise ConfigError(f"--node-rank must be between 0 and {self.count - 1} for {self.count} machines, "
                              f"not {self.rank}.")
        host, _, port = self.endpoint.rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError("Several machines meet at --rdzv-endpoint HOST:PORT (one of them, e.g. "
                              "10.0.0.1:29400); give the same on every machine.")


def cmd_run(config_path: Path, *, resume: bool, devices: str | None = None, nodes: Nodes = Nodes()) -> int:
    run_file = load_run_file(config_path)
    if devices is not None:
        run_file.config = run_file.config.replace(devices=devices)
    nodes.check()
    if not under_torchrun():
        from trainer.config import resolve_devices

        per_node = resolve_devices(run_file.config.devices, run_file.config.device)
        if per_node > 1 or nodes.count > 1:
            if nodes.rank == 0:
                prepare(run_file)  # before the processes start; the other machines' ranks find it or make it
            return launch(config_path, resume=resume, per_node=per_node, nodes=nodes)
    from trainer.training.sinks import ConsoleSink  # imports torch: after the cheap checks

    is_main, result = train_here(run_file.config, data_dir=run_file.tokenizer_dir, out_dir=run_file.output_dir,
                                 resume=resume, before=lambda main: prepare(run_file, quiet=not main),
                                 sink=lambda: ConsoleSink(run_file.output_dir, max_steps=run_file.config.max_steps))
    if is_main and result.last_checkpoint is not None:
        print(f"Checkpoints are in {result.last_checkpoint.parent} (latest: {result.last_checkpoint.name}).")
    if result.status == "cancelled":
        if is_main:
            print(f"Stopped at step {result.final_step}. Continue with: python -m trainer run {config_path} --resume")
        return EXIT_INTERRUPTED
    return 0


def cmd_train(config_path: Path, *, data_dir: Path, out_dir: Path, resume: bool, events: bool) -> int:
    """Train a RunConfig YAML on prepared shards; as one of torchrun's processes when it started
    this. events: rank 0 reports JSON lines on stdout and ends with {"event": "result", ...}."""
    import json

    from trainer.config import RunConfig

    try:
        text = Path(config_path).read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"Cannot read {config_path}: {e.strerror or e}.") from None
    config = RunConfig.from_yaml(text)
    from trainer.training.sinks import ConsoleSink, JsonLinesSink  # imports torch: after the cheap checks

    is_main, result = train_here(config, data_dir=Path(data_dir), out_dir=Path(out_dir), resume=resume,
                                 sink=lambda: JsonLinesSink(sys.stdout) if events
                                 else ConsoleSink(out_dir, max_steps=config.max_steps))
    if is_main and events:
        print(json.dumps({"event": "result", "status": result.status, "final_step": result.final_step}), flush=True)
    return EXIT_INTERRUPTED if result.status == "cancelled" else 0


def train_here(config: Any, *, data_dir: Path, out_dir: Path, resume: bool, sink: Any,
               before: Any = None) -> tuple[bool, Any]:
    """Train in this process: alone, or as one of torchrun's (joining its process group first).
    before(is_main) runs on rank 0 first, then on the others (data preparation); sink() makes
    rank 0's sink (the others report nothing). Ctrl-C / SIGTERM stop every process after the
    same step, with a checkpoint. -> (whether this is rank 0, the TrainResult)."""
    from trainer.config import resolve_device
    from trainer.training import distributed
    from trainer.training.engine import train
    from trainer.training.sinks import NullSink

    ctx = distributed.init(resolve_device(config.device))
    try:
        if before is not None:
            with ctx.main_first():
                before(ctx.is_main)
        stop = StopFlag(quiet=not ctx.is_main)
        with stop.installed():
            result = train(config, data_dir=data_dir, out_dir=out_dir, sink=sink() if ctx.is_main else NullSink(),
                           should_stop=stop, resume=resume)
    finally:
        distributed.shutdown()
    return ctx.is_main, result


def under_torchrun() -> bool:
    """Whether torchrun started this process as one of several (it sets WORLD_SIZE)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def torchrun_args(config_path: Path, *, resume: bool, per_node: int, nodes: Nodes) -> list[str]:
    """torch.distributed.run's arguments for this run: per_node copies of `python -m trainer run
    CONFIG` on this machine; standalone on one machine, else c10d rendezvous at the endpoint."""
    if nodes.count == 1:
        where = ["--standalone"]
    else:
        where = ["--nnodes", str(nodes.count), "--node-rank", str(nodes.rank), "--rdzv-backend", "c10d",
                 "--rdzv-endpoint", nodes.endpoint, "--rdzv-id", Path(config_path).stem or "run"]
    return [*where, "--nproc-per-node", str(per_node), "-m", "trainer", "run", str(config_path),
            *(["--resume"] if resume else [])]


def launch(config_path: Path, *, resume: bool, per_node: int, nodes: Nodes) -> int:
    """Run torchrun (torch.distributed.run) in this process; its exit status is the processes'.
    A process that failed has said why on stderr, so its status is returned without torchrun's
    report of the failure."""
    from torch.distributed import run as torchrun
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    args = torchrun.parse_args(torchrun_args(config_path, resume=resume, per_node=per_node, nodes=nodes))
    try:
        torchrun.run(args)
    except SignalException:  # Ctrl-C: torchrun passed it on; the processes saved a checkpoint, rank 0 said so
        return EXIT_INTERRUPTED
    except ChildFailedError as e:
        codes = [f.exitcode for f in e.failures.values()]
        return next((c for c in codes if c in (EXIT_USER_ERROR, EXIT_INTERRUPTED)), codes[0] if codes else 1)
    return 0


def cmd_finetune(config_path: Path) -> int:
    """Fine-tune as a YAML file says: FinetuneConfig's fields, plus `output_dir` and a `dataset`
    that is a folder trainer.prep.labelled.ingest wrote, or {demo: NAME} (a demo dataset, written
    and ingested into output_dir/dataset), or {file: PATH, task: ..., mapping: {...}} (task and
    mapping default to what the file's header suggests), or {train: PATH, validation: PATH,
    test: PATH, task: ..., mapping: {...}} (a file per split; see _labelled_dataset). `checkpoint`
    may name a run's folder: its latest checkpoint is used."""
    from trainer.finetune.config import FinetuneConfig

    base = config_path.parent
    try:
        data = yaml.safe_load(config_path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"Cannot read {config_path}: {e}".replace("\n", " ")) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{config_path} must hold a mapping of settings.")
    raw_output = data.pop("output_dir", None)
    if not raw_output:
        raise ConfigError("Set output_dir: the folder the fine-tuned checkpoints go to.")
    output_dir = _resolve(base, str(raw_output))
    then_on, then_steps = data.pop("then_finetune_on", None), data.pop("then_steps", 0)
    _check_settings(data, then_on, then_steps)  # cheap: before a dataset is read or ingested
    data["checkpoint"] = str(_latest_checkpoint(_resolve(base, str(data.get("checkpoint") or ""))))
    data["dataset"] = str(_labelled_dataset(data.get("dataset"), base, output_dir))
    extras = data.get("extra_datasets")
    if isinstance(extras, list):  # multi-task mixing: each entry's dataset is resolved like `dataset`
        data["extra_datasets"] = [
            {**spec, "dataset": str(_labelled_dataset(spec.get("dataset"), base, output_dir, f"dataset-{i}"))}
            if isinstance(spec, dict) else spec for i, spec in enumerate(extras, 1)]
    config = FinetuneConfig.from_dict(data)
    if then_on is not None:
        _check_then(config, then_on, then_steps)
    from trainer.finetune.engine import finetune  # imports torch: after the cheap checks
    from trainer.training.sinks import ConsoleSink

    stop = StopFlag()
    with stop.installed():
        result = finetune(config, out_dir=output_dir, sink=ConsoleSink(output_dir, max_steps=config.max_steps),
                          should_stop=stop)
    if result.last_checkpoint is not None:
        print(f"Checkpoints are in {result.last_checkpoint.parent} (latest: {result.last_checkpoint.name}).")
    if result.status == "cancelled":
        return EXIT_INTERRUPTED
    if then_on is not None:  # multi-task, then fine-tuned on one of its tasks (T5 section 3.5.3)
        from trainer.finetune import mixing

        start = mixing.best_or_last_checkpoint(output_dir)
        if start is None:
            raise ConfigError("The multi-task phase left no checkpoint, so there is nothing to fine-tune further.")
        second = mixing.then_config(config, then_on, checkpoint=start, max_steps=then_steps)
        out = output_dir / f"then-{then_on}"
        length = f"{second.epochs:g} epochs" if second.epochs else f"{second.max_steps} steps"
        print(f"Fine-tuning {start.name} on the task {then_on!r} alone for {length}, into {out}.")
        with stop.installed():
            result = finetune(second, out_dir=out, sink=ConsoleSink(out, max_steps=second.max_steps), should_stop=stop)
        if result.last_checkpoint is not None:
            print(f"Checkpoints are in {result.last_checkpoint.parent} (latest: {result.last_checkpoint.name}).")
    return EXIT_INTERRUPTED if result.status == "cancelled" else 0


def _check_settings(data: dict, then_on: Any, then_steps: Any) -> None:
    """FinetuneConfig's checks of the settings as the YAML gives them (unknown keys, bounds, max_steps
    with epochs, ...), the checkpoint and the datasets stood in for: a bad setting is refused in a
    moment, not after a dataset has been ingested."""
    from trainer.finetune.config import FinetuneConfig

    stand_in = {**data, "checkpoint": "checkpoint", "dataset": "dataset"}
    extras = data.get("extra_datasets")
    if isinstance(extras, list):
        stand_in["extra_datasets"] = [{**spec, "dataset": f"dataset-{i}"} if isinstance(spec, dict) else spec
                                      for i, spec in enumerate(extras, 1)]
    config = FinetuneConfig.from_dict(stand_in)
    if then_on is not None:
        _check_then(config, then_on, then_steps)


def _check_then(config, name, steps) -> None:
    """then_finetune_on / then_steps of a multi-task YAML, checked before any training."""
    from trainer.finetune import mixing

    if not config.multi_task:
        raise ConfigError("then_finetune_on follows a multi-task run: list the other datasets in extra_datasets, "
                          "or leave then_finetune_on out.")
    if not isinstance(name, str):
        raise ConfigError(f"then_finetune_on must be the name of one of the mix's tasks, not {name!r}.")
    mixing.task_spec(config, name)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ConfigError(f"then_steps must be a whole number of steps (0: as many as the multi-task phase), "
                          f"not {steps!r}.")


def cmd_incontext(checkpoint: Path, dataset: Path, *, k_max: int, template: str | None = None, seed: int = 0,
                  n_queries: int = 100, normalise: bool = True) -> int:
    """Print accuracy for k = 0 .. k_max (trainer.inference.incontext.evaluate), one line per k, then
    the best k. A template's literal "\\n" is a new line."""
    from trainer.inference import incontext  # imports torch

    template = incontext.DEFAULT_TEMPLATE if template is None else template.replace("\\n", "\n")
    from trainer.prep import labelled

    dataset = labelled.dataset_folder(dataset)
    if not (dataset / "dataset.json").is_file():
        raise InferenceError(f"{dataset} is not a labelled dataset folder (it has no dataset.json).")
    out = incontext.evaluate(_latest_checkpoint(checkpoint), dataset, k_max=k_max, seed=seed, n_queries=n_queries,
                             template=template, normalise=normalise)
    print(f"In-context accuracy on {out['n_queries']} held-out examples ({len(out['labels'])} labels, seed {seed}, "
          f"{'length-normalised' if normalise else 'total log-likelihood'}), template {template!r}:")
    for k, accuracy in zip(out["k"], out["accuracy"]):
        print(f"  k={k:<3d} accuracy={accuracy:.4f}")
    best = max(out["k"], key=lambda k: (out["accuracy"][k], -k))
    print(f"Best: k={best} ({out['accuracy'][best]:.4f}).")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    """One checkpoint behind an OpenAI-compatible address (trainer.serve) until Ctrl-C."""
    from trainer.serve import read_keys, serve

    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port must be between 0 and 65535, not {args.port}.")
    for flag, value in (("--max-batch", args.max_batch), ("--max-waiting", args.max_waiting)):
        if value < 1:
            raise ConfigError(f"{flag} must be at least 1, not {value}.")
    keys = read_keys(args.api_key, args.api_key_file)
    return serve(args.path, host=args.host, port=args.port, keys=keys, name=args.name, ready_file=args.ready_file,
                 pooling=args.pooling, max_batch=args.max_batch, max_waiting=args.max_waiting)


@contextlib.contextmanager
def named_as_given(out: Path, *, zipped: bool = False) -> Iterator[None]:
    """An error of a command that writes `out` through hidden folders beside it (an export stages
    .NAME-xxxx/ or .NAME.export/ and moves it into place; a zip is written as NAME.tmp first) names
    `out`, the path the user gave, instead: with the file's path inside it, or, for a zip, `out` alone."""
    try:
        yield
    except OSError as e:
        for attr in ("filename", "filename2"):
            if isinstance(getattr(e, attr, None), str):
                setattr(e, attr, _as_given(getattr(e, attr), out, zipped))
        raise
    except UserError as e:
        e.args = (_as_given(str(e), out, zipped), *e.args[1:])
        raise


def _as_given(text: str, out: Path, zipped: bool) -> str:
    name = re.escape(out.name)
    staged = rf"(?:\.+{name}(?:[^/\s'\"]*[^/\s'\".,;:)])?|{name}\.tmp)"  # .NAME-xxxx, .NAME.export, NAME.tmp
    inside = r"(?:/[^\s'\"]*[^\s'\".,;:)])?" if zipped else ""  # a file in it (not the sentence's full stop)
    return re.sub(rf"(?:[^\s'\"(]*/)?{staged}{inside}", lambda _: str(out), text)


def _check_new(out: Path) -> None:
    """A command writes a new file or folder: an existing one (other than an empty folder) is refused."""
    if out.exists() and not (out.is_dir() and not any(out.iterdir())):
        raise ConfigError(f"{out} already exists; name a new {'folder' if out.is_dir() else 'path'} (nothing is "
                          f"overwritten).")


def cmd_import(source: Path, out: Path) -> int:
    """A Hugging Face model folder or archive -> a checkpoint folder (trainer.inference.importing)."""
    from trainer.inference.importing import import_model
    from trainer.progress import TerminalBar

    _check_new(out)
    with TerminalBar(f"Importing {source.name}") as bar:
        info = import_model(source, out, progress=bar)
    heads = ", ".join(info.get("objectives") or []) or "none"
    print(f"Imported a {info['model_type']} model ({info['class']}, {info['parameters']:,} parameters, "
          f"vocabulary {info['vocab_size']:,}; pre-training heads with weights: {heads}) as the checkpoint {out}.")
    return 0


def cmd_export(checkpoint: Path, out: Path, *, fmt: str | None = None, license: str = "other") -> int:
    """A checkpoint (or a run's latest) -> the transformers folder, or its zip, or another format
    (trainer.export), each with its model card naming `license` (trainer.model_card)."""
    import shutil

    from trainer.export import check_exportable, export_checkpoint, zip_export
    from trainer.model_card import check_license
    from trainer.progress import TerminalBar

    license = check_license(license)  # a sentence before anything is loaded
    fmt = fmt or ("zip" if out.suffix.lower() == ".zip" else "hf")
    folder = _latest_checkpoint(checkpoint)
    check_exportable(folder, fmt)  # ELMo, adapters, ...: a sentence before anything is loaded
    _check_new(out)
    if fmt not in ("hf", "zip"):
        from trainer.export import exporter

        with TerminalBar(f"Exporting {folder.name} as {fmt.upper()}") as bar:
            result = exporter(fmt)(folder, out, name=out.name, license=license, progress=bar)
        print(f"Exported {folder.name} as {fmt.upper()} ({result.architecture}) to {out} ({', '.join(result.files)}).")
        return 0
    with TerminalBar(f"Exporting {folder.name}") as bar:
        if fmt == "hf":
            result = export_checkpoint(folder, out, license=license, progress=bar)
        else:
            staging = out.with_name(f".{out.name}.export")
            try:
                result = export_checkpoint(folder, staging, name=out.stem, license=license,
                                           progress=lambda p: bar(0.8 * p))
                zip_export(result, out, top=out.stem or "model", progress=lambda p: bar(80 + 0.2 * p))
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    what = f"{out} (a zip of {len(result.files)} files)" if fmt == "zip" else f"{out} ({', '.join(result.files)})"
    print(f"Exported {folder.name} as transformers' {result.architecture} to {what}.")
    return 0


def cmd_evaluate(checkpoint: Path, dataset: Path, *, split: str = "test", out: Path | None = None,
                 batch_size: int | None = None, device: str = "auto") -> int:
    """Print a fine-tuned checkpoint's test report on a dataset folder's split, or on every row of a
    dataset file (ingested for the checkpoint's task into a temporary folder first)."""
    import tempfile

    from trainer.finetune.evaluation import evaluate_checkpoint, finetuned_config

    if out is not None:
        _check_new(out)  # the report of another evaluation is never overwritten
    folder = _latest_checkpoint(checkpoint)
    if batch_size is not None and batch_size < 1:
        raise ConfigError(f"--batch-size must be at least 1, not {batch_size}.")
    task = finetuned_config(folder, checkpoint=str(folder), dataset=".").task  # refuses a pre-training checkpoint
    if dataset.is_dir():
        from trainer.prep import labelled

        dataset = labelled.dataset_folder(dataset)
        result = evaluate_checkpoint(folder, dataset, split=split, out_dir=out, batch_size=batch_size, device=device)
    elif dataset.is_file():
        with tempfile.TemporaryDirectory(prefix="lmwb-evaluate-") as tmp:
            result = evaluate_checkpoint(folder, _ingest_for_scoring(dataset, task, Path(tmp) / "dataset"),
                                         out_dir=out, batch_size=batch_size, device=device)
    else:
        raise ConfigError(f"{dataset} does not exist: name a labelled dataset folder or a dataset file.")
    print(_format_evaluation(result, folder, dataset if dataset.is_file() else f"{dataset} ({split} split)"))
    if out is not None:
        print(f"Wrote test_metrics.json, the predictions and the report to {out}.")
    return 0


def _ingest_for_scoring(source: Path, task: str, target: Path) -> Path:
    """A dataset file stored with every row in its test split (and, since a stored dataset needs
    one, in its train split), checked as an upload is (trainer.prep.labelled)."""
    from trainer.prep import labelled
    from trainer.progress import TerminalBar

    preview = labelled.sniff(source, source.name)
    with TerminalBar(f"Reading {source.name}") as bar:
        labelled.ingest({"train": source, "test": source}, target, original_filename=source.name, task=task,
                        mapping=preview.mapping, progress=bar)
    return target


def _format_evaluation(result: Any, checkpoint: Path, where: Any) -> str:
    """The metrics (the primary first), then the per-class table of a classifier or tagger."""
    lines = [f"{checkpoint.name} on {where}: {result.examples:,} examples, {result.task.replace('_', ' ')}."]
    keys = [result.primary, *(k for k in result.metrics if k != result.primary)]
    lines += [f"  {k:<24} {result.metrics[k]:.4f}" for k in keys if isinstance(result.metrics.get(k), (int, float))]
    table = (result.report or {}).get("per_class") or []
    if table:
        lines.append(f"  {'label':<20} {'precision':>9} {'recall':>9} {'f1':>9} {'support':>8}")
        lines += [f"  {str(r['label'])[:20]:<20} {r['precision']:>9.4f} {r['recall']:>9.4f} {r['f1']:>9.4f} "
                  f"{r['support']:>8,}" for r in table]
    return "\n".join(lines)


def _resolve(base: Path, value: str) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() else base / path


def _latest_checkpoint(path: Path) -> Path:
    """A checkpoint folder, or a run folder's latest checkpoint."""
    if (path / "model_config.json").is_file():
        return path
    from trainer.training.checkpoints import list_checkpoints

    found = list_checkpoints(path)
    if not found:
        raise ConfigError(f"{path} is neither a checkpoint nor a run folder with checkpoints. Train one first "
                          f"(python -m trainer run examples/bert-tiny.yaml) or name a checkpoint folder.")
    return found[-1][1]


DATASET_KEYS = ("demo", "file", "train", "validation", "test", "task", "mapping", "seed")
SPLIT_KEYS = ("train", "validation", "test")


def _labelled_dataset(spec: Any, base: Path, output_dir: Path, folder: str = "dataset") -> Path:
    """`folder`: where under output_dir a demo or a file is ingested (each extra dataset has its own).

    A YAML dataset is a folder, {demo: NAME}, {file: PATH} (split at random, or by its split
    column) or {train: PATH, validation: PATH, test: PATH} (a file per split: validation, when
    absent, is carved at random from train; test, when absent, stays empty). Unknown keys are refused."""
    from trainer.prep import labelled
    from trainer.progress import TerminalBar

    what = "dataset" if folder == "dataset" else "each extra dataset"
    if isinstance(spec, str) and spec:
        return labelled.dataset_folder(_resolve(base, spec))
    if not isinstance(spec, dict) or not ({"demo", "file", "train"} & set(spec)):
        if isinstance(spec, dict) and set(spec) & {"validation", "test"}:
            raise ConfigError(f"Set {what}'s train: file beside its validation: and test: files.")
        raise ConfigError(f"Set {what}: an ingested dataset's folder, {{demo: NAME}}, {{file: PATH}} or "
                          "{train: PATH, validation: PATH, test: PATH}.")
    _check_dataset_keys(spec, what)
    target = output_dir / folder
    if (target / labelled.META_FILE).is_file():
        return target  # ingested by an earlier run of this file
    if "demo" in spec:
        if spec["demo"] not in labelled.DEMOS:
            raise ConfigError(f"Unknown demo dataset {spec['demo']!r}; choose one of {', '.join(labelled.DEMOS)}.")
        files = {"all": labelled.write_demo_dataset(spec["demo"], output_dir / labelled.DEMOS[spec["demo"]].filename)}
    elif "file" in spec:
        files = {"all": _resolve(base, str(spec["file"]))}
    else:
        files = {split: _resolve(base, str(spec[split])) for split in SPLIT_KEYS if spec.get(split) is not None}
    for path in files.values():
        if not path.is_file():
            raise ConfigError(f"The dataset file {path} does not exist.")
    source = files.get("all") or files["train"]
    preview = (labelled.sniff(source, source.name) if "all" in files
               else labelled.sniff_files({split: (path, path.name) for split, path in files.items()}))
    task, mapping = spec.get("task") or preview.task, spec.get("mapping") or preview.mapping
    if not task:
        raise ConfigError(f"Cannot tell which task {source.name} is for; set dataset.task and dataset.mapping.")
    with TerminalBar(f"Reading {source.name}") as bar:
        result = labelled.ingest(source if "all" in files else files, target, original_filename=source.name,
                                 task=task, mapping=mapping, seed=int(spec.get("seed", 0)), progress=bar)
    where = labelled.origins(labelled.read_meta(target)["split"], {s: p.name for s, p in files.items()})
    print(f"Dataset: {result.task}, "
          f"{', '.join(f'{n:,} {s} ({where[s]})' for s, n in result.sizes.items())}.")
    for warning in result.warnings:
        print(f"  {warning}")
    return target


def _check_dataset_keys(spec: dict, what: str) -> None:
    """Unknown keys are refused (a misspelt `tset:` must not leave a test file out unnoticed), and
    a dataset comes from one source: a demo, one file, or a file per split."""
    for key in spec:
        if key not in DATASET_KEYS:
            raise ConfigError(f"Unknown key {key!r} in {what}; the keys are {', '.join(DATASET_KEYS)}.")
    sources = [key for key in ("demo", "file", "train") if key in spec]
    if len(sources) > 1:
        raise ConfigError(f"Give {what} one of demo:, file: or train: (with validation: and test:), not "
                          f"{' and '.join(sources)}.")
    if "mapping" in spec and not isinstance(spec["mapping"], dict):
        raise ConfigError(f"{what.capitalize()}'s mapping: maps column names to roles, such as {{review: text, "
                          f"stars: label}}; got {spec['mapping']!r}.")
    seed = spec.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError(f"{what.capitalize()}'s seed: must be a whole number, not {seed!r}.")
    if sources[0] != "train" and set(spec) & {"validation", "test"}:
        extra = next(key for key in ("validation", "test") if key in spec)
        raise ConfigError(f"{what.capitalize()}'s {extra}: file goes with train: (a file per split); "
                          f"{sources[0]}: is one file split at random or by its split column. Write train: for "
                          "the training file.")


# ---------------------------------------------------------------------------- the YAML file
def load_run_file(path: Path) -> RunFile:
    from trainer import families
    from trainer.catalog import validation
    from trainer import objectives
    from trainer.config import RunConfig
    from trainer.prep.corpus import CleaningOptions

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"The config file {path} does not exist.")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path} is not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must be a YAML mapping of settings (corpus:, output_dir:, ...).")
    for key in ("corpus", "output_dir"):
        if not data.get(key):
            raise ConfigError(f"{path} needs a `{key}:` setting.")
    here = path.resolve().parent
    corpus = _corpus_files(data["corpus"], here, path.name)
    text_field = data.get("text_field", "text")
    if not isinstance(text_field, str) or not text_field.strip():
        raise ConfigError(f"text_field: names the JSON field or column that holds the text, such as text; "
                          f"got {text_field!r}.")
    tokenizer = data.get("tokenizer") or {}
    if not isinstance(tokenizer, dict) or set(tokenizer) - set(TOKENIZER_KEYS):
        raise ConfigError(f"tokenizer: takes {', '.join(TOKENIZER_KEYS)}; got {tokenizer!r}.")
    cleaning = data.get("cleaning") or {}
    rules = [f.name for f in dataclasses.fields(CleaningOptions)]
    if not isinstance(cleaning, dict) or set(cleaning) - set(rules):
        raise ConfigError(f"cleaning: maps rule names ({', '.join(rules)}) to true/false; got {cleaning!r}.")
    fields = {k: v for k, v in data.items() if k not in RUN_FILE_KEYS}
    if isinstance(fields.get("teacher_checkpoint"), str) and fields["teacher_checkpoint"].strip():
        fields["teacher_checkpoint"] = str((here / fields["teacher_checkpoint"].strip()).resolve())
    config = RunConfig.from_dict(fields)
    family = families.get(config.family)
    if family.needs_teacher:
        validation.validate_teacher(config)
    tok = {**TOKENIZER_DEFAULTS, "algorithm": family.tokenizer_algorithms[0], **tokenizer}
    if "extra_ids" not in tok and any(objectives.get(o).needs_sentinels for o in family.objectives):
        from trainer.prep.tokenization import T5_EXTRA_IDS

        tok["extra_ids"] = T5_EXTRA_IDS  # T5's 100 sentinels (kept out of the stamp of other families)
    try:
        extra_ids = int(tok.get("extra_ids", 0))
    except (TypeError, ValueError):
        raise ConfigError(f"tokenizer: extra_ids must be a whole number such as 100, not {tok['extra_ids']!r}.") from None
    validation.validate_tokenizer(config, tok["algorithm"], {"extra_ids": extra_ids})
    try:
        valid_fraction = float(data.get("valid_fraction", 0.05))
    except (TypeError, ValueError):
        raise ConfigError("valid_fraction must be a number such as 0.05.") from None
    return RunFile(corpus=corpus, output_dir=(here / str(data["output_dir"])).resolve(), config=config,
                   tokenizer=tok, cleaning=dict(cleaning), valid_fraction=valid_fraction,
                   text_field=text_field.strip())


def _corpus_files(value, here: Path, yaml_name: str) -> list:
    """The files `corpus:` names: a path (file, folder or glob) or a list of them."""
    from trainer.errors import CorpusError
    from trainer.prep.sources import discover

    specs = value if isinstance(value, list) else [value]
    if not specs or not all(isinstance(s, (str, int, float)) and str(s).strip() for s in specs):
        raise ConfigError(f"corpus: in {yaml_name} is a path (a file, a folder or a glob) or a list of them; "
                          f"got {value!r}.")
    try:
        return discover([str(s).strip() for s in specs], base=here)
    except CorpusError as e:
        raise ConfigError(f"{e} (corpus: in {yaml_name}; `python -m trainer demo-corpus FILE` writes a "
                          "small corpus to try.)") from None


# ---------------------------------------------------------------------------- preparation
def prepare(run: RunFile, *, quiet: bool = False) -> None:
    """corpus -> cleaned text -> tokenizer -> shards, skipping the steps already done. quiet: say
    nothing (the ranks of a multi-device run other than 0)."""
    if quiet:
        import contextlib
        import io

        with contextlib.redirect_stdout(io.StringIO()):
            return prepare(run)
    from trainer.prep.corpus import CleaningOptions, ingest
    from trainer.prep.shards import encode_corpus
    from trainer.prep.tokenization import train_tokenizer
    from trainer.progress import TerminalBar

    run.output_dir.mkdir(parents=True, exist_ok=True)
    check_stamp(run)
    if not (run.corpus_dir / "stats.json").is_file():
        print(f"Cleaning and splitting {run.corpus_label} ...", flush=True)
        with TerminalBar("  cleaning") as bar:
            result = ingest(run.corpus, run.corpus_dir, options=CleaningOptions.from_dict(run.cleaning),
                            text_field=run.text_field, valid_fraction=run.valid_fraction, progress=bar)
        s = result.stats
        total = s.get("total", s)
        print(f"  {_fmt_stats(total)}", flush=True)
    if not (run.tokenizer_dir / "tokenizer.json").is_file():
        print(f"Training a {run.tokenizer['algorithm']} tokenizer ({run.tokenizer['vocab_size']:,} tokens) ...", flush=True)
        with TerminalBar("  training") as bar:
            stats = train_tokenizer(run.corpus_dir, run.tokenizer_dir, algorithm=run.tokenizer["algorithm"],
                                    vocab_size=int(run.tokenizer["vocab_size"]),
                                    lowercase=bool(run.tokenizer["lowercase"]),
                                    extra_ids=int(run.tokenizer.get("extra_ids", 0)), progress=bar)
        print(f"  vocabulary {stats['vocab_size']:,}, {stats.get('tokens_per_word', 0):.2f} tokens per word, "
              f"unknown rate {stats.get('unk_rate', 0):.2%}", flush=True)
    if not (run.tokenizer_dir / "shards" / "train" / "shard.json").is_file():
        print("Encoding the corpus into token shards ...", flush=True)
        with TerminalBar("  encoding") as bar:
            stats = encode_corpus(run.corpus_dir, run.tokenizer_dir, progress=bar)
        print(f"  {stats['train']['n_tokens']:,} training tokens, {stats['valid']['n_tokens']:,} validation tokens",
              flush=True)


def check_stamp(run: RunFile) -> None:
    """Refuse to mix prepared data of one corpus/tokenizer with a YAML that asks for another."""
    stamp = run.output_dir / "prepared.json"
    # One file keeps the stamp's old form, so that folders prepared before still match.
    paths = [s.path for s in run.corpus]
    wanted = {"corpus": paths[0] if len(paths) == 1 else paths, "corpus_bytes": sum(s.bytes for s in run.corpus),
              "tokenizer": run.tokenizer, "cleaning": run.cleaning, "valid_fraction": run.valid_fraction}
    if stamp.is_file():
        had = json.loads(stamp.read_text(encoding="utf-8"))
        changed = [k for k in wanted if had.get(k) != wanted[k]]
        if changed:
            raise ConfigError(f"{run.output_dir} was prepared with other {', '.join(changed)} settings; "
                              f"use a new output_dir (or delete that folder) to start over.")
    else:
        stamp.write_text(json.dumps(wanted, indent=2) + "\n", encoding="utf-8")


def _fmt_stats(s: dict) -> str:
    parts = [f"{s[k]:,} {k}" for k in ("documents", "sentences", "words") if isinstance(s.get(k), int)]
    return ", ".join(parts) or "done"


# ---------------------------------------------------------------------------- Ctrl-C
class StopFlag:
    """should_stop for train(): the first Ctrl-C (or SIGTERM) asks for a checkpoint and a stop,
    a second Ctrl-C aborts at once."""

    def __init__(self, *, quiet: bool = False) -> None:
        self.requested = False
        self.quiet = quiet  # a multi-device run's ranks other than 0 say nothing
        self._previous: dict[int, Any] = {}

    def __call__(self) -> bool:
        return self.requested

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.requested = True
        if not self.quiet:
            print("\nStopping after this step and saving a checkpoint (Ctrl-C again to abort) ...",
                  file=sys.stderr, flush=True)

    def installed(self) -> "StopFlag":
        return self

    def __enter__(self) -> "StopFlag":
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
