from django.urls import path

from webapp.accounts.api import ObtainTokenApi

urlpatterns = [
    path("auth/token/", ObtainTokenApi.as_view(), name="api-auth-token"),
]
