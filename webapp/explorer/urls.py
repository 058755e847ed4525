from django.urls import path

from webapp.explorer import views

app_name = "explorer"

urlpatterns = [
    path("", views.index, name="index"),
]
