from pathlib import Path

from django.apps import AppConfig
from django.conf import settings


class JobsConfig(AppConfig):
    name = "webapp.jobs"
    label = "jobs"

    def ready(self) -> None:
        # Uploads stream into FILE_UPLOAD_TEMP_DIR (inside the storage folder, so that keeping
        # an upload is a rename: webapp.jobs.uploads.keep_upload); Python's tempfile needs the folder to exist.
        temp_dir = getattr(settings, "FILE_UPLOAD_TEMP_DIR", None)
        if temp_dir:
            Path(temp_dir).mkdir(parents=True, exist_ok=True)
