"""The model server: `python -m trainer serve PATH` answers OpenAI's API for one checkpoint.

    serve(PATH, host="127.0.0.1", port=8000, keys=[...], name="", ready_file=None)

PATH is a checkpoint folder, a run's folder (its latest checkpoint) or a Hugging Face folder
(imported first). The process loads the model, then uvicorn serves trainer.serve.app on
host:port (port 0: any free port). Once it listens, `ready_file` (if given) receives
{"url", "host", "port", "pid", "model"}, written whole (a temporary file renamed), so a
supervisor (the web app's Serve action) knows the address. SIGINT or SIGTERM stops it.

Keys: --api-key (repeatable), --api-key-file (one per line) and LMWB_SERVE_API_KEYS (comma-
separated); with none the server answers anyone who can reach it, so it listens on 127.0.0.1
by default and says so.
"""
from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Sequence

from trainer.errors import ConfigError

KEYS_ENV = "LMWB_SERVE_API_KEYS"
DEFAULT_PORT = 8000


def read_keys(keys: Sequence[str] = (), key_file: str | Path | None = None) -> list[str]:
    """Every key from the flags, the file and the environment, once each."""
    found = [k.strip() for k in keys if k and k.strip()]
    if key_file is not None:
        try:
            text = Path(key_file).read_text(encoding="utf-8")
        except OSError as e:
            raise ConfigError(f"The API key file {key_file} cannot be read: {e.strerror or e}.") from None
        found += [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    found += [k.strip() for k in os.environ.get(KEYS_ENV, "").split(",") if k.strip()]
    return list(dict.fromkeys(found))


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (ConfigError with a sentence when it cannot be had)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        what = "is in use" if e.errno == 98 else f"cannot be used ({e.strerror or e})"
        raise ConfigError(f"The address {host}:{port} {what}; choose another --port (0 picks a free one).") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def write_ready(path: Path, info: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(info) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def serve(path: str | Path, *, host: str = "127.0.0.1", port: int = DEFAULT_PORT, keys: Sequence[str] = (),
          name: str = "", ready_file: str | Path | None = None, pooling: str = "mean", max_batch: int = 16,
          max_waiting: int = 64, log_level: str = "warning") -> int:
    import uvicorn

    from trainer.serve.app import Server, build_app
    from trainer.serve.model import open_model

    served = open_model(path, name=name, pooling=pooling)
    try:
        sock = bind(host, port)
        actual = sock.getsockname()[1]
        server = Server(served, keys=keys, max_batch=max_batch, max_waiting=max_waiting)
        config = uvicorn.Config(build_app(server), log_level=log_level, lifespan="on", timeout_graceful_shutdown=5,
                                access_log=False)
        runner = uvicorn.Server(config)
        shown = f"[{host}]" if ":" in host else host
        url = f"http://{shown}:{actual}/v1"
        info = {"url": url, "host": host, "port": actual, "pid": os.getpid(), "model": served.name}

        def announce() -> None:
            while not runner.started and not runner.should_exit:
                time.sleep(0.05)
            if runner.started:
                if ready_file is not None:
                    write_ready(Path(ready_file), info)
                print(f"Serving {served.name} ({served.loaded.label}) at {url}: "
                      f"{', '.join(p for p in server.endpoints)}." +
                      ("" if keys else " No API key is set: anyone who can reach this address may use it."),
                      flush=True)

        threading.Thread(target=announce, daemon=True).start()
        runner.run(sockets=[sock])
    finally:
        served.close()
        if ready_file is not None:
            Path(ready_file).unlink(missing_ok=True)
    return 0

