"""The JSON API: each app contributes its own api_urls."""
from django.urls import include, path

urlpatterns = [
    path("", include("webapp.accounts.api_urls")),
    path("", include("webapp.corpora.api_urls")),
    path("", include("webapp.runs.api_urls")),
    path("", include("webapp.explorer.api_urls")),
    path("", include("webapp.datasets.api_urls")),
    path("", include("webapp.sweeps.api_urls")),
]
