"""kombu's Redis transport, made to survive a Redis restart while a task is unacknowledged.

settings.CELERY_BROKER_TRANSPORT names `Transport` below for every Celery connection (workers,
beat, the web process's producers); the broker URL still says where Redis is.

Why: with kombu 5.7 and Celery 5.7, a worker that holds an unacknowledged message (every
training run: tasks are acknowledged late) when Redis goes away dies with "Unrecoverable error:
AttributeError: 'NoneType' object has no attribute 'hostname'" instead of reconnecting. Celery
first "collects" the broken connection: it closes the consuming channel, which reads the reply of
its pending BRPOP first; on the dead socket that read raises, and kombu's Channel.close() stops
there, leaving the channel open with its unacknowledged messages while the transport is detached
(its `client` set to None). Celery then closes the connection again, and this time the channel
goes on to restore its unacknowledged messages, which needs the detached transport's address.

Here a channel finishes closing even when that last read fails: the socket is gone anyway, and
closing goes on to restore the unacknowledged messages while the transport is still attached
(with Redis down that fails with a connection error, which Celery expects; the messages stay in
Redis's unacked index until the task acknowledges them or the visibility timeout passes).
"""
from __future__ import annotations

import logging
from queue import Empty

from kombu.transport import redis

log = logging.getLogger(__name__)


class Channel(redis.Channel):
    def close(self) -> None:
        if self._in_poll and not self.closed:
            try:
                self._brpop_read()
            except Empty:
                pass
            except self.connection_errors as exc:  # _brpop_read has cleared _in_poll
                log.debug("The broker connection was already gone while closing a channel: %r", exc)
        super().close()


class Transport(redis.Transport):
    Channel = Channel
