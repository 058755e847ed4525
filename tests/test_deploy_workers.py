"""The training workers scripts/serve.py and docker-compose.yml start: a CPU worker, and one GPU
worker per machine with all its GPUs, one run at a time; each is started with its kind's queue
and adds the queues of the device counts it can give as it starts (webapp.runs.capacity), so no
device count is configured for it."""
from __future__ import annotations

import yaml

from tests.livestack import ROOT
from tests.test_serve_backoff import load_serve
from webapp.runs import capacity


def option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_serve_starts_a_gpu_worker_only_where_there_is_a_driver():
    serve = load_serve()
    [cpu] = serve.training_workers({}, gpus=False)
    assert cpu.name == "worker" and option(cpu.argv, "-Q") == "cpu" and option(cpu.argv, "--concurrency") == "2"
    cpu, gpu = serve.training_workers({"A": "b"}, gpus=True)
    assert gpu.name == "gpu worker" and option(gpu.argv, "-Q") == "gpu"
    assert option(gpu.argv, "--concurrency") == "1"  # one run at a time has the machine's GPUs
    assert option(cpu.argv, "-n") != option(gpu.argv, "-n") and gpu.env == {"A": "b"}
    assert {option(c.argv, "-Q") for c in (cpu, gpu)} <= set(capacity.KINDS)


def test_compose_runs_one_gpu_worker_per_machine_with_all_its_gpus():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    gpu = services["worker-gpu"]
    argv = gpu["command"].split()
    assert option(argv, "-Q") == "gpu" and option(argv, "--concurrency") == "1"
    assert gpu["deploy"]["resources"]["reservations"]["devices"] == [
        {"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
    assert "RUN_MAX_DEVICES" not in gpu["environment"] and "WORKER_GPUS" not in gpu["environment"]  # counted
    assert option(services["worker-cpu"]["command"].split(), "-Q") == "cpu"
    assert option(services["worker-jobs"]["command"].split(), "-Q") == "jobs"
    names = [option(s["command"].split(), "-n") for s in services.values() if "celery" in str(s.get("command"))]
    assert len(names) == len(set(names)) == 5  # every worker its own node name (its capacity's key)


def test_model_servers_have_a_worker_of_their_own_that_takes_nothing_else():
    """The serve queue's worker (scripts/serve.py and docker-compose.yml) consumes that queue only, with
    slots for a few servers at once; no other worker consumes it."""
    serve = load_serve()
    worker = serve.serve_worker({"A": "b"})
    assert option(worker.argv, "-Q") == "serve" and int(option(worker.argv, "--concurrency")) >= 2
    assert worker.env == {"A": "b"} and worker.name == "serve worker"
    assert option(serve.serve_worker({"SERVE_WORKER_CONCURRENCY": "6"}).argv, "--concurrency") == "6"
    assert all(option(w.argv, "-Q") != "serve" for w in serve.training_workers({}, gpus=True))

    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    queues = {name: option(s["command"].split(), "-Q") for name, s in services.items() if "celery" in str(s.get("command"))}
    assert [name for name, q in queues.items() if "serve" in q.split(",")] == ["worker-serve"]
    assert queues["worker-serve"] == "serve"
    argv = services["worker-serve"]["command"].split()
    assert int(option(argv, "--concurrency")) >= 2
    env = services["worker-serve"]["environment"]
    assert env["SERVE_HOST"] == "0.0.0.0" and env["DATABASE_URL"] == services["worker-cpu"]["environment"]["DATABASE_URL"]
    low, high = (int(p) for p in env["SERVE_PORTS"].split("-"))
    assert services["worker-serve"]["ports"] == [f"{low}-{high}:{low}-{high}"]
    assert high - low + 1 >= int(option(argv, "--concurrency"))  # a port for every server it may run
