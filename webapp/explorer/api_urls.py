"""The explorer's JSON API: one endpoint per tool with one (webapp.explorer.tools), then the
endpoints that are not a question to one checkpoint."""
from django.urls import path

from webapp.explorer import api, tools

urlpatterns = [
    *(path(f"explore/{tool.api.path}", tool.api.view.as_view(), name=tool.api.url_name) for tool in tools.with_api()),
    path("explore/neighbours/index/<uuid:pk>/", api.NeighbourIndexDetailView.as_view(),
         name="api-explore-neighbour-index-detail"),
    path("explore/compare/", api.CompareView.as_view(), name="api-explore-compare"),
    path("explore/inspect/", api.InspectView.as_view(), name="api-explore-inspect"),
    path("explore/imports/", api.ImportListView.as_view(), name="api-explore-imports"),
    path("explore/imports/<uuid:pk>/", api.ImportDetailView.as_view(), name="api-explore-import"),
]
