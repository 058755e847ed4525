"""Real processes (issue 22, point 6): a worker started with WORKER_MAX_MEMORY_PER_CHILD replaces its
pool process after a task once that process's resident memory has passed the limit, so memory a task
left behind (a model, the explorer's cache, the allocator's arenas) is given back to the system; at 0
the same pool process serves every task.

The worker uses a Redis of its own, so the session's live stack never takes its tasks. Its tasks are
Celery's built-in `celery.accumulate` (returns its argument, touches nothing); which pool process ran
each is read from the worker's children (its pool): with one pool process, the task sent while the
pool is [a] runs in a."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.livestack import RedisServer, start_worker, stop_process, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

QUEUE = "idle-memory-test"


def pool_pids(worker: int) -> list[int] | None:
    """The pids of the worker's living pool processes (its children, from /proc), or None unless
    there is exactly one: between a recycled process's exit and its successor's start there is none."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, parent = stat.read_text().rpartition(")")[2].split()[:2]
        except OSError:  # the process ended meanwhile
            continue
        if int(parent) == worker and state != "Z":
            pids.append(int(stat.parent.name))
    return pids if len(pids) == 1 else None


def task_processes(log: Path) -> list[str]:
    """The pool process that ran each task the worker has finished, in order, as its log names it
    ("ForkPoolWorker-<n>": billiard numbers every process it starts, a replacement included)."""
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    return [line.split("/", 1)[1].split("]", 1)[0] for line in lines
            if "celery.accumulate[" in line and "] succeeded in " in line]


def send(broker_url: str) -> None:
    from webapp.celery import app

    with app.connection_for_write(broker_url) as conn:  # send_task never runs it here, even when eager
        app.send_task("celery.accumulate", args=[1], queue=QUEUE, connection=conn)


@pytest.mark.parametrize("limit_kib, recycled", [("1", True), ("0", False)])
def test_a_pool_process_over_the_memory_limit_is_replaced_after_its_task(tmp_path, limit_kib, recycled):
    broker = RedisServer(tmp_path / "redis").start()
    log = tmp_path / "worker.log"

    def read_log() -> str:
        return log.read_text(errors="replace")[-5000:] if log.exists() else ""

    worker = start_worker("idle-mem", log, redis_url=broker.url, queues=QUEUE,
                          env={"WORKER_MAX_MEMORY_PER_CHILD": limit_kib})

    def one_pool_process(other_than: tuple[int, ...] = ()) -> int:
        def ready() -> bool:
            pids = pool_pids(worker.pid)
            return pids is not None and pids[0] not in other_than

        wait_until("one living pool process", ready, 30, read_log)
        return pool_pids(worker.pid)[0]

    def run_task(n: int) -> None:
        send(broker.url)
        wait_until(f"task {n} done", lambda: len(task_processes(log)) == n, 30, read_log)

    try:
        first = one_pool_process()
        run_task(1)
        if recycled:  # the task went over 1 KiB: its process is replaced, and the next task runs in the new one
            second = one_pool_process(other_than=(first,))
            run_task(2)
            one_pool_process(other_than=(first, second))
            names = task_processes(log)
            assert names[0] != names[1], (names, read_log())
        else:
            run_task(2)
            time.sleep(1)  # time enough for a replacement to show, were there one
            assert pool_pids(worker.pid) == [first], read_log()
            names = task_processes(log)
            assert names[0] == names[1], (names, read_log())
    finally:
        stop_process(worker)
        broker.stop()
