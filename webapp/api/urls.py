"""The JSON API: each app contributes its own api_urls; any other address under /api/ is a JSON 404."""
from django.urls import include, path, re_path

from webapp.api.errors import api_not_found

urlpatterns = [
    path("", include("webapp.accounts.api_urls")),
    path("", include("webapp.corpora.api_urls")),
    path("", include("webapp.runs.api_urls")),
    path("", include("webapp.explorer.api_urls")),
    path("", include("webapp.datasets.api_urls")),
    path("", include("webapp.sweeps.api_urls")),
    path("", include("webapp.serving.api_urls")),
    re_path(r"^(?P<path>.*)$", api_not_found),  # last: what no endpoint above matched
]
