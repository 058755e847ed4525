from django.urls import path

from webapp.serving import api

urlpatterns = [
    path("checkpoints/<uuid:checkpoint_id>/serve/", api.CheckpointServeView.as_view(), name="api-checkpoint-serve"),
    path("checkpoints/<uuid:checkpoint_id>/serve/stop/", api.CheckpointServeStopView.as_view(),
         name="api-checkpoint-serve-stop"),
    path("servers/", api.ServerListView.as_view(), name="api-servers"),
    path("servers/<uuid:served_id>/", api.ServerDetailView.as_view(), name="api-server"),
    path("servers/<uuid:served_id>/stop/", api.ServerStopView.as_view(), name="api-server-stop"),
]
