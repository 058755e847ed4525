"""Helpers for the import and explorer tests (imported by them; holds no tests): tiny transformers
BERT folders and their zips, made once per session, and imported checkpoints made from them."""
from __future__ import annotations

import threading
from pathlib import Path

from django.conf import settings

from tests.trainer.importing_helpers import write_tiny_hf_bert, zip_folder

_lock = threading.Lock()


def hf_folder(kind: str = "masked-lm") -> Path:
    """A save_pretrained() folder of a tiny BertForMaskedLM (or BertForPreTraining) with vocab.txt."""
    folder = Path(settings.STORAGE_ROOT) / "test-cache" / f"hf-{kind}"
    with _lock:
        if not (folder / "config.json").is_file():
            write_tiny_hf_bert(folder, kind=kind)
    return folder


def hf_zip(kind: str = "masked-lm") -> Path:
    archive = Path(settings.STORAGE_ROOT) / "test-cache" / f"tiny-bert-{kind}.zip"
    folder = hf_folder(kind)
    with _lock:
        if not archive.is_file():
            zip_folder(folder, archive)
    return archive


def imported_checkpoint(owner, *, kind: str = "masked-lm", name: str = "tiny bert"):
    from webapp.explorer.imports import checkpoint_import

    return checkpoint_import(owner=owner, name=name, archive_path=hf_zip(kind))
