"""Celery tasks of sweeps.

- advance_sweeps: advance every running sweep (webapp.sweeps.services.sweep_advance). A sweep
  advances as soon as a trial's run ends (the run_ended signal, in the process that ended it);
  this periodic pass (Celery beat, with the stale-run reaper) catches what no signal reports: a
  trial whose run was deleted, or an advance that failed (the database was away at that moment).
  A sweep whose advance raises is marked failed with the reason (sweep_advance_or_fail), once:
  the next pass does not retry it into the same crash, and the other sweeps still advance.
  One that killed the process (out of memory: nothing to catch) is found by its marker, a Redis
  key set while the pass advances it and removed after: the next pass fails it with a sentence
  instead of advancing it again.
"""
from __future__ import annotations

import logging

from celery import shared_task

from webapp.sweeps import services
from webapp.sweeps.models import Sweep, SweepStatus

log = logging.getLogger(__name__)

ADVANCING_PREFIX = "lmwb:sweep-advancing:"
ADVANCING_TTL_S = 24 * 3600
DIED = ("the scheduler stopped while advancing it (its process was killed, most likely out of memory), so it is "
        "not advanced again")


@shared_task(name="webapp.sweeps.tasks.advance_sweeps", ignore_result=True)
def advance_sweeps() -> int:
    ids = list(Sweep.objects.filter(status=SweepStatus.RUNNING).values_list("pk", flat=True))
    for sweep_id in ids:
        key = f"{ADVANCING_PREFIX}{sweep_id}"
        if _marker(lambda client: client.exists(key)):  # a pass died advancing it
            services.sweep_fail(sweep_id=sweep_id, reason=DIED)
            _marker(lambda client: client.delete(key))
            continue
        _marker(lambda client: client.set(key, "1", ex=ADVANCING_TTL_S))
        services.sweep_advance_or_fail(sweep_id=sweep_id)
        _marker(lambda client: client.delete(key))
    return len(ids)


def _marker(op):
    """Run `op` on Redis; None when Redis does not answer (then the pass goes on without markers)."""
    from webapp.runs.capacity import _redis

    try:
        return op(_redis())
    except Exception:  # noqa: BLE001 - Redis away: sweeps still advance, unguarded
        log.warning("Could not reach Redis for the sweep pass's markers", exc_info=True)
        return None
