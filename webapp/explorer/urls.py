from django.urls import path

from webapp.explorer import views

app_name = "explorer"

urlpatterns = [
    path("", views.index, name="index"),
    path("inspect/", views.inspect, name="inspect"),
    path("import/", views.import_model, name="import"),
    path("import/<uuid:pk>/delete/", views.import_delete, name="import-delete"),
]
