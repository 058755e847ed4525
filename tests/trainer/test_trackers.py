"""report_to (trainer/trackers.py, trainer/training/tracker_sinks.py): a run mirrors every metric
event of metrics.jsonl, its config and (fine-tuning) its test report to TensorBoard, MLflow and
W&B, each in the run's folder with no server and no network; a tracker whose package is missing
is refused with a sentence before anything runs."""
from __future__ import annotations

import io
import json
import math
import struct
import sys
from pathlib import Path

import pytest

from trainer.errors import ConfigError
from trainer.finetune.config import FinetuneConfig
from trainer.training.sinks import ConsoleSink



def needs_tensorboard_and_mlflow() -> None:
    """The two trackers the run tests name (requirements-trackers.txt, installed for the tests)."""
    pytest.importorskip("tensorboard")
    pytest.importorskip("mlflow")


def jsonl_events(out: Path) -> list[tuple[int, str, str, float]]:
    """(step, split, key, value) of every number in the run's metrics.jsonl."""
    rows = []
    for line in (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        for key, value in record["values"].items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                rows.append((record["step"], record["split"], key, float(value)))
    return rows


def same(a: float, b: float, *, rel: float = 0.0) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=rel, abs=0.0)


def tensorboard_scalars(folder: Path) -> dict[str, dict[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}


def mlflow_run(out: Path):
    from mlflow.tracking import MlflowClient

    from trainer.training.tracker_sinks import MLFLOW_EXPERIMENT, mlflow_uri

    client = MlflowClient(tracking_uri=mlflow_uri(out))
    experiment = client.get_experiment_by_name(MLFLOW_EXPERIMENT)
    (run,) = client.search_runs([experiment.experiment_id])
    return client, run


def assert_mirrors_metrics_jsonl(out: Path) -> list[tuple[int, str, str, float]]:
    """Every number of metrics.jsonl is in TensorBoard (float32) and MLflow (exactly) as
    "<split>/<key>" at its step, and neither holds anything else."""
    events = jsonl_events(out)
    assert events
    scalars = tensorboard_scalars(out / "tensorboard")
    client, run = mlflow_run(out)
    expected: dict[str, dict[int, float]] = {}
    for step, split, key, value in events:
        expected.setdefault(f"{split}/{key}", {})[step] = value
    assert set(scalars) == set(expected) == set(run.data.metrics)
    for tag, by_step in expected.items():
        assert set(scalars[tag]) == set(by_step), tag
        history = {m.step: m.value for m in client.get_metric_history(run.info.run_id, tag)}
        assert set(history) == set(by_step), tag
        for step, value in by_step.items():
            assert same(scalars[tag][step], value, rel=1e-6), (tag, step)  # TensorBoard keeps float32
            assert same(history[step], value), (tag, step)
    return events


def test_a_pre_training_run_mirrors_metrics_jsonl_and_its_config(tokenizer_dir, make_config, tmp_path):
    needs_tensorboard_and_mlflow()
    from trainer.training.engine import train

    config = make_config(max_steps=4, batch_size=4, seq_len=32, warmup_steps=1, eval_every=2, eval_batches=1,
                         checkpoint_every=4, log_every=1, report_to=["tensorboard", "mlflow"])
    out, console = tmp_path / "run", io.StringIO()
    result = train(config, data_dir=tokenizer_dir, out_dir=out, sink=ConsoleSink(out, stream=console))
    assert result.status == "succeeded"
    assert ("Mirroring the metrics and settings to tensorboard in tensorboard/, mlflow in mlruns/ of the run's "
            "folder.") in console.getvalue()
    events = assert_mirrors_metrics_jsonl(out)
    assert {split for _, split, _, _ in events} == {"train", "valid"}
    assert {step for step, split, _, _ in events if split == "train"} == {1, 2, 3, 4}

    _, run = mlflow_run(out)
    params = run.data.params
    assert params["lr"] == str(config.lr) and params["report_to"] == '["tensorboard", "mlflow"]'
    assert params["model_overrides.hidden_size"] == "64" and run.info.status == "FINISHED"
    logged = Path(run.info.artifact_uri.removeprefix("file://")) / "config.json"
    assert json.loads(logged.read_text()) == config.to_dict()


def test_a_fine_tuning_run_mirrors_its_metrics_and_its_test_report(trained_run, tmp_path):
    needs_tensorboard_and_mlflow()
    from trainer.finetune.engine import finetune
    from tests.trainer.finetune_helpers import ingested_demo

    dataset = ingested_demo("classification", tmp_path / "data")
    out = tmp_path / "tuned"
    config = FinetuneConfig(checkpoint=str(trained_run[0].last_checkpoint), dataset=str(dataset), max_steps=4,
                            batch_size=8, max_length=32, eval_every=2, checkpoint_every=4, log_every=1,
                            device="cpu", num_threads=1, data_workers=0, report_to=["tensorboard", "mlflow"])
    result = finetune(config, out_dir=out, sink=ConsoleSink(out, stream=io.StringIO()))
    assert result.status == "succeeded"
    events = assert_mirrors_metrics_jsonl(out)
    test = {key: value for _, split, key, value in events if split == "test"}
    assert test == json.loads((out / "test_metrics.json").read_text()) and "accuracy" in test

    _, run = mlflow_run(out)
    artifacts = Path(run.info.artifact_uri.removeprefix("file://"))
    for name in ("test_metrics.json", "test_report.json"):
        assert (artifacts / name).read_bytes() == (out / name).read_bytes()
    assert json.loads((artifacts / "config.json").read_text())["task"] == run.data.params["task"] == "classification"


# --------------------------------------------------------------------------- W&B (offline)
def wandb_records(run_file: Path) -> list:
    """The records of an offline W&B run file (a LevelDB-style log of wandb's protobuf Records in
    32 KiB blocks, after a 7-byte header), read without wandb's own reader (which it no longer ships)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, block = run_file.read_bytes(), 32768
    assert data[:4] == b":W&B"
    records, pending, pos = [], b"", 7
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # the rest of a block too short for a header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 and length == 0:
            pos += left
            continue
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        pending = chunk if kind in (1, 2) else pending + chunk  # FULL, FIRST / MIDDLE, LAST
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            records.append(record)
    return records


def test_wandb_offline_gets_every_metric_at_its_step_and_the_config(tmp_path):
    pytest.importorskip("wandb")
    from trainer.training.tracker_sinks import open_sinks

    events = [(1, "train", {"loss": 2.5, "lr": 1e-3, "note": None}), (2, "train", {"loss": 2.25}),
              (2, "valid", {"loss": 2.0, "perplexity": 7.5}), (2, "test", {"accuracy": 0.75})]
    (tmp_path / "test_metrics.json").write_text(json.dumps({"accuracy": 0.75}))
    (sink,) = open_sinks(["wandb"], {"lr": 1e-3, "objectives": ["mlm"]}, tmp_path)
    for step, split, values in events:
        sink.metrics(step, split, values)
    sink.close()

    (run_file,) = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")
    logged: dict[str, dict[int, float]] = {}
    config = {}
    for record in wandb_records(run_file):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            row = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            for key, value in row.items():
                if not key.startswith("_"):
                    logged.setdefault(key, {})[row["_step"]] = value
        elif kind == "run":
            config.update({item.key: json.loads(item.value_json) for item in record.run.config.update})
    assert logged == {"train/loss": {1: 2.5, 2: 2.25}, "train/lr": {1: 1e-3}, "valid/loss": {2: 2.0},
                      "valid/perplexity": {2: 7.5}, "test/accuracy": {2: 0.75}}
    assert config["lr"] == 1e-3 and config["objectives"] == ["mlm"]


# --------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("tracker,package", [("mlflow", "mlflow"), ("tensorboard", "tensorboard"),
                                             ("wandb", "wandb")])
def test_a_tracker_whose_package_is_missing_is_refused_with_a_sentence(monkeypatch, make_config, tracker, package):
    monkeypatch.setitem(sys.modules, package, None)  # what `import mlflow` meets when it is not installed
    sentence = f"report_to names {tracker} but the {package} package is not installed: pip install {package}"
    with pytest.raises(ConfigError) as raised:
        make_config(report_to=[tracker])
    assert str(raised.value) == sentence
    with pytest.raises(ConfigError) as raised:
        FinetuneConfig(checkpoint="ckpt", dataset="data", report_to=[tracker])
    assert str(raised.value) == sentence


def test_report_to_is_checked_and_round_trips(make_config):
    from trainer.config import RunConfig

    for bad, words in (("comet", "not a tracker offered here"), (["mlflow", "mlflow"], "twice"),
                       ({"mlflow": True}, "must be a list")):
        with pytest.raises(ConfigError, match=words):
            make_config(report_to=bad)
    config = make_config(report_to="tensorboard, mlflow")  # a form's or a command line's text
    assert config.report_to == ["tensorboard", "mlflow"] and make_config().report_to == []
    assert RunConfig.from_yaml(config.to_yaml()) == config
    assert config.eval.report_to == ("tensorboard", "mlflow")


def test_the_cli_refuses_a_missing_tracker_in_one_line_before_preparing_anything(monkeypatch, tmp_path, capsys):
    from trainer.cli import main

    monkeypatch.setitem(sys.modules, "mlflow", None)
    (tmp_path / "corpus.txt").write_text("One sentence. Another one.\n", encoding="utf-8")
    (tmp_path / "run.yaml").write_text("corpus: corpus.txt\noutput_dir: out\nreport_to: [mlflow]\n", encoding="utf-8")
    assert main(["run", str(tmp_path / "run.yaml")]) == 2
    assert capsys.readouterr().err == ("error: report_to names mlflow but the mlflow package is not installed: "
                                       "pip install mlflow\n")
    assert not (tmp_path / "out").exists()


def test_a_resumed_run_goes_on_in_the_same_mlflow_run(tmp_path):
    pytest.importorskip("mlflow")
    from trainer.training.tracker_sinks import open_sinks

    (first,) = open_sinks(["mlflow"], {"lr": 0.001, "max_steps": 2}, tmp_path)
    first.metrics(1, "train", {"loss": 3.0})
    first.metrics(2, "train", {"loss": 2.0})
    first.close()
    (second,) = open_sinks(["mlflow"], {"lr": 0.001, "max_steps": 4}, tmp_path)  # resumed with more steps
    second.metrics(3, "train", {"loss": 1.0})
    second.close()
    client, run = mlflow_run(tmp_path)  # one run, not two
    history = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "train/loss")}
    assert history == {1: 3.0, 2: 2.0, 3: 1.0} and run.info.status == "FINISHED"
    assert run.data.params["max_steps"] == "2"  # MLflow keeps a param's first value


def test_a_resumed_run_goes_on_under_the_same_wandb_id(tmp_path):
    pytest.importorskip("wandb")
    from trainer.training.tracker_sinks import open_sinks

    for step in (1, 2):
        (sink,) = open_sinks(["wandb"], {"lr": 0.001}, tmp_path)
        sink.metrics(step, "train", {"loss": 1.0 / step})
        sink.close()
    runs = sorted((tmp_path / "wandb").glob("offline-run-*"))
    # offline-run-<date>_<time>-<id>, with "-1" appended when both runs started in the same second
    assert len(runs) == 2 and len({r.name.split("-")[3] for r in runs}) == 1
