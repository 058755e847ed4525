"""A stand-in for `python -m trainer serve` that keeps its command-line contract and loads no model,
for the supervisor's tests (tests/webapp/test_serving_supervisor.py; the e2e test runs the real
command). It reads the keys from --api-key-file, listens on --host/--port (0: any free port),
writes --ready-file atomically once it listens, answers GET /health without a key and
/v1/models and /v1/capabilities with one, and exits 0 on SIGTERM.

STUB_MODE: "ok" (the default); "refuse": one line on stderr, exit 2; "ignore-term": SIGTERM is
ignored (only SIGKILL ends it)."""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("path")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--api-key", action="append", default=[])
    parser.add_argument("--api-key-file")
    parser.add_argument("--name", default="stub")
    parser.add_argument("--ready-file")
    args = parser.parse_args()
    mode = os.environ.get("STUB_MODE", "ok")
    print(f"stub serving {args.path}", file=sys.stderr, flush=True)
    if mode == "refuse":
        print(f"{args.path} holds a model this server has nothing to answer with.", file=sys.stderr, flush=True)
        return 2
    keys = set(args.api_key) | {k for k in os.environ.get("LMWB_SERVE_API_KEYS", "").split(",") if k}
    if args.api_key_file:
        with open(args.api_key_file, encoding="utf-8") as f:
            keys = {line.strip() for line in f if line.strip()}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/health":
                return self.answer(200, {"status": "ok", "model": args.name})
            if keys and self.headers.get("Authorization", "") not in {f"Bearer {k}" for k in keys}:
                return self.answer(401, {"error": {"message": "A key is needed.", "type": "invalid_request_error"}})
            if self.path == "/v1/models":
                return self.answer(200, {"object": "list", "data": [{"id": args.name, "object": "model"}]})
            if self.path == "/v1/capabilities":
                return self.answer(200, {"model": args.name, "endpoints": ["/v1/models", "/v1/completions"]})
            return self.answer(404, {"error": {"message": "No such path."}})

        def answer(self, code: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *a) -> None:
            pass

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    host, port = server.server_address[:2]
    if mode == "ignore-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        def stop(signum, frame):
            raise SystemExit(0)
        signal.signal(signal.SIGTERM, stop)
    if args.ready_file:
        tmp = args.ready_file + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"url": f"http://{host}:{port}/v1", "host": host, "port": port, "pid": os.getpid(),
                       "model": args.name}, f)
        os.replace(tmp, args.ready_file)
    try:
        server.serve_forever(poll_interval=0.1)
    except SystemExit:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
