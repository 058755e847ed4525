"""Latency of the run API and of a run's live events while people watch it (issue 11, point 8).

    .venv/bin/python bench/serve_latency.py                      # 20 viewers + 30 readers, 60 s
    .venv/bin/python bench/serve_latency.py --viewers 20 --readers 30 --seconds 60 --idle-seconds 20
    DATABASE_URL=postgres://... .venv/bin/python bench/serve_latency.py

Starts the real stack the way scripts/serve.py does (uvicorn with the ASGI app, a Celery worker
for the training queue and one for short jobs) in a temporary STORAGE_ROOT, against SQLite there
(or $DATABASE_URL) and the Redis of $REDIS_URL (default redis://127.0.0.1:6379/0; the benchmark
flushes nothing). Through the HTTP API it uploads the demo corpus, trains a tokenizer and
launches a bert-tiny run long enough to outlast the measurement, then measures twice while the
run trains:

- idle: one dashboard viewer (a websocket on /ws/runs/<id>/, as the run page opens) and one API
  reader (GET /api/runs/<id>/ in a loop);
- loaded: --viewers viewers and --readers readers at once.

A reader sends its next request as soon as the previous answer arrived (plus --poll-interval),
over one keep-alive connection. Event delay is the viewer's receive time minus the event's
"sent_at" (the server's time of emission; the benchmark runs on the same machine, so both
clocks are one). Prints p50/p95/p99 of both, idle and loaded, and loaded/idle ratios. At the end
the run is cancelled and the stack stopped.

The HTTP readers speak HTTP/1.1 over asyncio streams directly: the benchmark shares the machine's
cores with the server it measures, and a full client library per request would take CPU from it.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests
import websockets

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from anywhere in the repo
PY = sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0, "p50": float("nan"), "p95": float("nan"), "p99": float("nan")}
    ordered = sorted(values)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]

    return {"n": len(ordered), "p50": at(0.50), "p95": at(0.95), "p99": at(0.99)}


def cpu_seconds(root_pid: int) -> float:
    """User + system CPU time of a process and all its descendants (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    stats: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()
        stats[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)
    total, todo = 0.0, [root_pid]
    while todo:
        pid = todo.pop()
        total += stats.get(pid, (0, 0.0))[1]
        todo += [child for child, (ppid, _) in stats.items() if ppid == pid]
    return total


class Stack:
    """uvicorn + the training worker + the jobs worker, as scripts/serve.py starts them."""

    def __init__(self, storage: Path, redis_url: str, database_url: str | None, web_args: list[str]) -> None:
        self.storage = storage
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = dict(
            os.environ, STORAGE_ROOT=str(storage), REDIS_URL=redis_url, PYTHONUNBUFFERED="1",
            DJANGO_SETTINGS_MODULE="webapp.settings", ALLOWED_HOSTS="localhost,127.0.0.1",
            CELERY_TASK_ALWAYS_EAGER="0",
        )
        if database_url:
            self.env["DATABASE_URL"] = database_url
        self.web_args = web_args
        self.procs: list[subprocess.Popen] = []

    def _start(self, name: str, args: list[str]) -> None:
        log = open(self.storage / f"{name}.log", "wb")
        self.procs.append(subprocess.Popen(args, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                           start_new_session=True))

    def start(self) -> None:
        (self.storage / "tmp").mkdir(parents=True, exist_ok=True)
        subprocess.run([PY, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=self.env, check=True)
        self._start("web", [PY, "-m", "uvicorn", "webapp.asgi:application", "--host", "127.0.0.1",
                            "--port", str(self.port), "--ws", "websockets-sansio", "--lifespan", "off",
                            "--no-access-log", *self.web_args])
        self._start("worker", [PY, "-m", "celery", "-A", "webapp", "worker", "-Q", "cpu", "--concurrency", "2",
                               "--prefetch-multiplier", "1", "-O", "fair", "--loglevel", "INFO",
                               "-n", f"bench-{os.getpid()}@%h"])
        self._start("jobs", [PY, "-m", "celery", "-A", "webapp", "worker", "-Q", "jobs", "--concurrency", "1",
                             "--prefetch-multiplier", "1", "--loglevel", "INFO", "-n", f"bench-jobs-{os.getpid()}@%h"])
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                if any(p.poll() is not None for p in self.procs):
                    break
                time.sleep(0.2)
        raise SystemExit("The stack did not start:\n" + self.logs())

    def logs(self) -> str:
        return "\n".join(f"----- {f.name}\n" + f.read_text(errors="replace")[-3000:]
                         for f in sorted(self.storage.glob("*.log")))

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


def make_user(stack: Stack) -> str:
    """A user and its API token, created with the app's own models (in this process)."""
    os.environ.update({k: stack.env[k] for k in ("STORAGE_ROOT", "REDIS_URL", "DJANGO_SETTINGS_MODULE")})
    if "DATABASE_URL" in stack.env:
        os.environ["DATABASE_URL"] = stack.env["DATABASE_URL"]
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    user = get_user_model().objects.create_user(username=f"bench{os.getpid()}", password="bench-password-123")
    key = Token.objects.create(user=user).key
    from django.db import connections

    connections.close_all()
    return key


def wait_status(s: requests.Session, url: str, done: set[str], timeout: float, stack: Stack) -> dict:
    deadline = time.time() + timeout
    while time.time() < deadline:
        body = s.get(url).json()
        if body.get("status") in done:
            return body
        time.sleep(0.5)
    raise SystemExit(f"{url} did not reach {done} in {timeout} s\n{stack.logs()}")


def launch(stack: Stack, token: str, args) -> str:
    from trainer.prep.corpus import write_demo_corpus

    s = requests.Session()
    s.headers["Authorization"] = f"Token {token}"
    api = stack.url + "/api"
    demo = stack.storage / "demo.txt"
    write_demo_corpus(demo)
    text = demo.read_text(encoding="utf-8")[:300_000]
    r = s.post(f"{api}/corpora/", data={"name": "docstrings"}, files={"file": ("docs.txt", text.encode())})
    r.raise_for_status()
    corpus = wait_status(s, f"{api}/corpora/{r.json()['id']}/", {"ready", "failed"}, 300, stack)
    assert corpus["status"] == "ready", corpus
    r = s.post(f"{api}/tokenizers/", json={"corpus": corpus["id"], "algorithm": "wordpiece", "vocab_size": 2000})
    r.raise_for_status()
    tok = wait_status(s, f"{api}/tokenizers/{r.json()['id']}/", {"ready", "failed"}, 300, stack)
    assert tok["status"] == "ready", tok
    r = s.post(f"{api}/runs/", json={
        "name": "latency bench", "tokenizer": tok["id"], "family": "bert", "preset": "bert-tiny",
        "objectives": ["mlm", "nsp"], "max_steps": 100_000, "batch_size": args.batch_size, "seq_len": 64,
        "warmup_steps": 10, "eval_every": 100_000, "checkpoint_every": 100_000, "log_every": args.log_every,
        "num_threads": args.threads,
    })
    if r.status_code != 201:
        raise SystemExit(f"launch: {r.status_code} {r.text}")
    run_id = r.json()["id"]
    wait_status(s, f"{api}/runs/{run_id}/", {"running", "failed", "crashed"}, 120, stack)
    return run_id


def cancel(stack: Stack, token: str, run_id: str) -> None:
    requests.post(f"{stack.url}/api/runs/{run_id}/cancel/", headers={"Authorization": f"Token {token}"}, timeout=30)


# -- the load ----------------------------------------------------------------------------------

async def viewer(ws_url: str, token: str, stop: asyncio.Event, delays: list[float], counts: dict) -> None:
    async with websockets.connect(ws_url, additional_headers={"Authorization": f"Token {token}"},
                                  origin="http://127.0.0.1", max_size=None) as ws:
        while not stop.is_set():
            try:
                raw = await asyncio.wait_for(ws.recv(), timeout=0.5)
            except asyncio.TimeoutError:
                continue
            now = time.time()
            msg = json.loads(raw)
            if msg.get("type") == "hello" or msg.get("replayed") or not msg.get("sent_at"):
                continue
            delays.append(now - msg["sent_at"])
            counts[msg["type"]] = counts.get(msg["type"], 0) + 1


async def reader(port: int, path: str, token: str, stop: asyncio.Event, latencies: list[float],
                 errors: list[str], interval: float) -> None:
    reader_, writer = await asyncio.open_connection("127.0.0.1", port)
    request = (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Token {token}\r\n"
               f"Accept: application/json\r\n\r\n").encode()
    try:
        while not stop.is_set():
            started = time.perf_counter()
            writer.write(request)
            head = await reader_.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            length = next(int(v) for k, _, v in (ln.partition(":") for ln in lines[1:]) if k.lower() == "content-length")
            await reader_.readexactly(length)
            latencies.append(time.perf_counter() - started)
            if not lines[0].startswith("HTTP/1.1 200"):
                errors.append(lines[0])
            if interval:
                await asyncio.sleep(interval)
    finally:
        writer.close()


async def measure(stack: Stack, token: str, run_id: str, n_viewers: int, n_readers: int, seconds: float,
                  interval: float) -> dict:
    stop = asyncio.Event()
    delays: list[float] = []
    latencies: list[float] = []
    errors: list[str] = []
    counts: dict[str, int] = {}
    ws_url = f"ws://127.0.0.1:{stack.port}/ws/runs/{run_id}/"
    tasks = [asyncio.create_task(viewer(ws_url, token, stop, delays, counts)) for _ in range(n_viewers)]
    await asyncio.sleep(1.0)  # every viewer connected and subscribed before anything is counted
    delays.clear()
    counts.clear()
    tasks += [asyncio.create_task(reader(stack.port, f"/api/runs/{run_id}/", token, stop, latencies, errors, interval))
              for _ in range(n_readers)]
    web_cpu, worker_cpu, load = cpu_seconds(stack.procs[0].pid), cpu_seconds(stack.procs[1].pid), os.getloadavg()[0]
    await asyncio.sleep(seconds)
    web_cpu = cpu_seconds(stack.procs[0].pid) - web_cpu
    worker_cpu = cpu_seconds(stack.procs[1].pid) - worker_cpu
    stop.set()
    done = await asyncio.gather(*tasks, return_exceptions=True)
    failures = [repr(d) for d in done if isinstance(d, BaseException)]
    return {"api": percentiles(latencies), "events": percentiles(delays), "event_types": counts,
            "requests_per_s": len(latencies) / seconds, "http_errors": errors[:5], "client_failures": failures[:5],
            "web_cpu_share": web_cpu / seconds, "worker_cpu_share": worker_cpu / seconds,
            "web_cpu_ms_per_request": 1000 * web_cpu / max(1, len(latencies)),
            "load_average": (load + os.getloadavg()[0]) / 2}


def show(name: str, result: dict) -> None:
    api, ev = result["api"], result["events"]
    print(f"{name:7s} API   GET /api/runs/<id>/  n={api['n']:6d}  ({result['requests_per_s']:.1f}/s)  "
          f"p50 {api['p50'] * 1000:7.1f} ms  p95 {api['p95'] * 1000:7.1f} ms  p99 {api['p99'] * 1000:7.1f} ms")
    print(f"{name:7s} event delay                n={ev['n']:6d}            "
          f"p50 {ev['p50'] * 1000:7.1f} ms  p95 {ev['p95'] * 1000:7.1f} ms  p99 {ev['p99'] * 1000:7.1f} ms")
    print(f"{'':7s} events by type {result['event_types']}")
    print(f"{'':7s} CPU: web server {result['web_cpu_share']:.2f} cores ({result['web_cpu_ms_per_request']:.1f} ms "
          f"per API request), training worker {result['worker_cpu_share']:.2f} cores; machine load average "
          f"{result['load_average']:.1f} on {os.cpu_count()} cores")
    if result["http_errors"] or result["client_failures"]:
        print(f"{'':7s} ERRORS: {result['http_errors']} {result['client_failures']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--viewers", type=int, default=20)
    parser.add_argument("--readers", type=int, default=30)
    parser.add_argument("--seconds", type=float, default=60, help="length of the loaded measurement")
    parser.add_argument("--idle-seconds", type=float, default=20, help="length of the idle measurement")
    parser.add_argument("--poll-interval", type=float, default=0.0, help="a reader's pause between requests (s)")
    parser.add_argument("--log-every", type=int, default=5, help="the run's log_every (a metric event per N steps)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--threads", type=int, default=0, help="the run's num_threads (0: torch's default)")
    parser.add_argument("--web-arg", action="append", default=[], help="an extra uvicorn argument (repeatable)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary STORAGE_ROOT (logs, database)")
    args = parser.parse_args()

    storage = Path(tempfile.mkdtemp(prefix="lmw-latency-"))
    stack = Stack(storage, os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"), os.environ.get("DATABASE_URL"),
                  args.web_arg)
    print(f"==> stack in {storage} (database: {os.environ.get('DATABASE_URL') or 'SQLite'})", flush=True)
    stack.start()
    run_id = None
    token = ""
    try:
        token = make_user(stack)
        run_id = launch(stack, token, args)
        print(f"==> run {run_id} training; idle measurement ({args.idle_seconds:.0f} s: 1 viewer, 1 reader)", flush=True)
        idle = asyncio.run(measure(stack, token, run_id, 1, 1, args.idle_seconds, args.poll_interval))
        print(f"==> loaded measurement ({args.seconds:.0f} s: {args.viewers} viewers, {args.readers} readers)",
              flush=True)
        loaded = asyncio.run(measure(stack, token, run_id, args.viewers, args.readers, args.seconds,
                                     args.poll_interval))
        print()
        show("idle", idle)
        show("loaded", loaded)
        ratio_api = loaded["api"]["p95"] / idle["api"]["p95"]
        ratio_ev = loaded["events"]["p95"] / idle["events"]["p95"]
        print(f"\nloaded/idle p95: API {ratio_api:.1f}x, event delay {ratio_ev:.1f}x")
        print(f"goals (loaded p95): API <= 200 ms: {'met' if loaded['api']['p95'] <= 0.2 else 'NOT met'}; "
              f"event delay <= 250 ms: {'met' if loaded['events']['p95'] <= 0.25 else 'NOT met'}")
        print(json.dumps({"idle": idle, "loaded": loaded}))
    finally:
        if run_id:
            cancel(stack, token, run_id)
        stack.stop()
        if args.keep:
            print(f"kept {storage}")
        else:
            shutil.rmtree(storage, ignore_errors=True)


if __name__ == "__main__":
    main()
