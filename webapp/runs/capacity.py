"""Which training worker can take a run: queues by device count, what workers advertise, and
the sentence a queued run's page and API show while it waits.

Routing (Celery's own, no scheduler of ours): a run on d devices of kind "gpu" or "cpu" goes
to queue_name(kind, d), the kind's queue for one device ("gpu", "cpu") and "gpu.x2",
"gpu.x3", ... for more; `devices: "all"` goes to the kind's queue as it is and is resolved by
the worker that takes it (every GPU it has). A message waits in the broker until a worker
consuming its queue takes it.

A training worker is started with its kinds' queues (`-Q gpu`, `-Q cpu`: scripts/serve.py,
docker-compose.yml). As it starts (celeryd_after_setup, webapp/celery.py) it counts what it can
give one run and adds the queues of the device counts it can serve:
- a GPU worker: its GPUs, WORKER_GPUS when set, else torch.cuda.device_count() asked in a
  subprocess (the worker itself must not initialise CUDA before it forks its pool), shared out
  between its pool processes: with --concurrency C each process (so each run it trains at once)
  gets its own G // C GPUs through CUDA_VISIBLE_DEVICES (gpu_slices, set in the child as it
  starts: on_child_start), and a worker with more processes than GPUs refuses to start;
- a CPU worker: settings.RUN_MAX_DEVICES processes over gloo.
Each also counts the memory it gives one run: the machine's available memory as it starts
(trainer.catalog.size.available_memory, the source of the model-size check), shared out
between its pool processes. Launching a CPU run checks the model and its activations against
the most a live worker on the run's queue gives (run_memory).
It then writes {queues, gpus, cpu_processes, memory} to the Redis key KEY_PREFIX + its node name every
BEAT_S seconds (the Advertise bootstep), which expires TTL_S seconds after its last beat, and
deletes it when it stops. waiting() reads those keys to say whether a live worker can take a
queued run; when Redis does not answer it says only what the run waits for.

The task checks again when it starts (devices_here): a message that reached a worker that
cannot give the run its devices (a GPU gone, WORKER_GPUS lower than the machine) fails the run
with a sentence.
"""
from __future__ import annotations

import functools
import json
import logging
import os
import subprocess
import sys
import time
from typing import Any

from celery import bootsteps
from django.conf import settings

from trainer.catalog.size import available_memory
from trainer.config import ALL_DEVICES, resolve_device, resolve_devices
from trainer.errors import ConfigError

log = logging.getLogger(__name__)

KINDS = ("gpu", "cpu")
KEY_PREFIX = "lmwb:worker:"
BEAT_S = 15.0      # how often a worker writes its capacity
TTL_S = 45         # a worker silent this long counts as gone
CACHE_S = 2.0      # pages and the API read the workers' keys at most this often per process
GPU_COUNT_TIMEOUT_S = 120

# What this worker gives one run, set as it starts (inherited by its pool's children); None
# outside a worker (tests calling the task's code directly, the web process).
ADVERTISED: dict[str, Any] | None = None


# ---------------------------------------------------------------------------- queues
def queue_name(kind: str, devices: int) -> str:
    """The queue of a run on `devices` devices of this kind: "gpu", "gpu.x2", "cpu.x4", ..."""
    return kind if devices <= 1 else f"{kind}.x{devices}"


def parse_queue(queue: str) -> tuple[str, int]:
    """queue_name's inverse: ("gpu", 2) for "gpu.x2", (queue, 1) for any other queue."""
    kind, _, count = queue.rpartition(".x")
    if kind and count.isdigit() and int(count) > 1:
        return kind, int(count)
    return queue, 1


def run_queue(kind: str, devices: int | str) -> str:
    """The queue of a run of this kind asking for `devices` (a number, or "all": the kind's own queue)."""
    return queue_name(kind, devices if isinstance(devices, int) else 1)


# ---------------------------------------------------------------------------- the worker's side
def count_gpus() -> int:
    """The GPUs this worker gives: WORKER_GPUS when set, else what torch sees (CUDA_VISIBLE_DEVICES
    applies), asked in a subprocess so that this process, which forks the pool, never touches CUDA."""
    told = os.environ.get("WORKER_GPUS", "").strip()
    if told:
        try:
            return max(0, int(told))
        except ValueError:
            log.warning("WORKER_GPUS is %r, not a whole number; counting the GPUs instead.", told)
    try:
        out = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
                             capture_output=True, text=True, timeout=GPU_COUNT_TIMEOUT_S, check=True)
        return max(0, int(out.stdout.strip().splitlines()[-1]))
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        log.warning("Could not count this machine's GPUs; the worker takes one-GPU runs only.", exc_info=True)
        return 0


def gpu_slices(total: int, processes: int) -> list[str]:
    """CUDA_VISIBLE_DEVICES for each of a GPU worker's `processes` pool processes: the first `total`
    GPUs this worker sees (its own CUDA_VISIBLE_DEVICES, else 0, 1, ...) cut into `processes`
    disjoint slices of total // processes. ConfigError with a sentence when there are fewer GPUs
    than processes (two runs would share a GPU)."""
    if total < processes:
        raise ConfigError(f"This GPU worker has {processes} pool processes (--concurrency {processes}) but gives "
                          f"{total} GPU{'s' if total != 1 else ''}: each process trains one run on GPUs of its own. "
                          f"Start it with --concurrency {max(1, total)} or fewer.")
    seen = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    names = (seen or [str(i) for i in range(total)])[:total]
    each = total // processes
    return [",".join(names[i * each:(i + 1) * each]) for i in range(processes)]


def serve_queues(queues: Any, *, gpus: int | None = None, cpu_processes: int | None = None,
                 processes: int = 1, memory: int | None = None) -> dict[str, Any]:
    """Add to a worker's selected queues (app.amqp.queues, as -Q left them) the queues of the
    device counts it can give one run; returns what it advertises. A kind it was not started
    with stays out: a CPU worker takes no GPU run, however many processes it may start.
    `processes`: the worker's pool size; a GPU worker gives each its own share of its GPUs, and
    every worker each its share of `memory` (bytes; None: the machine's available memory now)."""
    selected = set(queues.consume_from)
    offer: dict[str, Any] = {"gpus": None, "cpu_processes": None}
    if "gpu" in selected:
        total = count_gpus() if gpus is None else gpus
        if total:
            offer["gpu_slices"] = gpu_slices(total, max(1, processes))
            offer["gpus"] = total // max(1, processes)
        else:
            offer["gpus"] = total
    if "cpu" in selected:
        offer["cpu_processes"] = int(settings.RUN_MAX_DEVICES) if cpu_processes is None else cpu_processes
    memory = available_memory() if memory is None else memory
    offer["memory"] = memory // max(1, processes) if memory else None
    for kind, most in (("gpu", offer["gpus"]), ("cpu", offer["cpu_processes"])):
        for devices in range(2, (most or 0) + 1):
            queues.select_add(queue_name(kind, devices))
    offer["queues"] = sorted(queues.consume_from)
    return offer


def on_worker_setup(sender: str, instance: Any, **_: Any) -> None:
    """celeryd_after_setup: the worker's queues (see the module's docstring), before its pool forks."""
    global ADVERTISED
    try:
        offer = serve_queues(instance.app.amqp.queues, processes=int(getattr(instance, "concurrency", 1) or 1))
    except ConfigError as e:  # Celery logs and swallows an Exception from a signal handler: exit instead
        log.critical("%s", e)
        raise SystemExit(str(e)) from None
    ADVERTISED = {**offer, "name": str(sender)}
    trained = [q for q in offer["queues"] if parse_queue(q)[0] in KINDS]
    if trained:
        log.info("Training runs from %s (GPUs: %s, CPU processes: %s).", ", ".join(trained),
                 offer["gpus"], offer["cpu_processes"])


def on_child_start(**_: Any) -> None:
    """worker_process_init: a GPU worker's pool process sees only its own GPUs (gpu_slices), so
    two runs trained at once never share one. Billiard gives a process that replaces a dead one
    the same index, hence the same GPUs."""
    slices = (ADVERTISED or {}).get("gpu_slices")
    if not slices:
        return
    from billiard.process import current_process

    index = getattr(current_process(), "index", 0) or 0
    os.environ["CUDA_VISIBLE_DEVICES"] = slices[index % len(slices)]
    log.info("This pool process trains on GPUs %s.", os.environ["CUDA_VISIBLE_DEVICES"])


class Advertise(bootsteps.StartStopStep):
    """A worker's capacity in Redis while it lives (only a worker that trains runs)."""

    requires = {"celery.worker.components:Timer"}

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        self.tref = None

    def start(self, worker: Any) -> None:
        if ADVERTISED is None or not any(parse_queue(q)[0] in KINDS for q in ADVERTISED["queues"]):
            return
        beat()
        self.tref = worker.timer.call_repeatedly(BEAT_S, beat, (), priority=10)

    def stop(self, worker: Any) -> None:
        if self.tref is not None:
            self.tref.cancel()
            self.tref = None
            withdraw()


def _redis():
    return _client(settings.REDIS_URL)


@functools.lru_cache(maxsize=4)
def _client(url: str):
    import redis

    return redis.Redis.from_url(url, socket_timeout=1.0, socket_connect_timeout=1.0)


def beat() -> None:
    """Write this worker's capacity (a missed beat is logged; the next one tries again)."""
    if ADVERTISED is None:
        return
    try:
        _redis().set(KEY_PREFIX + ADVERTISED["name"], json.dumps({**ADVERTISED, "at": time.time()}), ex=TTL_S)
    except Exception:  # noqa: BLE001 - Redis away: the worker goes on; pages say less meanwhile
        log.warning("Could not advertise this worker's capacity", exc_info=True)


def withdraw() -> None:
    if ADVERTISED is None:
        return
    try:
        _redis().delete(KEY_PREFIX + ADVERTISED["name"])
    except Exception:  # noqa: BLE001
        log.warning("Could not withdraw this worker's capacity", exc_info=True)


def devices_here(config: Any) -> int:
    """How many processes this worker starts for the run (the task, as it starts): "all" is every
    GPU it gives (1 on a CPU), a number must be one it can give; ConfigError with a sentence
    otherwise (the machine has fewer GPUs, or the worker advertises fewer)."""
    processes = resolve_devices(config.devices, config.device)
    cuda = resolve_device(config.device) == "cuda"
    most = (ADVERTISED or {}).get("gpus" if cuda else "cpu_processes")
    if most is None and not cuda:
        most = int(settings.RUN_MAX_DEVICES)
    if not most:
        return processes
    if config.devices == ALL_DEVICES:
        return min(processes, most)
    if processes > most:
        what = "GPUs" if cuda else "CPU processes"
        name = (ADVERTISED or {}).get("name", "this worker")
        raise ConfigError(f"This run asks for {processes} {what}, but the worker that took it ({name}) gives one run "
                          f"at most {most}. Clone it with devices set to {most} or fewer (raise grad_accum to keep "
                          f"the effective batch), or start a worker that has {processes}.")
    return processes


# ---------------------------------------------------------------------------- the pages' side
_cache: tuple[float, list[dict[str, Any]] | None] = (0.0, None)


def live_workers() -> list[dict[str, Any]] | None:
    """What every live training worker advertises; None when Redis does not answer."""
    global _cache
    now = time.monotonic()
    if CACHE_S and now - _cache[0] < CACHE_S:
        return _cache[1]
    try:
        client = _redis()
        keys = list(client.scan_iter(match=KEY_PREFIX + "*", count=100))
        values = client.mget(keys) if keys else []
        found: list[dict[str, Any]] | None = []
        for value in values:
            try:
                found.append(json.loads(value))
            except (TypeError, ValueError):
                continue  # expired between SCAN and MGET, or not ours
    except Exception:  # noqa: BLE001 - the page says what it can without them
        log.warning("Could not read the workers' capacity from Redis", exc_info=True)
        found = None
    _cache = (now, found)
    return found


def run_memory(queue: str) -> int | None:
    """The most memory (bytes) a live worker consuming `queue` gives one run, as it advertises;
    None when none says (no live worker, Redis away, a worker from before it advertised memory):
    then only the worker's own check, before it allocates, applies."""
    sizes = [w["memory"] for w in live_workers() or [] if queue in w.get("queues", ())
             and isinstance(w.get("memory"), int) and not isinstance(w.get("memory"), bool)]
    return max(sizes) if sizes else None


def _need(kind: str, devices: int) -> str:
    if kind == "gpu":
        return f"{devices} GPUs"
    if kind == "cpu":
        return f"{devices} CPU processes"
    return f"{devices} devices"


def waiting(run: Any) -> str:
    """What a queued run waits for, in a sentence or two ("" unless it is queued): the devices
    it needs, and when no live worker can take it, that no one can (and the most one gives)."""
    if run.status != "queued":
        return ""
    kind, devices = parse_queue(run.queue)
    workers = live_workers()
    if devices > 1:
        text = (f"Waiting for a worker with {_need(kind, devices)}." if kind == "gpu"
                else f"Waiting for a worker that can start {_need(kind, devices)}.")
    else:
        text = f"Waiting for a worker on the {run.queue} queue."
    if workers is None:
        return text
    if any(run.queue in w.get("queues", ()) for w in workers):
        return text
    serving = [w for w in workers if any(parse_queue(q)[0] == kind for q in w.get("queues", ()))]
    if devices > 1 and serving:
        best = max(max((parse_queue(q)[1] for q in w.get("queues", ()) if parse_queue(q)[0] == kind), default=1)
                   for w in serving)
        return (f"{text} No worker running now can give it {_need(kind, devices)} (the most one gives is {best}); "
                f"it starts when one that can joins, or cancel it and launch it on fewer devices.")
    return f"{text} No worker is taking runs from the {kind} queue now; it starts when one does."
