"""`python -m trainer`: a whole run from a YAML file, resume, and one-line user errors."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.cli import StopFlag, main

ROOT = Path(__file__).resolve().parents[2]

YAML = """\
corpus: corpus.txt
output_dir: out
tokenizer: {{vocab_size: 1000, lowercase: true}}
preset: bert-tiny
model_overrides: {{hidden_size: 64, num_heads: 2}}
objectives: [mlm, nsp]
max_steps: {max_steps}
batch_size: 8
seq_len: 32
lr: 1e-3
warmup_steps: 1
log_every: 1
eval_every: 2
eval_batches: 2
checkpoint_every: 2
device: cpu
num_threads: 1
"""


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "trainer", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.fixture
def workdir(tmp_path, small_corpus_file):
    text = small_corpus_file.read_text(encoding="utf-8")
    (tmp_path / "corpus.txt").write_text(text[: text.rfind("\n\n", 0, 80_000)] + "\n", encoding="utf-8")
    return tmp_path


def test_run_prepares_trains_and_resumes(workdir):
    (workdir / "run.yaml").write_text(YAML.format(max_steps=3))
    first = run_cli("run", "run.yaml", cwd=workdir)
    assert first.returncode == 0, first.stderr
    out = workdir / "out"
    assert (out / "corpus" / "train.txt").is_file() and (out / "tokenizer" / "shards" / "train").is_dir()
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-00000002", "step-00000003"]
    assert "Checkpoints are in" in first.stdout and "step      3/3" in first.stdout

    (workdir / "run.yaml").write_text(YAML.format(max_steps=5))
    second = run_cli("run", "run.yaml", "--resume", cwd=workdir)
    assert second.returncode == 0, second.stderr
    assert "Cleaning" not in second.stdout and "Resuming from step-00000003" in second.stdout
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train_steps = [r["step"] for r in records if r["split"] == "train"]
    assert train_steps == [1, 2, 3, 4, 5]


def test_a_bad_config_is_one_line_and_exit_code_2(workdir):
    (workdir / "bad.yaml").write_text(YAML.format(max_steps=3) + "learning_rate: 0.1\n")
    result = run_cli("run", "bad.yaml", cwd=workdir)
    assert result.returncode == 2
    assert result.stderr == "error: Unknown config field: learning_rate.\n" and result.stdout == ""


@pytest.mark.parametrize("change, message", [
    (("seq_len: 32", "seq_len: 1000"), "error: seq_len must be between 16 and the model's 512 positions, not 1000."),
    (("lr: 1e-3", "learning_rate: 1e-3"), "Unknown config field: learning_rate."),
    (("corpus: corpus.txt", "corpus: missing.txt"), "does not exist"),
    (("tokenizer: {vocab_size: 1000, lowercase: true}", "tokenizer: {algorithm: bpe}"),
     "BERT needs a wordpiece tokenizer; this one is bpe."),
    (("tokenizer: {vocab_size: 1000, lowercase: true}", "cleaning: {no_such_rule: true}"), "cleaning: maps rule names"),
    (("objectives: [mlm, nsp]", "objectives: [mlm, nsp"), "is not valid YAML"),
])
def test_user_errors_in_process(workdir, capsys, change, message):
    (workdir / "bad.yaml").write_text(YAML.format(max_steps=3).replace(*change))
    assert main(["run", str(workdir / "bad.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_demo_corpus_command(tmp_path, capsys):
    assert main(["demo-corpus", str(tmp_path / "demo.txt")]) == 0
    assert (tmp_path / "demo.txt").stat().st_size > 100_000 and "Wrote the demo corpus" in capsys.readouterr().out


def test_ctrl_c_asks_the_loop_to_stop(capsys):
    with StopFlag() as stop:
        assert not stop()
        os.kill(os.getpid(), signal.SIGINT)
        assert stop()
        with pytest.raises(KeyboardInterrupt):  # a second Ctrl-C aborts
            os.kill(os.getpid(), signal.SIGINT)
    assert "saving a checkpoint" in capsys.readouterr().err


def test_the_example_config_is_valid(tmp_path):
    from trainer.cli import load_run_file

    example = (ROOT / "examples" / "bert-tiny.yaml").read_text()
    (tmp_path / "bert-tiny.yaml").write_text(example)
    with pytest.raises(Exception, match="demo-corpus"):  # the placeholder corpus is not there yet
        load_run_file(tmp_path / "bert-tiny.yaml")
    (tmp_path / "demo.txt").write_text("Some text.\n")
    run = load_run_file(tmp_path / "bert-tiny.yaml")
    assert run.config.preset == "bert-tiny" and run.tokenizer["algorithm"] == "wordpiece"
    assert run.output_dir == tmp_path / "runs" / "bert-tiny"
