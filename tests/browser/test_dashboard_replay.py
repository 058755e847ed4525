"""The run page follows a run through dropped sockets with the socket's own replay (issue 29,
point 5): it reconnects with `?after=` the cursor of the newest point it read (issue 44, point 3;
it used to ask `?since=` the step before the last one it drew), and its chart then holds every
step exactly once, in order; also when a point was stored but not yet published as the socket
dropped (the moment between the worker's store and its publish), and when it dropped between a
step's training point and its validation point.

The live stack serves the page and the socket (uvicorn, Redis); this test plays the worker: each
point is stored and then published exactly as webapp.runs.sink.DjangoSink.metrics does, so it can
drop the page's socket (Playwright's route_web_socket, which otherwise passes every message
through to the server) at chosen moments between the two."""
from __future__ import annotations

import time
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from tests.webapp.runs_helpers import make_run
from webapp.runs.events import send_run_event
from webapp.runs.models import MetricPoint, RunStatus

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def loss(step: int) -> float:
    return round(10.0 - 0.05 * step, 4)


def test_the_dashboard_holds_every_step_once_and_in_order_across_dropped_sockets(page, sign_up):
    sign_up("dora")
    now = timezone.now()
    run = make_run(get_user_model().objects.get(username="dora"), status=RunStatus.RUNNING, max_steps=60,
                   started_at=now, heartbeat_at=now, current_step=0)
    sockets = []  # (the page's route, the address it asked for), oldest first

    def through(ws):
        ws.connect_to_server()  # no handlers: every message passes both ways
        sockets.append((ws, ws.url))

    page.route_web_socket("**/ws/runs/**", through)

    def store(step: int) -> list[dict]:
        points = [{"step": step, "split": "train", "values": {"loss": loss(step)}}]
        if step % 10 == 0:
            points.append({"step": step, "split": "valid", "values": {"loss": loss(step) + 0.5}})
        for p in points:
            p["cursor"] = MetricPoint.objects.create(run_id=run.id, **p).seq
        return points

    def publish(points: list[dict]) -> None:
        for p in points:
            send_run_event(run.id, {"type": "run.metrics", **p})

    def asked(n: int) -> dict:
        return parse_qs(urlsplit(sockets[n][1]).query)

    def live(n_sockets: int) -> None:
        page.wait_for_function("() => document.getElementById('ws-state').textContent === 'Live.'")
        deadline = time.monotonic() + 30
        while len(sockets) < n_sockets and time.monotonic() < deadline:
            page.wait_for_timeout(100)
        assert len(sockets) == n_sockets
        page.wait_for_function("() => document.getElementById('ws-state').textContent === 'Live.'")

    def drop() -> None:
        sockets[-1][0].close(code=4000, reason="dropped by the test")
        page.wait_for_function("() => document.getElementById('ws-state').textContent !== 'Live.'")

    def drawn(split: str) -> list[int]:
        return page.evaluate("""(split) => {
            const chart = document.getElementById('chart-loss');
            const trace = (chart.data || []).find((t) => t.name.toLowerCase().includes(split === 'train' ? 'train' : 'valid'));
            return trace ? Array.from(trace.x) : [];
        }""", split)

    def until_drawn(last: int) -> None:
        deadline = time.monotonic() + 30
        while drawn("train")[-1:] != [last] and time.monotonic() < deadline:
            page.wait_for_timeout(100)

    page.goto(f"/runs/{run.id}/")
    live(1)
    assert asked(0) == {"after": ["0"]}  # nothing read yet: from the start

    for step in range(1, 21):  # live, as a run logs
        publish(store(step))
    until_drawn(20)

    drop()  # 1. points stored and published while the page is away reach it through the replay
    for step in range(21, 31):
        publish(store(step))
    live(2)
    assert asked(1) == {"after": ["22"]}  # the newest cursor read: 20 training points and 2 validation ones
    until_drawn(30)

    held = store(31)  # 2. stored, not yet published, as the socket drops
    drop()
    live(3)
    publish(held)  # published once the page is back: replayed from the database and sent live, drawn once
    for step in range(32, 41):
        publish(store(step))
    until_drawn(40)

    for step in range(41, 50):
        publish(store(step))
    train, valid = store(50)  # 3. the page read a step's training point; the socket drops before its validation
    publish([train])
    until_drawn(50)
    drop()
    publish([valid])  # published while the page is away
    live(4)
    assert asked(3) == {"after": [str(train["cursor"])]}  # (since=50 would not have replayed it)
    publish(store(51))
    until_drawn(51)
    page.wait_for_timeout(1000)  # anything sent twice would have arrived by now

    assert drawn("train") == list(range(1, 52))
    assert drawn("valid") == [10, 20, 30, 40, 50]
    assert len(sockets) == 4
