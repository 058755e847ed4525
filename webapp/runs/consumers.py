"""The dashboard's websocket: /ws/runs/<run_id>/ streams one run's events to its owner.

Only the owner may listen: anonymous visitors, other users and unknown runs are closed
with code 4403 before the handshake completes. The group name comes from the run's id
as loaded from the database, never from anything the client sends.
"""
from __future__ import annotations

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from webapp.runs.events import run_group
from webapp.runs.models import Run

FORBIDDEN = 4403


class RunConsumer(AsyncJsonWebsocketConsumer):
    group_name: str | None = None

    async def connect(self) -> None:
        run = await self._owned_run()
        if run is None:
            await self.close(code=FORBIDDEN)
            return
        self.group_name = run_group(run.id)
        await self.channel_layer.group_add(self.group_name, self.channel_name)
        await self.accept()
        await self.send_json({
            "type": "hello", "status": run.status, "status_label": run.get_status_display(),
            "step": run.current_step, "max_steps": run.max_steps, "error": run.error,
            "cancel_requested": run.cancel_requested, "finished": run.is_finished,
        })

    async def disconnect(self, code) -> None:
        if self.group_name:
            await self.channel_layer.group_discard(self.group_name, self.channel_name)

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
    async def run_metrics(self, event) -> None:
        await self.send_json({"type": "metrics", "step": event["step"], "split": event["split"],
                              "values": event["values"]})

    async def run_log(self, event) -> None:
        await self.send_json({"type": "log", "id": event.get("id"), "text": event["text"], "time": event.get("time")})

    async def run_status(self, event) -> None:
        await self.send_json({**_without_type(event), "type": "status"})

    async def run_checkpoint(self, event) -> None:
        await self.send_json({**_without_type(event), "type": "checkpoint"})

    async def run_heartbeat(self, event) -> None:
        await self.send_json({"type": "heartbeat", "step": event["step"], "tokens_seen": event["tokens_seen"]})


def _without_type(event: dict) -> dict:
    return {k: v for k, v in event.items() if k != "type"}
