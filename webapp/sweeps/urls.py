from django.urls import path

from webapp.sweeps import views

app_name = "sweeps"

urlpatterns = [
    path("", views.sweep_list, name="list"),
    path("new/", views.sweep_new, name="new"),
    path("<uuid:sweep_id>/", views.sweep_detail, name="detail"),
    path("<uuid:sweep_id>/cancel/", views.sweep_cancel, name="cancel"),
]
