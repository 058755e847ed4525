"""The MetricsSinks of the experiment trackers a run's `report_to` names (trainer.trackers):
train() and finetune() tee them beside the run's own sink on rank 0, so the CLI, the web app's
worker and torchrun's processes all mirror alike.

Every metric event is mirrored under the name "<split>/<key>" (split: train, valid or test; key:
its name in metrics.jsonl) at its step, the config once at the start, and a fine-tuning run's
test files (test_metrics.json, test_report.json) once it has been scored on its test split. Each
tracker writes into its folder of the run (trainer.trackers.FOLDERS), with no server and no
network, and its package is imported only when a run names it.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from trainer.errors import ConfigError
from trainer.trackers import FOLDERS
from trainer.training.sinks import NullSink

TEST_FILES = ("test_metrics.json", "test_report.json")  # trainer.finetune.engine / trainer.finetune.report
MLFLOW_EXPERIMENT = "lm-workbench"
MLFLOW_DB = "mlflow.db"  # in <run>/mlruns
WANDB_PROJECT = "lm-workbench"


def open_sinks(report_to: list[str], config: dict, out_dir: Path) -> list[Any]:
    """One sink per named tracker, each writing into out_dir (its FOLDERS entry), the config
    already recorded. A tracker that cannot start raises ConfigError with its reason, after the
    ones already opened are closed."""
    opened: list[Any] = []
    try:
        for name in report_to:
            opened.append(SINKS[name](Path(out_dir), config))
    except ConfigError:
        close_all(opened)
        raise
    except Exception as e:  # noqa: BLE001 - a tracker's own failure becomes a sentence, the run does not start
        close_all(opened)
        raise ConfigError(f"The {name} tracker could not start in {FOLDERS[name]}/: {type(e).__name__}: {e}") from None
    return opened


def describe(report_to: list[str]) -> str:
    """The log line that says where the trackers write (relative to the run's folder: the web
    app's log never shows the server's paths)."""
    where = ", ".join(f"{name} in {FOLDERS[name]}/" for name in report_to)
    return f"Mirroring the metrics and settings to {where} of the run's folder."


def close_all(sinks: list[Any]) -> None:
    """Close every sink, even after one of them failed to (the first failure is raised after)."""
    failure = None
    for s in sinks:
        try:
            s.close()
        except Exception as e:  # noqa: BLE001 - re-raised below, once the others are closed
            failure = failure or e
    if failure is not None:
        raise failure


def scalars(split: str, values: dict[str, Any]) -> dict[str, float]:
    """{"<split>/<key>": value} for the numbers of one metric event (None and text are left out)."""
    out = {}
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        out[f"{split}/{key}"] = float(value)
    return out


def flat_params(config: dict, prefix: str = "") -> dict[str, str]:
    """The config as flat {"name": text} (nested mappings as "a.b"), what MLflow's params take."""
    out: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flat_params(value, f"{name}."))
        else:
            out[name] = json.dumps(value) if isinstance(value, (list, tuple, dict)) else str(value)
    return out


class _TrackerSink(NullSink):
    """What every tracker sink shares: no logs, checkpoints or heartbeats to mirror (NullSink's);
    after a "test" metric event, the run's test files are sent along when the sink closes (they
    are written after the event, before the run ends)."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = Path(out_dir)
        self.tested = False
        self.closed = False

    def metrics(self, step: int, split: str, values: dict[str, float]) -> None:
        if split == "test":
            self.tested = True
        self.write(step, scalars(split, values))

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.tested:
            for name in TEST_FILES:
                path = self.out_dir / name
                if path.is_file():
                    self.attach(path)
        self.finish()

    # each tracker's own
    def write(self, step: int, values: dict[str, float]) -> None:
        raise NotImplementedError

    def attach(self, path: Path) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        raise NotImplementedError


class TensorBoardSink(_TrackerSink):
    """Scalars in <run>/tensorboard; the config and the test files as text (TensorBoard's Text tab)."""

    def __init__(self, out_dir: Path, config: dict) -> None:
        super().__init__(out_dir)
        from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package

        self.writer = SummaryWriter(log_dir=str(self.out_dir / FOLDERS["tensorboard"]))
        self.writer.add_text("config", _code_block(json.dumps(config, indent=2, default=str)), 0)
        self.writer.flush()
        self.step = 0

    def write(self, step: int, values: dict[str, float]) -> None:
        self.step = max(self.step, step)
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, step)
        self.writer.flush()

    def attach(self, path: Path) -> None:
        self.writer.add_text(path.stem, _code_block(path.read_text(encoding="utf-8")), self.step)

    def finish(self) -> None:
        self.writer.close()


class MlflowSink(_TrackerSink):
    """A run of the experiment "lm-workbench" in a local MLflow store, <run>/mlruns/mlflow.db
    (SQLite) with its artifacts in <run>/mlruns/artifacts: metrics at their step, the config as
    params (and config.json), the test files as artifacts. (MLflow 3 refuses its older plain-file
    store unless told otherwise, and names a SQLite file as the local store to use.)"""

    def __init__(self, out_dir: Path, config: dict) -> None:
        super().__init__(out_dir)
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=mlflow_uri(self.out_dir))
        experiment = self.client.get_experiment_by_name(MLFLOW_EXPERIMENT)
        artifacts = (self.out_dir / FOLDERS["mlflow"] / "artifacts").resolve()
        experiment_id = (experiment.experiment_id if experiment is not None
                         else self.client.create_experiment(MLFLOW_EXPERIMENT, artifact_location=artifacts.as_uri()))
        # The store belongs to this run's folder: a run found in it is this run before a resume,
        # and goes on (its metrics continue; params keep their first values, MLflow never changes one).
        earlier = self.client.search_runs([experiment_id], max_results=1)
        if earlier:
            self.run_id = earlier[0].info.run_id
            self.client.update_run(self.run_id, status="RUNNING")
            logged = earlier[0].data.params
        else:
            self.run_id = self.client.create_run(experiment_id, run_name=self.out_dir.resolve().name).info.run_id
            logged = {}
        from mlflow.entities import Param

        items = [Param(k, v[:6000]) for k, v in flat_params(config).items() if k not in logged]
        for i in range(0, len(items), 100):  # MLflow takes at most 100 params a batch
            self.client.log_batch(self.run_id, params=items[i:i + 100])
        self.client.log_dict(self.run_id, config, "config.json")

    def write(self, step: int, values: dict[str, float]) -> None:
        if not values:
            return
        from mlflow.entities import Metric

        now = _now_ms()
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, now, step) for k, v in values.items()])

    def attach(self, path: Path) -> None:
        self.client.log_artifact(self.run_id, str(path))

    def finish(self) -> None:
        self.client.set_terminated(self.run_id, status="FINISHED")


class WandbSink(_TrackerSink):
    """A W&B run in offline mode under <run>/wandb (`wandb sync` uploads it later, from a
    machine with a network): metrics at their step, the config, the test files in its summary."""

    def __init__(self, out_dir: Path, config: dict) -> None:
        super().__init__(out_dir)
        import wandb

        folder = self.out_dir / FOLDERS["wandb"]
        folder.mkdir(parents=True, exist_ok=True)
        earlier = sorted(folder.glob("offline-run-*-*"))  # this run before a resume: go on under its id
        run_id = earlier[-1].name.rsplit("-", 1)[1] if earlier else None
        self.run = wandb.init(project=WANDB_PROJECT, name=self.out_dir.resolve().name, dir=str(self.out_dir),
                              config=config, mode="offline", reinit="create_new", id=run_id,
                              resume="allow" if run_id else None, settings=wandb.Settings(silent=True))
        self.step = 0

    def write(self, step: int, values: dict[str, float]) -> None:
        if values:
            self.step = max(self.step, step)
            self.run.log(values, step=self.step)

    def attach(self, path: Path) -> None:
        self.run.summary[path.stem] = json.loads(path.read_text(encoding="utf-8"))

    def finish(self) -> None:
        import wandb

        self.run.finish()
        # finish() returns before wandb's service has written the run's file in offline mode;
        # teardown waits for the service to end (the next run starts another)
        wandb.teardown()


def mlflow_uri(out_dir: Path) -> str:
    """The tracking URI of a run's MLflow store: a SQLite file in <run>/mlruns (no server)."""
    store = (Path(out_dir) / FOLDERS["mlflow"]).resolve()
    store.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{store / MLFLOW_DB}"


SINKS = {"tensorboard": TensorBoardSink, "mlflow": MlflowSink, "wandb": WandbSink}


def _code_block(text: str) -> str:
    """Markdown (what TensorBoard's text plugin renders) that shows the text as it is."""
    return "\n".join("    " + line for line in text.splitlines())


def _now_ms() -> int:
    return int(time.time() * 1000)
