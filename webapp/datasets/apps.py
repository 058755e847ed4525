from django.apps import AppConfig


class DatasetsConfig(AppConfig):
    name = "webapp.datasets"
    label = "datasets"
    verbose_name = "Labelled datasets"
