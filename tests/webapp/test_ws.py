"""The run websocket (/ws/runs/<id>/) through the real ASGI application and the real Redis channel layer."""
from __future__ import annotations

import time
import uuid

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings

from tests.webapp.runs_helpers import make_run
from webapp.asgi import application
from webapp.runs.events import send_run_event
from webapp.runs.models import RunStatus

pytestmark = pytest.mark.django_db(transaction=True)

ORIGIN = (b"origin", b"http://localhost")


def session_headers(client) -> list[tuple[bytes, bytes]]:
    cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
    return [ORIGIN, (b"cookie", f"{settings.SESSION_COOKIE_NAME}={cookie}".encode())]


def token_headers(user) -> list[tuple[bytes, bytes]]:
    from rest_framework.authtoken.models import Token

    token, _ = Token.objects.get_or_create(user=user)
    return [ORIGIN, (b"authorization", f"Token {token.key}".encode())]


def connect(run_id, headers):
    """Open a socket, return (connected, close code or first message), and close it."""
    async def go():
        comm = WebsocketCommunicator(application, f"/ws/runs/{run_id}/", headers=headers)
        connected, code = await comm.connect(timeout=5)
        if not connected:
            return False, code
        hello = await comm.receive_json_from(timeout=5)
        await comm.disconnect()
        return True, hello
    return async_to_sync(go)()


def test_the_owner_connects_with_a_session_cookie_and_gets_a_hello(alice, alice_client):
    run = make_run(alice, status=RunStatus.RUNNING, current_step=7)
    connected, hello = connect(run.id, session_headers(alice_client))
    assert connected and abs(hello.pop("sent_at") - time.time()) < 60
    assert hello == {"type": "hello", "status": "running", "status_label": "Running", "step": 7, "max_steps": 20,
                     "error": "", "cancel_requested": False, "finished": False}


def test_the_owner_connects_with_an_api_token(alice):
    run = make_run(alice)
    connected, hello = connect(run.id, token_headers(alice))
    assert connected and hello["status"] == "queued"


def test_an_anonymous_visitor_is_closed_with_4403(alice):
    run = make_run(alice)
    assert connect(run.id, [ORIGIN]) == (False, 4403)
    assert connect(run.id, [ORIGIN, (b"authorization", b"Token not-a-token")]) == (False, 4403)


def test_another_user_is_closed_with_4403(alice, bob, bob_client):
    run = make_run(alice)
    assert connect(run.id, session_headers(bob_client)) == (False, 4403)
    assert connect(run.id, token_headers(bob)) == (False, 4403)


def test_a_missing_run_is_closed_with_4403(alice_client):
    assert connect(uuid.uuid4(), session_headers(alice_client)) == (False, 4403)


def test_a_foreign_origin_is_refused(alice, alice_client):
    run = make_run(alice)
    headers = [h for h in session_headers(alice_client) if h[0] != b"origin"]
    connected, _ = connect(run.id, [(b"origin", b"http://evil.example"), *headers])
    assert not connected
    connected, _ = connect(run.id, headers)  # no Origin header at all
    assert not connected


def test_group_events_are_forwarded_by_type(alice, alice_client):
    run = make_run(alice, status=RunStatus.RUNNING)
    other = make_run(alice, status=RunStatus.RUNNING)

    async def go():
        comm = WebsocketCommunicator(application, f"/ws/runs/{run.id}/", headers=session_headers(alice_client))
        assert (await comm.connect(timeout=5))[0]
        await comm.receive_json_from(timeout=5)  # hello
        send = sync_to_async(send_run_event)
        await send(other.id, {"type": "run.log", "id": 1, "text": "not for this socket", "time": None})
        await send(run.id, {"type": "run.metrics", "step": 5, "split": "train", "values": {"loss": 2.5}, "cursor": 3})
        await send(run.id, {"type": "run.log", "id": 9, "text": "Validation at step 5.", "time": "2025-01-01T00:00:00"})
        await send(run.id, {"type": "run.checkpoint", "id": "c1", "step": 5, "metrics": {}, "created_at": None,
                            "explore_url": "/explore/?checkpoint=c1"})
        await send(run.id, {"type": "run.heartbeat", "step": 6, "tokens_seen": 600})
        await send(run.id, {"type": "run.status", "status": "succeeded", "status_label": "Succeeded", "error": "",
                            "step": 6, "max_steps": 6, "cancel_requested": False, "finished": True})
        received = [await comm.receive_json_from(timeout=5) for _ in range(5)]
        assert await comm.receive_nothing(timeout=0.2)
        await comm.send_json_to({"type": "ping"})
        pong = await comm.receive_json_from(timeout=5)
        await comm.disconnect()
        return received, pong

    received, pong = async_to_sync(go)()
    stamps = [m.pop("sent_at") for m in received]  # every event says when the server emitted it
    assert all(abs(t - time.time()) < 60 for t in stamps) and stamps == sorted(stamps)
    assert received[0] == {"type": "metrics", "step": 5, "split": "train", "values": {"loss": 2.5}, "cursor": 3}
    assert received[1] == {"type": "log", "id": 9, "text": "Validation at step 5.", "time": "2025-01-01T00:00:00"}
    assert received[2]["type"] == "checkpoint" and received[2]["explore_url"] == "/explore/?checkpoint=c1"
    assert received[3] == {"type": "heartbeat", "step": 6, "tokens_seen": 600}
    assert received[4]["type"] == "status" and received[4]["status"] == "succeeded" and received[4]["finished"]
    assert pong == {"type": "pong"}


def test_cancelling_a_queued_run_publishes_its_new_status(alice, alice_client):
    from webapp.runs.services import run_cancel

    run = make_run(alice)

    async def go():
        comm = WebsocketCommunicator(application, f"/ws/runs/{run.id}/", headers=session_headers(alice_client))
        assert (await comm.connect(timeout=5))[0]
        await comm.receive_json_from(timeout=5)
        await sync_to_async(run_cancel)(run=run)
        message = await comm.receive_json_from(timeout=5)
        await comm.disconnect()
        return message

    message = async_to_sync(go)()
    assert message["type"] == "status" and message["status"] == "cancelled" and message["finished"]


def test_since_replays_the_missed_points_then_live_ones_without_duplicates(alice, alice_client):
    from webapp.runs.models import MetricPoint

    run = make_run(alice, status=RunStatus.RUNNING)
    for step in range(1, 6):
        MetricPoint.objects.create(run=run, step=step, split="train", values={"loss": 10.0 - step})
    MetricPoint.objects.create(run=run, step=4, split="valid", values={"loss": 7.5})

    async def go():
        comm = WebsocketCommunicator(application, f"/ws/runs/{run.id}/?since=2", headers=session_headers(alice_client))
        assert (await comm.connect(timeout=5))[0]
        hello = await comm.receive_json_from(timeout=5)
        replayed = [await comm.receive_json_from(timeout=5) for _ in range(4)]
        send = sync_to_async(send_run_event)
        # The worker publishes after writing its row: a point already replayed must not come twice.
        await send(run.id, {"type": "run.metrics", "step": 5, "split": "train", "values": {"loss": 5.0}})
        await send(run.id, {"type": "run.metrics", "step": 6, "split": "train", "values": {"loss": 4.0}})
        live = await comm.receive_json_from(timeout=5)
        assert await comm.receive_nothing(timeout=0.2)
        await comm.disconnect()
        return hello, replayed, live

    hello, replayed, live = async_to_sync(go)()
    assert hello["type"] == "hello"
    assert [(m["step"], m["split"], m["values"]["loss"]) for m in replayed] == [
        (3, "train", 7.0), (4, "train", 6.0), (4, "valid", 7.5), (5, "train", 5.0)]
    assert all(m["type"] == "metrics" and m["replayed"] and m["time"] <= m["sent_at"] for m in replayed)
    assert live["step"] == 6 and "replayed" not in live and "sent_at" in live


def test_after_replays_a_steps_validation_point_read_after_its_training_point(alice, alice_client):
    """Issue 44, point 3: a client reads the training point of step 300 live, loses its socket, and
    the sink stores and publishes step 300's validation point meanwhile. Reconnecting with
    ?after=<the cursor it read> replays that point, then the next ones arrive live, each once and
    with its cursor. (?since=300, as the README used to say, skips it: since keeps working so.)"""
    from webapp.runs import sink as sink_module

    run = make_run(alice, status=RunStatus.RUNNING, claimed_by="me:1", max_steps=400)
    sink = sink_module.DatabaseChannelsSink(run.id, claimed_by="me:1")
    for step in (100, 200):
        sink.metrics(step, "train", {"loss": 5.0})
        sink.metrics(step, "valid", {"loss": 5.5})

    async def receive_metrics(comm) -> dict:
        while (message := await comm.receive_json_from(timeout=5))["type"] != "metrics":
            pass
        return message

    async def go():
        metrics = sync_to_async(sink.metrics)
        comm = WebsocketCommunicator(application, f"/ws/runs/{run.id}/", headers=session_headers(alice_client))
        assert (await comm.connect(timeout=5))[0]
        assert (await comm.receive_json_from(timeout=5))["type"] == "hello"
        await metrics(300, "train", {"loss": 4.0})
        read = await receive_metrics(comm)  # the training point of step 300, live
        await comm.disconnect()
        await metrics(300, "valid", {"loss": 4.5})  # while the client is away
        replays = {}
        for query in (f"after={read['cursor']}", "since=300"):
            comm = WebsocketCommunicator(application, f"/ws/runs/{run.id}/?{query}",
                                         headers=session_headers(alice_client))
            assert (await comm.connect(timeout=5))[0]
            assert (await comm.receive_json_from(timeout=5))["type"] == "hello"
            if query.startswith("after"):
                replays[query] = [await receive_metrics(comm)]
                await metrics(301, "train", {"loss": 3.9})
                replays[query].append(await receive_metrics(comm))
            else:
                replays[query] = [await receive_metrics(comm)]  # nothing of step 300: step 301 first
            assert await comm.receive_nothing(timeout=0.3)
            await comm.disconnect()
        return read, replays

    read, replays = async_to_sync(go)()
    assert (read["step"], read["split"], read["cursor"]) == (300, "train", 5)
    replayed, live = replays[f"after={read['cursor']}"]
    assert (replayed["step"], replayed["split"], replayed["values"], replayed["cursor"], replayed["replayed"]) == (
        300, "valid", {"loss": 4.5}, 6, True)
    assert (live["step"], live["split"], live["cursor"]) == (301, "train", 7) and "replayed" not in live
    assert [(m["step"], m["split"]) for m in replays["since=300"]] == [(301, "train")]


def test_after_zero_replays_every_point_in_the_order_they_were_stored(alice, alice_client):
    from webapp.runs.models import MetricPoint

    run = make_run(alice, status=RunStatus.RUNNING)
    for step, split in ((1, "train"), (2, "train"), (2, "valid"), (3, "train")):
        MetricPoint.objects.create(run=run, step=step, split=split, values={"loss": 1.0})

    async def go():
        comm = WebsocketCommunicator(application, f"/ws/runs/{run.id}/?after=0", headers=session_headers(alice_client))
        assert (await comm.connect(timeout=5))[0]
        got = [await comm.receive_json_from(timeout=5) for _ in range(5)]
        assert await comm.receive_nothing(timeout=0.2)
        await comm.disconnect()
        return got

    got = async_to_sync(go)()
    assert got[0]["type"] == "hello"
    assert [(m["step"], m["split"], m["cursor"]) for m in got[1:]] == [
        (1, "train", 1), (2, "train", 2), (2, "valid", 3), (3, "train", 4)]


@pytest.mark.parametrize("after", ["soon", "-1", "1.5", "", "1" * 19])
def test_a_bad_after_closes_with_4400(alice, alice_client, after):
    run = make_run(alice)

    async def go():
        comm = WebsocketCommunicator(application, f"/ws/runs/{run.id}/?after={after}&since=1",
                                     headers=session_headers(alice_client))
        connected, code = await comm.connect(timeout=5)
        return connected, code

    assert async_to_sync(go)() == (False, 4400)


@pytest.mark.parametrize("since", ["soon", "-1", "1.5", ""])
def test_a_bad_since_closes_with_4400(alice, alice_client, since):
    run = make_run(alice)

    async def go():
        comm = WebsocketCommunicator(application, f"/ws/runs/{run.id}/?since={since}",
                                     headers=session_headers(alice_client))
        connected, code = await comm.connect(timeout=5)
        if connected:
            hello = await comm.receive_json_from(timeout=5)
            await comm.disconnect()
            return hello["type"]
        return code

    assert async_to_sync(go)() == ("hello" if since == "" else 4400)


@pytest.mark.parametrize("query", ["since=3", "after=3"])
@pytest.mark.parametrize("held", ["before publishing", "after publishing"])
def test_a_reconnect_gets_every_point_once_in_order_while_the_sink_is_held(alice, alice_client, monkeypatch, held,
                                                                          query):
    """Issue 22, point 1: the worker's sink emits steps 1..12; at step 7 it is held (just before it
    publishes the point, or just after), and a dashboard that had steps up to 3 reconnects with
    ?since=3 (or ?after=3, the cursor of step 3 here) meanwhile. Released, the sink goes on to 12.
    The socket must deliver 4..12, each once, in order: points published before it joined are
    replayed from the database, later ones are live."""
    import threading

    from django.db import connections

    from webapp.runs import sink as sink_module

    run = make_run(alice, status=RunStatus.RUNNING, claimed_by="me:1")
    stopped_at, go_on = threading.Event(), threading.Event()
    publish = sink_module.send_run_event

    def holding_publish(run_id, payload):
        hold = payload.get("type") == "run.metrics" and payload["step"] == 7
        if hold and held == "before publishing":
            stopped_at.set()
            go_on.wait(10)
        publish(run_id, payload)
        if hold and held == "after publishing":
            stopped_at.set()
            go_on.wait(10)

    monkeypatch.setattr(sink_module, "send_run_event", holding_publish)

    def train():
        try:
            sink = sink_module.DatabaseChannelsSink(run.id, claimed_by="me:1")
            for step in range(1, 13):
                sink.metrics(step, "train", {"loss": 20.0 - step})
            sink.close()
        finally:
            connections.close_all()

    worker = threading.Thread(target=train)

    async def messages_until_quiet(comm, quiet_s: float) -> list[dict]:
        out = []
        while not await comm.receive_nothing(timeout=quiet_s):  # (a receive that times out ends the app)
            out.append(await comm.receive_json_from(timeout=5))
        return out

    async def go():
        worker.start()
        assert await sync_to_async(stopped_at.wait)(10), "the sink never reached step 7"
        comm = WebsocketCommunicator(application, f"/ws/runs/{run.id}/?{query}", headers=session_headers(alice_client))
        assert (await comm.connect(timeout=5))[0]
        got = await messages_until_quiet(comm, 1.0)  # the hello, and the replay while the sink is held
        go_on.set()
        await sync_to_async(worker.join)(10)
        got += await messages_until_quiet(comm, 1.0)
        await comm.disconnect()
        return got

    try:
        got = async_to_sync(go)()
    finally:
        go_on.set()
        worker.join(10)
    assert got[0]["type"] == "hello"
    steps = [m["step"] for m in got if m["type"] == "metrics"]
    assert steps == list(range(4, 13))
    assert [m["values"]["loss"] for m in got if m["type"] == "metrics"] == [20.0 - s for s in range(4, 13)]
    assert [m["cursor"] for m in got if m["type"] == "metrics"] == list(range(4, 13))  # replayed and live alike


def test_the_replay_waits_until_the_group_is_known_to_reach_the_socket(alice, alice_client, monkeypatch):
    """The read must come after Redis took the subscription (a point written just after the read
    is then sure to arrive live). The socket's own "run.replay" message proves it; with that message
    lost, the first live point does: the replay then comes before it, and includes it once."""
    from channels.layers import get_channel_layer

    from webapp.runs.models import MetricPoint

    run = make_run(alice, status=RunStatus.RUNNING)
    for step in range(1, 6):
        MetricPoint.objects.create(run=run, step=step, split="train", values={"loss": 10.0 - step})
    layer = get_channel_layer()
    group_send = layer.group_send

    async def losing_the_marker(group, message):
        if message.get("type") != "run.replay":
            await group_send(group, message)

    monkeypatch.setattr(layer, "group_send", losing_the_marker)

    async def go():
        comm = WebsocketCommunicator(application, f"/ws/runs/{run.id}/?since=2", headers=session_headers(alice_client))
        assert (await comm.connect(timeout=5))[0]
        assert (await comm.receive_json_from(timeout=5))["type"] == "hello"
        assert await comm.receive_nothing(timeout=0.5)  # not read yet: nothing shows the group reaches us
        await sync_to_async(MetricPoint.objects.create)(run=run, step=6, split="train", values={"loss": 4.0})
        await sync_to_async(send_run_event)(run.id, {"type": "run.metrics", "step": 6, "split": "train",
                                                     "values": {"loss": 4.0}})
        got = [await comm.receive_json_from(timeout=5) for _ in range(4)]
        assert await comm.receive_nothing(timeout=0.3)
        await comm.disconnect()
        return got

    got = async_to_sync(go)()
    assert [(m["step"], m.get("replayed")) for m in got] == [(3, True), (4, True), (5, True), (6, True)]
