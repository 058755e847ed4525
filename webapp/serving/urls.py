from django.urls import path

from webapp.serving import views

app_name = "serving"

urlpatterns = [
    path("<uuid:checkpoint_id>/", views.serve_page, name="page"),
    path("<uuid:checkpoint_id>/stop/", views.serve_stop, name="stop"),
]
