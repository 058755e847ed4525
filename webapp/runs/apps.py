from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "webapp.runs"
    label = "runs"

    def ready(self) -> None:
        from django.db.models.signals import post_delete

        from webapp.runs.exports import remove_export_files
        from webapp.runs.models import CheckpointExport

        # A checkpoint's (or run's) deletion cascades to its export row; its files go with it.
        post_delete.connect(remove_export_files, sender=CheckpointExport, dispatch_uid="runs.remove_export_files")
