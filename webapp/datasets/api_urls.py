from django.urls import path

from webapp.datasets import api

urlpatterns = [
    path("datasets/", api.DatasetListApi.as_view(), name="api-dataset-list"),
    path("datasets/demos/", api.DatasetDemoApi.as_view(), name="api-dataset-demos"),
    path("datasets/<uuid:pk>/", api.DatasetDetailApi.as_view(), name="api-dataset-detail"),
    path("datasets/<uuid:pk>/mapping/", api.DatasetMappingApi.as_view(), name="api-dataset-mapping"),
    path("datasets/<uuid:pk>/leaderboard/", api.DatasetLeaderboardApi.as_view(), name="api-dataset-leaderboard"),
    path("datasets/<uuid:pk>/stats/", api.DatasetStatsApi.as_view(), name="api-dataset-stats"),
]
