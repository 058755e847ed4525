from pathlib import Path

from django.apps import AppConfig
from django.conf import settings


class CorporaConfig(AppConfig):
    name = "webapp.corpora"
    label = "corpora"

    def ready(self) -> None:
        # Uploads stream into FILE_UPLOAD_TEMP_DIR (inside the storage folder, so that keeping
        # an upload is a rename); Python's tempfile needs the folder to exist.
        temp_dir = getattr(settings, "FILE_UPLOAD_TEMP_DIR", None)
        if temp_dir:
            Path(temp_dir).mkdir(parents=True, exist_ok=True)
