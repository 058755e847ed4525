"""Runs on several processes (trainer.training.distributed), on the CPU over gloo, started the way a
user starts them: `python -m trainer run --devices 2`, torchrun itself, and two "machines" on
localhost meeting at a c10d rendezvous.

One process with grad_accum 4 and two processes with grad_accum 2 see the same micro-batches
(each process takes every other one) and average the same gradients, so after the same steps
their weights agree to float rounding. The schedule is constant so that runs of different
lengths share their learning rates."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import safetensors.torch
import torch

ROOT = Path(__file__).resolve().parents[2]
TOLERANCE = 1e-5

YAML = """\
corpus: {corpus}
output_dir: {out}
tokenizer: {{vocab_size: 1000, lowercase: true}}
preset: bert-tiny
model_overrides: {{hidden_size: 64, num_heads: 2, hidden_dropout: 0.0, attention_dropout: 0.0}}
objectives: [mlm, nsp]
max_steps: {max_steps}
batch_size: 2
grad_accum: {grad_accum}
seq_len: 32
lr: 1e-3
warmup_steps: 1
schedule: constant
log_every: 1
eval_every: 5
eval_batches: 3
checkpoint_every: 5
device: cpu
num_threads: 1
strategy: {strategy}
"""


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, small_corpus_file):
    """A run folder with the corpus cleaned, the tokenizer trained and the shards written, copied
    by each run below (the preparation is the same for all of them)."""
    from trainer.cli import load_run_file, prepare

    base = tmp_path_factory.mktemp("dist")
    text = small_corpus_file.read_text(encoding="utf-8")
    (base / "corpus.txt").write_text(text[: text.rfind("\n\n", 0, 80_000)] + "\n", encoding="utf-8")
    (base / "template.yaml").write_text(_yaml(base, "template", max_steps=1, grad_accum=1))
    prepare(load_run_file(base / "template.yaml"))
    return base


def _yaml(base: Path, out: str, *, max_steps: int, grad_accum: int, strategy: str = "auto") -> str:
    return YAML.format(corpus=base / "corpus.txt", out=base / out, max_steps=max_steps, grad_accum=grad_accum,
                       strategy=strategy)


def new_run(base: Path, name: str, **settings) -> Path:
    """name.yaml for a run into base/name, its data copied from the template run."""
    shutil.copytree(base / "template", base / name, ignore=shutil.ignore_patterns("checkpoints", "metrics.jsonl"))
    path = base / f"{name}.yaml"
    path.write_text(_yaml(base, name, **settings))
    return path


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    return result


def weights(run_folder: Path, step: int) -> dict[str, torch.Tensor]:
    return safetensors.torch.load_file(str(run_folder / "checkpoints" / f"step-{step:08d}" / "model.safetensors"))


def assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert sorted(a) == sorted(b)  # the same tensors stored, shared ones once
    worst = max((a[k] - b[k]).abs().max().item() for k in a)
    assert worst < TOLERANCE, worst


def train_steps(run_folder: Path) -> list[int]:
    records = [json.loads(line) for line in (run_folder / "metrics.jsonl").read_text().splitlines()]
    return [r["step"] for r in records if r["split"] == "train"]


def assert_same_validation(a_folder: Path, b_folder: Path, step: int) -> None:
    """The validation metrics both runs logged at `step` agree (to float rounding: the processes add
    up their shares of the batches in another order)."""
    def valid(folder: Path) -> dict[str, float]:
        records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
        return next(r["values"] for r in records if r["split"] == "valid" and r["step"] == step)

    a, b = valid(a_folder), valid(b_folder)
    assert sorted(a) == sorted(b) and "mlm_acc" in a
    for name in a:
        assert a[name] == pytest.approx(b[name], rel=1e-4, abs=1e-5), (name, a[name], b[name])


@pytest.fixture(scope="module")
def single(prepared):
    """The reference: one process, grad_accum 4, 7 steps (checkpoints at 5 and 7)."""
    run("-m", "trainer", "run", str(new_run(prepared, "single", max_steps=7, grad_accum=4)), cwd=prepared)
    return prepared / "single"


def test_two_ddp_processes_end_with_the_weights_of_one_process(prepared, single):
    config = new_run(prepared, "ddp", max_steps=5, grad_accum=2, strategy="ddp")
    result = run("-m", "trainer", "run", str(config), "--devices", "2", cwd=prepared)
    assert "on 2 cpu processes (fp32, DDP)" in result.stdout and "2 x 2 x 2 processes = 8 sequences" in result.stdout
    assert_same_weights(weights(prepared / "ddp", 5), weights(single, 5))
    # validation: each process scores its share of the 3 batches, the sums added up over the two
    assert "3 validation batches shared by the 2 processes" in result.stdout
    assert_same_validation(prepared / "ddp", single, 5)
    assert train_steps(prepared / "ddp") == [1, 2, 3, 4, 5]  # rank 0 alone reports
    state = json.loads((prepared / "ddp" / "checkpoints" / "step-00000005" / "trainer_state.json").read_text())
    single_state = json.loads((single / "checkpoints" / "step-00000005" / "trainer_state.json").read_text())
    assert state["data_position"] == single_state["data_position"]
    assert state["tokens_seen"] == single_state["tokens_seen"]  # summed over the processes


def test_fsdp_under_torchrun_matches_one_process_and_its_checkpoint_resumes_on_one(prepared, single):
    config = new_run(prepared, "fsdp", max_steps=5, grad_accum=2, strategy="fsdp")
    result = run("-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "trainer", "run",
                 str(config), cwd=prepared)
    assert "(fp32, FSDP)" in result.stdout
    assert_same_weights(weights(prepared / "fsdp", 5), weights(single, 5))
    assert "3 validation batches shared by the 2 processes" in result.stdout  # one runs a 4th, unscored
    assert_same_validation(prepared / "fsdp", single, 5)
    assert train_steps(prepared / "fsdp") == [1, 2, 3, 4, 5]

    # The 2-process checkpoint goes on in one process (grad_accum 4: the same effective batch).
    config.write_text(_yaml(prepared, "fsdp", max_steps=7, grad_accum=4))
    resumed = run("-m", "trainer", "run", str(config), "--resume", cwd=prepared)
    assert "Resuming from step-00000005" in resumed.stdout
    assert_same_weights(weights(prepared / "fsdp", 7), weights(single, 7))
    assert train_steps(prepared / "fsdp") == [1, 2, 3, 4, 5, 6, 7]


def test_a_one_process_checkpoint_resumes_sharded_on_two(prepared, single):
    folder = prepared / "grow"
    config = new_run(prepared, "grow", max_steps=7, grad_accum=2, strategy="fsdp")
    shutil.copytree(single / "checkpoints" / "step-00000005", folder / "checkpoints" / "step-00000005")
    run("-m", "trainer", "run", str(config), "--resume", "--devices", "2", cwd=prepared)
    assert_same_weights(weights(folder, 7), weights(single, 7))


def test_two_machines_on_localhost_train_one_run(prepared, single):
    config = new_run(prepared, "nodes", max_steps=5, grad_accum=2)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    nodes = [subprocess.Popen([sys.executable, "-m", "trainer", "run", str(config), "--devices", "1", "--nnodes", "2",
                               "--node-rank", str(rank), "--rdzv-endpoint", f"127.0.0.1:{port}"],
                              cwd=prepared, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank in (0, 1)]
    outputs = [node.communicate(timeout=300) for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outputs
    assert sum("Finished at step 5" in out for out, _ in outputs) == 1  # global rank 0 reports
    assert train_steps(prepared / "nodes") == [1, 2, 3, 4, 5]
    assert_same_weights(weights(prepared / "nodes", 5), weights(single, 5))


def test_gathered_weights_are_written_as_the_model_writes_its_own(tmp_path):
    """ELECTRA's generator and discriminator share their embeddings: a state dict given by name
    (FSDP2's gathered one has a tensor per name) is written with each shared tensor once, under the
    name and with the metadata of safetensors.torch.save_model."""
    from safetensors import safe_open

    from models_lib.checkpoint import load_model, save_model
    from trainer import families

    spec = families.get("electra")
    model = spec.build_model(spec.preset_config("electra-tiny", vocab_size=100))
    save_model(model, tmp_path / "own")
    gathered = {name: t.detach().clone() for name, t in model.state_dict().items()}  # no tensor shared
    save_model(model, tmp_path / "given", state_dict=gathered)
    files = [safe_open(str(tmp_path / f / "model.safetensors"), "pt") for f in ("own", "given")]
    assert sorted(files[0].keys()) == sorted(files[1].keys()) and len(files[0].keys()) < len(gathered)
    assert files[0].metadata() == files[1].metadata()
    loaded = load_model(tmp_path / "given")
    assert all(torch.equal(t, model.state_dict()[k]) for k, t in loaded.state_dict().items())


def test_devices_and_strategy_settings():
    from trainer.config import RunConfig, resolve_devices
    from trainer.errors import ConfigError

    assert RunConfig(devices="ALL", device="cpu").devices == "all"
    assert resolve_devices("all", "cpu") == 1 and resolve_devices(3, "cpu") == 3  # CPU: processes over gloo
    config = RunConfig(devices="2", batch_size=8, grad_accum=4, device="cpu")
    assert config.devices == 2 and config.effective_batch() == 64 and config.effective_batch(3) == 96
    for bad, message in ((0, "devices must be between 1 and 1,024, not 0."),
                         ("many", "devices must be a whole number or \"all\", not 'many'.")):
        with pytest.raises(ConfigError, match=message):
            RunConfig(devices=bad)
    with pytest.raises(ConfigError, match="strategy must be one of 'auto', 'ddp', 'fsdp', not 'zero'."):
        RunConfig(strategy="zero")


@pytest.mark.parametrize("args, message", [
    (("--nnodes", "2"), "Several machines meet at --rdzv-endpoint HOST:PORT"),
    (("--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "h:1"), "--node-rank must be between 0 and 1"),
    (("--devices", "0"), "devices must be between 1 and 1,024, not 0."),
])
def test_multi_process_options_are_checked_before_anything_starts(prepared, args, message, capsys):
    from trainer.cli import main

    assert main(["run", str(prepared / "template.yaml"), *args]) == 2
    assert message in capsys.readouterr().err


def test_rank_zero_alone_mirrors_the_run_to_its_trackers(prepared):
    """report_to under torchrun: one set of event files (rank 0's), the same numbers as metrics.jsonl."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    config = new_run(prepared, "tracked", max_steps=3, grad_accum=1, strategy="ddp")
    config.write_text(config.read_text() + "report_to: [tensorboard]\n")
    run("-m", "trainer", "run", str(config), "--devices", "2", cwd=prepared)
    (events,) = (prepared / "tracked" / "tensorboard").glob("events.out.tfevents.*")
    acc = EventAccumulator(str(events.parent), size_guidance={"scalars": 0})
    acc.Reload()
    records = [json.loads(line) for line in (prepared / "tracked" / "metrics.jsonl").read_text().splitlines()]
    losses = {r["step"]: r["values"]["loss"] for r in records if r["split"] == "train"}
    assert {e.step: e.value for e in acc.Scalars("train/loss")} == pytest.approx(losses, rel=1e-6)
    assert sorted(losses) == [1, 2, 3]
