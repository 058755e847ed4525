"""The dashboard's websocket: /ws/runs/<run_id>/ streams one run's events to its owner.

Only the owner may listen: anonymous visitors, other users and unknown runs are closed
with code 4403 before the handshake completes. The group name comes from the run's id
as loaded from the database, never from anything the client sends. A socket opened while
Redis is down is closed with 1013, try again later (webapp.server.ws_outage).

Every metrics message carries "cursor", the point's place in the order the run's points were
stored (MetricPoint.seq: 1, 2, ...). A client that reconnects says `?after=<the last cursor it
read>`: after the hello it gets every point stored after that one from the database
("replayed": true, in cursor order), then the live events, with none of the replayed points
again: exactly what it has not seen, whatever the splits (the validation point of a step comes
after its training point). `?after=0` replays them all. `?since=<step>` still works as before: the
points with a step after it, in step order; a client that read a step's training point but not
its validation point misses that one with since=<that step>, not with after. With both, `after`
is used. Every message carries "sent_at", the server's time (seconds since the epoch) when it
was emitted, so a client can measure its delay. An `after` or a `since` that is not a whole
number >= 0 closes the socket with 4400.

Why no point is lost or sent twice, whatever the timing:
1. The sink (webapp.runs.sink) writes each point to the database before it publishes it.
2. The socket joins the run's group, and reads the database only once the group is known to
   deliver to it: after the first message of that group reaches it. It publishes one itself
   ("run.replay", naming its own channel) right after joining; a live point arriving first does
   as well. Redis had then taken the subscription before it handled that message, so a point
   published after the read (hence written after it, by 1.) reaches the socket live. Without
   this wait, a point written just after the read could be published before Redis had taken
   the subscription (the channel layer sends SUBSCRIBE without waiting for its answer).
3. So every point is in the read or arrives live, or both; one that was read is dropped when it
   also arrives live, so each is sent once. A live point that arrives first is in the read (it
   was stored before it was published) and dropped too. The replay is in cursor (or step) order,
   and a live point not in it was written after the read, so after every replayed point: the
   order holds. (A point's cursor is given under a lock on the run's counter and committed with
   it, so the points a read sees are those up to some cursor, and a later one has a greater one.)
"""
from __future__ import annotations

import time
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from webapp.server.ws_outage import LAYER_DOWN, TRY_AGAIN
from webapp.runs.events import run_group
from webapp.runs.models import MetricPoint, Run

FORBIDDEN = 4403
BAD_REQUEST = 4400


class RunConsumer(AsyncJsonWebsocketConsumer):
    group_name: str | None = None

    async def connect(self) -> None:
        self.replayed: set = set()  # the points read from the database, not yet seen live: cursor, (split, step)
        self.start: tuple[str, int] | None = None  # ("after", cursor) or ("since", step), until the replay is done
        run = await self._owned_run()
        if run is None:
            await self.close(code=FORBIDDEN)
            return
        start = self._start()
        if start is False:
            await self.close(code=BAD_REQUEST)
            return
        self.group_name = run_group(run.id)
        # Join first: a point published from here on arrives as a group message, and one already
        # in the database is replayed once the group is known to reach us (see the docstring).
        await self.channel_layer.group_add(self.group_name, self.channel_name)
        await self.accept()
        await self.send_json({
            "type": "hello", "status": run.status, "status_label": run.get_status_display(),
            "step": run.current_step, "max_steps": run.max_steps, "error": run.error,
            "cancel_requested": run.cancel_requested, "finished": run.is_finished, "sent_at": time.time(),
        })
        if start is not None:
            self.run_id, self.start = run.id, start
            try:
                await self.channel_layer.group_send(self.group_name,
                                                    {"type": "run.replay", "channel": self.channel_name})
            except LAYER_DOWN:
                await self.close(code=TRY_AGAIN)  # Redis went away since the join: the client comes back

    async def _replay(self) -> None:
        """Send the stored points after the cursor or the step asked for (once; nothing without)."""
        if self.start is None:
            return
        start, self.start = self.start, None
        for step, split, values, cursor, created in await self._points_after(self.run_id, *start):
            self.replayed.update((cursor, (split, step)))
            await self.send_json({"type": "metrics", "step": step, "split": split, "values": values,
                                  "cursor": cursor, "replayed": True, "time": created.timestamp(),
                                  "sent_at": time.time()})

    def _start(self) -> tuple[str, int] | None | bool:
        """Where the replay starts: ("after", cursor) or ("since", step) from the query string
        (`after` when both are given); None without either, False for a bad one."""
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        for name in ("after", "since"):
            values = query.get(name)
            if not values:
                continue
            text = values[-1].strip()
            if name == "since" and not text:
                return None  # `?since=` was taken as no since, as it always was
            digits = 18 if name == "after" else 12
            return (name, int(text)) if text.isdigit() and len(text) <= digits else False
        return None

    @database_sync_to_async
    def _points_after(self, run_id, kind: str, start: int) -> list[tuple[int, str, dict, int, object]]:
        if kind == "after":
            rows = MetricPoint.objects.filter(run_id=run_id, seq__gt=start).order_by("seq")
        else:
            rows = MetricPoint.objects.filter(run_id=run_id, step__gt=start).order_by("step", "split")
        return [(p.step, p.split, p.values, p.seq, p.created_at) for p in rows]

    async def disconnect(self, code) -> None:
        if self.group_name:
            try:
                await self.channel_layer.group_discard(self.group_name, self.channel_name)
            except LAYER_DOWN:
                pass  # Redis went away: the subscription went with it

    async def receive_json(self, content, **kwargs) -> None:
        if isinstance(content, dict) and content.get("type") == "ping":
            await self.send_json({"type": "pong"})

    @database_sync_to_async
    def _owned_run(self) -> Run | None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            return None
        run_id = self.scope["url_route"]["kwargs"]["run_id"]
        return Run.objects.filter(pk=run_id, owner_id=user.pk).first()

    # -- group messages (sent by webapp.runs.events.send_run_event), one handler per type
    async def run_replay(self, event) -> None:
        """A socket of this run joined with `after` or `since` (see the docstring); ours, or another's."""
        if event.get("channel") == self.channel_name:
            await self._replay()

    async def run_metrics(self, event) -> None:
        await self._replay()  # the group reaches us: replay first (this point is stored, so it is replayed)
        cursor = event.get("cursor")
        key = cursor if cursor is not None else (event["split"], event["step"])
        if key in self.replayed:
            self.replayed.discard(key)  # sent from the database already
            return
        message = {"type": "metrics", "step": event["step"], "split": event["split"], "values": event["values"]}
        if cursor is not None:  # (the sink's points always have one)
            message["cursor"] = cursor
        await self.send_json({**message, "sent_at": event.get("sent_at")})

    async def run_log(self, event) -> None:
        await self.send_json({"type": "log", "id": event.get("id"), "text": event["text"], "time": event.get("time"),
                              "sent_at": event.get("sent_at")})

    async def run_status(self, event) -> None:
        await self.send_json({**_without_type(event), "type": "status"})

    async def run_checkpoint(self, event) -> None:
        await self.send_json({**_without_type(event), "type": "checkpoint"})

    async def run_checkpoints_removed(self, event) -> None:
        await self.send_json({"type": "checkpoints_removed", "steps": event["steps"]})

    async def run_samples(self, event) -> None:
        await self.send_json({"type": "samples", "step": event["step"], "samples": event["samples"],
                              "sent_at": event.get("sent_at")})

    async def run_length(self, event) -> None:
        """A run given in epochs: its steps, once the worker has counted them."""
        await self.send_json({**_without_type(event), "type": "length"})

    async def run_heartbeat(self, event) -> None:
        await self.send_json({"type": "heartbeat", "step": event["step"], "tokens_seen": event["tokens_seen"],
                              "sent_at": event.get("sent_at")})


def _without_type(event: dict) -> dict:
    return {k: v for k, v in event.items() if k != "type"}
