"""Helpers for the model server's tests (holds no tests): tiny checkpoints, and the real
`python -m trainer serve` process on a free port, talked to over HTTP."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-test-key"
CHAT_TEMPLATE = "<|{role}|>\n{content}\n"
START_TIMEOUT_S = 120  # a bound on the wait, not a threshold: a loaded machine starts torch slowly


def long_gpt(tokenizer_dir: Path, *, positions: int = 1024):
    """A small GPT-2 with room for long replies: 1,000 tokens take it seconds to write (about 5 ms a
    token on this machine), so a test can act while one is being written."""
    import torch

    from models_lib.families.gpt import GPTConfig, GPTLMHeadModel
    from trainer.prep.tokenization import load_tokenizer

    tok = load_tokenizer(tokenizer_dir)
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=tok.vocab_size, hidden_size=256, num_layers=6, num_heads=4,
                    max_position_embeddings=positions, hidden_dropout=0.0, attention_dropout=0.0,
                    embedding_dropout=0.0, pad_token_id=tok.pad_id, eos_token_id=tok.sep_id)
    model = GPTLMHeadModel(cfg).eval()
    with torch.no_grad():  # end-of-text's (tied) embedding at 0: its logit 0, under the best of 400, so a
        model.embeddings.word.weight[tok.sep_id].zero_()  # greedy reply runs to its max_tokens
    return model


def as_sft(folder: Path, template: str = CHAT_TEMPLATE) -> Path:
    """Mark a GPT checkpoint as an SFT run's (its trainer_state.json names the task and template)."""
    (folder / "trainer_state.json").write_text(json.dumps({"step": 1, "config": {"task": "sft",
                                                                                  "chat_template": template}}))
    return folder


@contextmanager
def serving(path: Path, tmp: Path, *, keys: tuple[str, ...] = (KEY,), extra: tuple[str, ...] = ()) -> Iterator[dict]:
    """The server process for `path` on a free port: yields its ready file's JSON; stopped (SIGTERM) after."""
    ready = tmp / f"ready-{time.monotonic_ns()}.json"
    args = [sys.executable, "-m", "trainer", "serve", str(path), "--port", "0", "--ready-file", str(ready), *extra]
    for key in keys:
        args += ["--api-key", key]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    env.pop("LMWB_SERVE_API_KEYS", None)
    log = ready.with_suffix(".log")
    with log.open("w") as out:  # a file, not a pipe nobody reads (a full pipe would block the server)
        proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ready.is_file():
            if proc.poll() is not None:
                raise AssertionError(f"the server exited with {proc.returncode}: {log.read_text()}")
            if time.monotonic() > deadline:
                raise AssertionError("the server did not start")
            time.sleep(0.05)
        info = json.loads(ready.read_text())
        info["proc"], info["log"] = proc, log
        yield info
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
