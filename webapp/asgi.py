"""ASGI entry point: HTTP (Django) and websockets (Channels) in one process."""
import gc
import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
# The HTTP handler runs requests on a few lasting threads (webapp.server.handler): each keeps its
# database connection, checked before reuse, instead of connecting for every request.
os.environ.setdefault("DB_CONN_MAX_AGE", "60")
django.setup(set_prefix=False)  # before the imports below touch models

from webapp.server.handler import PooledASGIHandler  # noqa: E402

django_http = PooledASGIHandler()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.urls import get_resolver  # noqa: E402

from webapp.server.limits import UploadSizeLimit  # noqa: E402
from webapp.server.ws_auth import SessionOrTokenAuth  # noqa: E402
from webapp.server.ws_outage import TryAgainOnOutage  # noqa: E402
from webapp.routing import websocket_urlpatterns  # noqa: E402

# Load every URL's views now (they import the trainer, and so torch, for the launch registry), not
# on the first request: that import holds the GIL for seconds, and every websocket of the process
# would wait behind it.
get_resolver().url_patterns

# Everything loaded so far lives as long as the process: out of the collector's sight, so that its
# full collections (every few thousand requests' worth of allocations) scan only what requests made.
gc.collect()
gc.freeze()

application = ProtocolTypeRouter(
    {
        "http": UploadSizeLimit(django_http),
        # A socket opened while Redis is down is closed with 1013 (try again later), not a 500.
        "websocket": AllowedHostsOriginValidator(SessionOrTokenAuth(TryAgainOnOutage(URLRouter(websocket_urlpatterns)))),
    }
)
