"""The serve worker's side of a model server: the body of webapp.serving.tasks.serve_model.

supervise(served_id) claims the row (starting, not yet taken), then
1. writes the owner's API token to a key file in a folder of its own (mode 0700, the file 0600:
   readable by this process's user only; never on the command line, which `ps` shows, nor in the
   server's environment),
2. spawns settings.SERVE_COMMAND (`python -m trainer serve CHECKPOINT --host ... --port ...
   --api-key-file ... --name ... --ready-file ...`) in a session of its own, set to receive
   SIGTERM when this process dies (Linux: prctl PR_SET_PDEATHSIG), so that a killed worker's
   servers go with it,
3. waits for the ready file (the server writes it once it listens), reads the server's
   GET /v1/capabilities, and records the address, the pid and the endpoints on the row (serving),
4. supervises it, writing a heartbeat (seen_at) every SERVE_HEARTBEAT_S, until the row is asked
   to stop (stopping, or deleted with its checkpoint), this worker shuts down (Celery's warm
   shutdown: webapp.runs.shutdown) or its main process dies, or the server exits by itself;
5. stops it: SIGTERM to its process group, SIGKILL after SERVE_STOP_GRACE_S; the row ends stopped
   (with the reason), or failed with a sentence and the last lines the server wrote.
Every write is conditional on the row still being live, so a row the reaper or the user already
ended is never revived.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from trainer.errors import UserError
from webapp.serving.models import LIVE, ServedModel, ServeStatus

log = logging.getLogger(__name__)

TICK_S = 0.5  # how often the row, the process and the shutdown flag are looked at
TAIL_LINES = 20
TAIL_CHARS = 4000
WORKER_SHUTDOWN = "Stopped because its serve worker was shut down. Start it again once the worker is back."
WORKER_GONE = "Stopped because its serve worker's main process died. Start it again."
INTERNAL_ERROR = ("The model server could not be started because of an internal error. The details have been logged; "
                  "try again, and report it if it happens again.")
# Never handed to the server: the key travels in its key file only, and it needs no secrets of the app.
WITHHELD_ENV = ("LMWB_SERVE_API_KEYS", "SECRET_KEY", "DATABASE_URL")


class Ended(Exception):
    """The supervision is over: `status` and the row's fields to write (a reason or an error)."""

    def __init__(self, status: str, **fields):
        super().__init__(status)
        self.status, self.fields = status, fields


# ---------------------------------------------------------------------------- the task's body
def supervise(served_id, *, node: str = "") -> None:
    served = claim(served_id, node=node)
    if served is None:
        return  # stopped before a worker took it, or a message delivered twice
    folder = Path(tempfile.mkdtemp(prefix="lmwb-serve-"))  # mode 0700
    proc = None
    try:
        key = _key(served)
        proc = spawn(served, folder, key)
        ready = wait_until_ready(served, proc, folder)
        serving(served, proc, ready, key)
        watch(served, proc, folder)
    except Ended as end:
        finish(served, proc, folder, end)
    except Exception as e:  # noqa: BLE001 - every failure becomes the row's sentence, the details logged
        if isinstance(e, UserError):
            message = str(e)
        else:
            log.exception("Model server %s could not be supervised", served.pk)
            message = INTERNAL_ERROR
        finish(served, proc, folder, Ended(ServeStatus.FAILED, error=message))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def claim(served_id, *, node: str = "") -> ServedModel | None:
    """Take a starting row no worker has taken; None when it is not there to take."""
    now = timezone.now()
    taken = ServedModel.objects.filter(pk=served_id, status=ServeStatus.STARTING, node="").update(
        node=(node or f"pid {os.getpid()}@{socket.gethostname()}")[:255], machine=socket.gethostname()[:255],
        worker_pid=os.getpid(), seen_at=now)
    if not taken:
        return None
    return ServedModel.objects.select_related("checkpoint", "checkpoint__run", "owner").get(pk=served_id)


def _key(served: ServedModel) -> str:
    from webapp.accounts.services import api_token_ensure

    return api_token_ensure(user=served.owner).key


def fingerprint(key: str) -> str:
    """What the row keeps of the key it was started with: enough to tell that the token changed since."""
    return hashlib.sha256(key.encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------- starting it
def command(served: ServedModel, folder: Path) -> list[str]:
    """The server's command line: no key on it (the key file's path only)."""
    return [*settings.SERVE_COMMAND, str(served.checkpoint.folder), "--host", settings.SERVE_HOST,
            "--port", str(pick_port(served)), "--api-key-file", str(folder / "keys"),
            "--name", served.model_name, "--ready-file", str(folder / "ready.json")]


def ports(spec: str) -> list[int]:
    """SERVE_PORTS ("8100-8109", "8100,8102", "") as a list of ports; [] = any free port."""
    out: list[int] = []
    for part in (spec or "").replace(" ", "").split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        out.extend(range(int(low), int(high or low) + 1))
    return out


def pick_port(served: ServedModel) -> int:
    """0 (the server takes any free port) unless SERVE_PORTS names some: then the first of them no
    live server of this machine holds and that is free now."""
    allowed = ports(settings.SERVE_PORTS)
    if not allowed:
        return 0
    held = set(ServedModel.objects.filter(status__in=LIVE, machine=served.machine).exclude(pk=served.pk)
               .values_list("port", flat=True))
    for port in allowed:
        if port in held:
            continue
        with socket.socket() as s:
            try:
                s.bind((settings.SERVE_HOST, port))
            except OSError:
                continue
        return port
    raise UserError(f"Every port model servers may use here (SERVE_PORTS={settings.SERVE_PORTS}) is taken: stop a "
                    f"server, or give the serve worker more ports.")


def write_key_file(path: Path, key: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(key + "\n")


def _die_with_parent(parent: int):
    """preexec_fn: the child gets SIGTERM when the process that started it dies (Linux), and
    gives up at once if that already happened."""
    def set_it() -> None:
        if sys.platform.startswith("linux"):
            try:
                ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
            except (OSError, AttributeError):
                pass
        if os.getppid() != parent:
            os._exit(1)
    return set_it


def spawn(served: ServedModel, folder: Path, key: str) -> subprocess.Popen:
    if not (served.checkpoint.folder / "model_config.json").is_file():
        from webapp.serving.services import FILES_GONE

        raise UserError(FILES_GONE)
    write_key_file(folder / "keys", key)
    env = {name: value for name, value in os.environ.items() if name not in WITHHELD_ENV}
    env["PYTHONUNBUFFERED"] = "1"
    log_file = open(folder / "server.log", "wb")
    try:
        proc = subprocess.Popen(command(served, folder), cwd=settings.BASE_DIR, env=env, stdin=subprocess.DEVNULL,
                                stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=_die_with_parent(os.getpid()))
    finally:
        log_file.close()
    ServedModel.objects.filter(pk=served.pk, status__in=LIVE).update(pid=proc.pid, key_fingerprint=fingerprint(key))
    log.info("Model server %s: started pid %s for %s", served.pk, proc.pid, served.checkpoint.folder)
    return proc


class Watch:
    """What ends a supervision besides the server itself, looked at every tick: the row (stopping
    or gone), the worker's shutdown, its main process's death; and the heartbeat it writes."""

    def __init__(self, served: ServedModel, expected: str):
        self.served, self.expected = served, expected
        self.parent = os.getppid()
        self.beat_at = 0.0

    def check(self) -> None:
        from webapp.runs import shutdown

        now = time.monotonic()
        if now - self.beat_at >= settings.SERVE_HEARTBEAT_S:
            ServedModel.objects.filter(pk=self.served.pk, status__in=LIVE).update(seen_at=timezone.now())
            self.beat_at = now
        status = ServedModel.objects.filter(pk=self.served.pk).values_list("status", flat=True).first()
        if status != self.expected:
            raise Ended(ServeStatus.STOPPED)  # asked to stop (or ended, or deleted): the reason is on the row
        if shutdown.requested():
            raise Ended(ServeStatus.STOPPED, stop_reason=WORKER_SHUTDOWN)
        if os.getppid() != self.parent:
            raise Ended(ServeStatus.STOPPED, stop_reason=WORKER_GONE)


def wait_until_ready(served: ServedModel, proc: subprocess.Popen, folder: Path) -> dict:
    """The ready file's JSON once the server listens; Ended when something comes first."""
    watch = Watch(served, ServeStatus.STARTING)
    deadline = time.monotonic() + float(settings.SERVE_START_TIMEOUT_S)
    ready_file = folder / "ready.json"
    while True:
        if proc.poll() is not None:
            raise Ended(ServeStatus.FAILED, **exit_report(proc.returncode, folder, starting=True))
        if ready_file.is_file():
            try:
                info = json.loads(ready_file.read_text(encoding="utf-8"))
                if isinstance(info, dict) and int(info.get("port") or 0) > 0:
                    return info
            except (ValueError, OSError):
                pass  # written atomically, so only a broken server writes a bad one: wait for the deadline
        watch.check()
        if time.monotonic() > deadline:
            raise Ended(ServeStatus.FAILED, error=(
                f"The model server did not start listening within {settings.SERVE_START_TIMEOUT_S} s "
                "(SERVE_START_TIMEOUT_S), so it was stopped."), stderr_tail=tail(folder))
        time.sleep(TICK_S / 2)


def public_host(listen_host: str) -> str:
    if settings.SERVE_PUBLIC_HOST:
        return settings.SERVE_PUBLIC_HOST
    if listen_host in ("", "0.0.0.0", "::"):
        return socket.getfqdn()
    return listen_host


def capabilities(host: str, port: int, key: str) -> list[str]:
    """The server's GET /v1/capabilities endpoints; [] when it does not answer them."""
    host = f"[{host}]" if ":" in host else host
    if host in ("0.0.0.0", "[::]"):
        host = "127.0.0.1"
    request = urllib.request.Request(f"http://{host}:{port}/v1/capabilities",
                                     headers={"Authorization": f"Bearer {key}", "Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            body = json.loads(response.read(1_000_000))
    except (OSError, ValueError) as e:
        log.warning("The model server on port %s did not list its capabilities: %s", port, e)
        return []
    found = body.get("endpoints") if isinstance(body, dict) else None
    return [e for e in found if isinstance(e, str)][:50] if isinstance(found, list) else []


def serving(served: ServedModel, proc: subprocess.Popen, ready: dict, key: str) -> None:
    from webapp.serving.endpoints import expected_endpoints

    port = int(ready["port"])
    listen = str(ready.get("host") or settings.SERVE_HOST)
    endpoints = capabilities(listen, port, key) or ["/v1/models", *expected_endpoints(served.checkpoint)]
    now = timezone.now()
    if not ServedModel.objects.filter(pk=served.pk, status=ServeStatus.STARTING).update(
            status=ServeStatus.SERVING, host=public_host(listen)[:255], port=port, pid=proc.pid,
            endpoints=endpoints, model_name=str(ready.get("model") or served.model_name)[:200],
            started_at=now, seen_at=now):
        raise Ended(ServeStatus.STOPPED)  # asked to stop while it started
    log.info("Model server %s: serving on %s:%s", served.pk, listen, port)


def watch(served: ServedModel, proc: subprocess.Popen, folder: Path) -> None:
    checks = Watch(served, ServeStatus.SERVING)
    while True:
        if proc.poll() is not None:
            raise Ended(ServeStatus.FAILED, **exit_report(proc.returncode, folder, starting=False))
        checks.check()
        time.sleep(TICK_S)


# ---------------------------------------------------------------------------- ending it
def stop_process(proc: subprocess.Popen, grace: float) -> None:
    """SIGTERM to the server's process group, SIGKILL after `grace` seconds; waits for it."""
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 30.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def tail(folder: Path) -> str:
    """The last lines the server wrote (its stderr and stdout, in one file)."""
    try:
        data = (folder / "server.log").read_bytes()[-64_000:]
    except OSError:
        return ""
    lines = [line for line in data.decode("utf-8", errors="replace").splitlines() if line.strip()]
    return "\n".join(lines[-TAIL_LINES:])[-TAIL_CHARS:]


def exit_report(code: int, folder: Path, *, starting: bool) -> dict:
    """The row's error (a sentence with the server's last line) for a server that exited by itself;
    a user-fixable problem (exit status 2) is the server's own line."""
    lines = tail(folder).splitlines()
    last = lines[-1].strip() if lines else ""
    if code == 2:
        error = f"The model server refused to start: {last}" if last else "The model server refused to start."
    else:
        if code < 0:
            try:
                how = f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"was killed by signal {-code}"
        else:
            how = f"exited with status {code}"
        when = "before it was ready" if starting else "while serving"
        error = f"The model server {how} {when}." + (f" Its last line: {last}" if last else "")
    return {"error": error[:1000]}


def finish(served: ServedModel, proc: subprocess.Popen | None, folder: Path, end: Ended) -> None:
    if proc is not None:
        stop_process(proc, float(settings.SERVE_STOP_GRACE_S))
    fields = dict(end.fields)
    if end.status == ServeStatus.FAILED:
        fields.setdefault("stderr_tail", tail(folder))
    ServedModel.objects.filter(pk=served.pk, status__in=LIVE).update(status=end.status, stopped_at=timezone.now(),
                                                                      **fields)
    log.info("Model server %s: %s %s", served.pk, end.status, fields.get("error") or fields.get("stop_reason") or "")
