from django.urls import path

from webapp.explorer import api

urlpatterns = [
    path("explore/fill-mask/", api.FillMaskView.as_view(), name="api-explore-fill-mask"),
    path("explore/next-sentence/", api.NextSentenceView.as_view(), name="api-explore-next-sentence"),
]
