from django.apps import AppConfig


class SweepsConfig(AppConfig):
    name = "webapp.sweeps"

    def ready(self) -> None:
        # A trial's run reports validation metrics and ends through webapp.runs.signals.
        from webapp.sweeps import receivers  # noqa: F401
