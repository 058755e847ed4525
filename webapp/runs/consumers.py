"""The dashboard's websocket: /ws/runs/<run_id>/ streams one run's events to its owner.

Only the owner may listen: anonymous visitors, other users and unknown runs are closed
with code 4403 before the handshake completes. The group name comes from the run's id
as loaded from the database, never from anything the client sends. A socket opened while
Redis is down is closed with 1013, try again later (webapp.server.ws_outage).

A client that reconnects says `?since=<step>`: after the hello it gets every metric point
after that step from the database ("replayed": true, oldest first), then the live events,
with none of the replayed points again. Every message carries "sent_at", the server's time
(seconds since the epoch) when it was emitted, so a client can measure its delay. A `since`
that is not a whole number >= 0 closes the socket with 4400.

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
   was stored before it was published) and dropped too. The replay is in step order, and a live
   point not in it was written after the read, so after every replayed point: the order holds.
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
        self.replayed: set[tuple[str, int]] = set()  # (split, step) read from the database, not yet seen live
        self.since: int | None = None  # the step to replay after, until the replay is done
        run = await self._owned_run()
        if run is None:
            await self.close(code=FORBIDDEN)
            return
        since = self._since()
        if since is False:
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
        if since is not None:
            self.run_id, self.since = run.id, since
            try:
                await self.channel_layer.group_send(self.group_name,
                                                    {"type": "run.replay", "channel": self.channel_name})
            except LAYER_DOWN:
                await self.close(code=TRY_AGAIN)  # Redis went away since the join: the client comes back

    async def _replay(self) -> None:
        """Send the stored points after `since` (once; nothing without a `since`)."""
        if self.since is None:
            return
        since, self.since = self.since, None
        for step, split, values, created in await self._points_after(self.run_id, since):
            self.replayed.add((split, step))
            await self.send_json({"type": "metrics", "step": step, "split": split, "values": values,
                                  "replayed": True, "time": created.timestamp(), "sent_at": time.time()})

    def _since(self) -> int | None | bool:
        """The `since` step of the query string; None without one, False for a bad one."""
        values = parse_qs(self.scope.get("query_string", b"").decode("latin-1")).get("since")
        if not values:
            return None
        text = values[-1].strip()
        return int(text) if text.isdigit() and len(text) <= 12 else False

    @database_sync_to_async
    def _points_after(self, run_id, since: int) -> list[tuple[int, str, dict, object]]:
        rows = MetricPoint.objects.filter(run_id=run_id, step__gt=since).order_by("step", "split")
        return [(p.step, p.split, p.values, p.created_at) for p in rows]

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
        """A socket of this run joined with `since` (see the docstring); ours, or another's."""
        if event.get("channel") == self.channel_name:
            await self._replay()

    async def run_metrics(self, event) -> None:
        await self._replay()  # the group reaches us: replay first (this point is stored, so it is replayed)
        if (event["split"], event["step"]) in self.replayed:
            self.replayed.discard((event["split"], event["step"]))  # sent from the database already
            return
        await self.send_json({"type": "metrics", "step": event["step"], "split": event["split"],
                              "values": event["values"], "sent_at": event.get("sent_at")})

    async def run_log(self, event) -> None:
        await self.send_json({"type": "log", "id": event.get("id"), "text": event["text"], "time": event.get("time"),
                              "sent_at": event.get("sent_at")})

    async def run_status(self, event) -> None:
        await self.send_json({**_without_type(event), "type": "status"})

    async def run_checkpoint(self, event) -> None:
        await self.send_json({**_without_type(event), "type": "checkpoint"})

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
