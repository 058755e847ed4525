"""The server's own machinery, beneath every app: how a request reaches Django and how the disk it
writes to is guarded.

- handler.py: PooledASGIHandler, the HTTP side of webapp/asgi.py (a few lasting request threads).
- limits.py: UploadSizeLimit, the ASGI middleware that refuses an oversized body before it is read.
- ws_auth.py, ws_outage.py: the websocket side's session-or-token sign-in and its 1013 answer while
  Redis is down.
- storage.py: the free-space guard and the recognition of a full disk (DISK_FULL), used by the
  pages, the API, the runs and the background jobs alike.

None of it is an app's, so none of it lives in one: an app imports it, never the other way round.
"""
