"""What keeps the web server quick while a run trains and many people watch it (issue 11, point 8;
the timings themselves are bench/serve_latency.py's): a fixed number of queries per run API
read, requests run in one call on a few lasting threads with lasting database connections, events published over one lasting connection,
and workers that give the web server the CPU first."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest
from asgiref.sync import AsyncToSync, SyncToAsync, async_to_sync, iscoroutinefunction
from channels.testing import WebsocketCommunicator

from tests.webapp.runs_helpers import make_checkpoint, make_data, make_run
from webapp.runs import events
from webapp.runs.models import RunStatus

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.django_db
def test_run_detail_api_reads_in_three_queries(alice, alice_api, django_assert_max_num_queries):
    run = make_run(alice)
    for step in (10, 30, 20):
        make_checkpoint(run, step=step)
    with django_assert_max_num_queries(3):  # the token and its user, the run, its newest checkpoint
        body = alice_api.get(f"/api/runs/{run.id}/").json()
    assert body["last_checkpoint"]["step"] == 30


@pytest.mark.django_db
def test_run_list_api_does_not_query_once_per_run(alice, alice_api, django_assert_max_num_queries):
    corpus, tokenizer = make_data(alice)
    runs = [make_run(alice, corpus=corpus, tokenizer=tokenizer, name=f"run {i}") for i in range(6)]
    for i, run in enumerate(runs[:4]):
        for step in range(1, i + 2):
            make_checkpoint(run, step=step * 10)
    with django_assert_max_num_queries(3):  # the token, the runs, the newest checkpoint of each (one query)
        body = alice_api.get("/api/runs/").json()
    newest = {row["id"]: (row["last_checkpoint"] or {}).get("step") for row in body}
    assert newest == {str(run.id): (10 * (i + 1) if i < 4 else None) for i, run in enumerate(runs)}


def _asgi_get(app, path: str, headers: list[tuple[bytes, bytes]] = ()) -> tuple[int, bytes]:
    """One GET through an ASGI app, as uvicorn would send it: (status, body)."""
    messages = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        messages.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(b"host", b"localhost"), *headers], "client": ("127.0.0.1", 5000),
             "server": ("127.0.0.1", 8000)}
    async_to_sync(app)(scope, receive, send)
    start = next(m for m in messages if m["type"] == "http.response.start")
    return start["status"], b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")


def test_the_http_handler_runs_the_middleware_and_the_view_in_one_synchronous_call():
    """Django's ASGI handler hands each request between the event loop and the request's thread about
    four times; here no middleware of the chain is async, nor adapted to or from async."""
    from webapp.server.handler import PooledASGIHandler

    handler = PooledASGIHandler()
    try:
        node, names = handler._middleware_chain, []
        while node is not None:
            node = getattr(node, "__wrapped__", node)  # convert_exception_to_response's wrapper
            assert not isinstance(node, (SyncToAsync, AsyncToSync)) and not iscoroutinefunction(node), node
            names.append(type(node).__name__)
            node = getattr(node, "get_response", None)
        assert "SessionMiddleware" in names and "WhiteNoiseMiddleware" in names
    finally:
        handler.close()
    from webapp.asgi import django_http

    assert isinstance(django_http, PooledASGIHandler)


@pytest.mark.django_db(transaction=True)
def test_requests_reuse_their_threads_and_database_connections(alice, settings):
    """Each request of Django's handler had a new thread and connected to the database anew; here a few
    lasting threads keep theirs (CONN_MAX_AGE, checked before reuse)."""
    from django.core.signals import request_finished
    from django.db import connection
    from rest_framework.authtoken.models import Token

    from webapp.server.handler import PooledASGIHandler

    settings.WEB_REQUEST_THREADS = 1
    run = make_run(alice, status=RunStatus.RUNNING)
    token = Token.objects.create(user=alice).key
    seen = []

    def remember(**kwargs):  # connected before request_finished may close it
        seen.append((threading.get_ident(), connection.connection))

    connection.settings_dict["CONN_MAX_AGE"] = 60  # what webapp/asgi.py sets for the web process
    request_finished.connect(remember, weak=False)
    handler = PooledASGIHandler()
    try:
        answers = [_asgi_get(handler, f"/api/runs/{run.id}/", [(b"authorization", f"Token {token}".encode())])
                   for _ in range(4)]
    finally:
        request_finished.disconnect(remember)
        handler.close()
        connection.settings_dict["CONN_MAX_AGE"] = 0
    assert [status for status, _ in answers] == [200] * 4
    assert all(b'"id":"%s"' % str(run.id).encode() in body.replace(b" ", b"") for _, body in answers)
    assert len(seen) == 4 and seen[0][1] is not None
    assert len({ident for ident, _ in seen}) == 1 and threading.get_ident() not in {ident for ident, _ in seen}
    assert len({id(raw) for _, raw in seen}) == 1, "the thread connected again"


def test_at_most_the_setting_of_requests_run_at_once_and_the_rest_wait(settings):
    from django.http import HttpResponse

    from webapp.server.handler import PooledASGIHandler

    settings.WEB_REQUEST_THREADS = 2
    lock, running, most = threading.Lock(), [0], [0]

    def slow_view(request):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.2)
        with lock:
            running[0] -= 1
        return HttpResponse(request.path)

    handler = PooledASGIHandler()
    handler.get_response = slow_view
    try:
        async def six_at_once():
            import asyncio

            return await asyncio.gather(*(SyncToAsync(_asgi_get, thread_sensitive=False)(handler, f"/x{i}/")
                                          for i in range(6)))

        answers = async_to_sync(six_at_once)()
    finally:
        handler.close()
    assert sorted(answers) == [(200, f"/x{i}/".encode()) for i in range(6)]
    assert most[0] == 2 and running[0] == 0


def test_a_streamed_file_is_sent_whole_and_closed(tmp_path):
    from django.http import FileResponse

    from webapp.server.handler import PooledASGIHandler

    data = os.urandom(300_000)
    (tmp_path / "blob.bin").write_bytes(data)
    opened = []

    def download(request):
        opened.append(open(tmp_path / "blob.bin", "rb"))
        return FileResponse(opened[-1])

    handler = PooledASGIHandler()
    handler.get_response = download
    try:
        assert _asgi_get(handler, "/download/") == (200, data)
    finally:
        handler.close()
    assert opened[0].closed


@pytest.mark.django_db(transaction=True)
def test_events_from_a_thread_without_a_loop_share_one_lasting_publisher(alice, alice_api):
    """A Celery worker sends from threads with no event loop; each event used to make a new loop and
    a new Redis connection (and its delay included connecting)."""
    from rest_framework.authtoken.models import Token

    from webapp.asgi import application

    run = make_run(alice, status=RunStatus.RUNNING)
    headers = [(b"origin", b"http://localhost"),
               (b"authorization", f"Token {Token.objects.get(user=alice).key}".encode())]
    loops = []

    def worker_thread_sends(step: int) -> None:
        events.send_run_event(run.id, {"type": "run.heartbeat", "step": step, "tokens_seen": step * 10})
        loops.append(events._loop)

    async def go():
        comm = WebsocketCommunicator(application, f"/ws/runs/{run.id}/", headers=headers)
        assert (await comm.connect(timeout=5))[0]
        await comm.receive_json_from(timeout=5)  # hello
        for step in (1, 2, 3):
            thread = threading.Thread(target=worker_thread_sends, args=(step,))
            thread.start()
            thread.join()
        received = [await comm.receive_json_from(timeout=5) for _ in range(3)]
        await comm.disconnect()
        return received

    received = async_to_sync(go)()
    assert [(m["type"], m["step"]) for m in received] == [("heartbeat", 1), ("heartbeat", 2), ("heartbeat", 3)]
    assert loops[0] is loops[1] is loops[2] and loops[0].is_running()


def test_a_forked_child_publishes_on_a_loop_of_its_own():
    parent_loop = events._publisher_loop()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its loop is new and running (the parent's thread did not survive the fork)
        child_loop = events._publisher_loop()
        os.write(write, b"ok" if child_loop is not parent_loop and child_loop.is_running() else b"no")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 2) == b"ok"


@pytest.mark.parametrize("setting, expected", [("7", 7), ("0", 0)])
def test_a_worker_lowers_its_cpu_priority_when_it_starts(setting, expected):
    """The worker_init signal (what `celery worker` sends as it starts) sets the nice value to
    WORKER_NICENESS; the pool children it forks, and their torch threads, inherit it."""
    code = ("import os, django; django.setup(); from celery.signals import worker_init; import webapp.celery; "
            "worker_init.send(sender=None); print(os.getpriority(os.PRIO_PROCESS, 0))")
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="webapp.settings", WORKER_NICENESS=setting)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.split()[-1]) == max(expected, os.getpriority(os.PRIO_PROCESS, 0))


def test_the_asgi_application_loads_every_view_before_its_first_request():
    """Importing the views (and torch, through the launch registry) holds the GIL for seconds; on the
    first request it held up every websocket of the process."""
    code = "import sys, webapp.asgi; print('webapp.runs.api' in sys.modules, 'webapp.explorer.api' in sys.modules)"
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="webapp.settings")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True"]


@pytest.mark.django_db
def test_run_and_checkpoint_serializers_build_their_fields_once_and_say_the_same(alice, monkeypatch):
    """ModelSerializer rebuilt ~30 fields from the model's metadata for every run read (the largest
    cost of GET /api/runs/<id>/); the fields are now built once per class, with the same output."""
    from rest_framework import serializers

    from webapp.runs import selectors
    from webapp.runs.serializers import CheckpointSerializer, RunSerializer

    run = make_run(alice, status=RunStatus.RUNNING)
    make_checkpoint(run, step=20)
    run = selectors.run_get(alice, run.id)
    RunSerializer(run).data  # built here if no earlier test did
    built = []
    real = serializers.ModelSerializer.get_fields
    monkeypatch.setattr(serializers.ModelSerializer, "get_fields", lambda self: built.append(self) or real(self))
    fast = [RunSerializer(run).data for _ in range(5)]
    assert built == []
    generic = serializers.Serializer.to_representation(RunSerializer(), run)
    assert fast[0] == generic and fast[0]["last_checkpoint"]["step"] == 20
    checkpoint = run.latest_checkpoints[0]
    assert CheckpointSerializer(checkpoint).data == serializers.Serializer.to_representation(CheckpointSerializer(), checkpoint)


def test_the_web_process_parses_http_in_c_and_freezes_what_it_loaded_at_start():
    """uvicorn's "auto" picks httptools and uvloop when they are installed (a third less CPU per API
    request than h11 on asyncio); the modules, views and settings loaded at start are frozen out of
    the garbage collector's full collections."""
    code = ("import gc, importlib.util, webapp.asgi; from uvicorn.config import Config; "
            "c = Config('webapp.asgi:application'); c.load(); "
            "print(c.http_protocol_class.__module__, importlib.util.find_spec('uvloop') is not None, gc.get_freeze_count() > 10000)")
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="webapp.settings")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-3:] == ["uvicorn.protocols.http.httptools_impl", "True", "True"]
