from django.urls import path

from webapp.datasets import views

app_name = "datasets"

urlpatterns = [
    path("", views.dataset_list, name="list"),
    path("upload/", views.dataset_upload, name="upload"),
    path("demo/", views.dataset_demo, name="demo"),
    path("<uuid:pk>/", views.dataset_detail, name="detail"),
    path("<uuid:pk>/mapping/", views.dataset_mapping, name="mapping"),
    path("<uuid:pk>/delete/", views.dataset_delete_view, name="delete"),
]
