from django.urls import path

from webapp.sweeps import api

urlpatterns = [
    path("sweeps/", api.SweepListCreateView.as_view(), name="api-sweeps"),
    path("sweeps/<uuid:sweep_id>/", api.SweepDetailView.as_view(), name="api-sweep"),
    path("sweeps/<uuid:sweep_id>/cancel/", api.SweepCancelView.as_view(), name="api-sweep-cancel"),
]
