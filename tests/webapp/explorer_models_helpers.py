"""Helpers for the explorer tests of T5, GPT and ELMo (imported by them; holds no tests): tiny
random checkpoints of each family (tests/trainer/inference_generate_helpers), built once per
session into STORAGE_ROOT/test-cache/, and Checkpoint rows of a user pointing at copies of them."""
from __future__ import annotations

import shutil
import threading
import uuid
from pathlib import Path

from django.conf import settings

from tests.trainer.inference_generate_helpers import make_checkpoint, make_tokenizer
from tests.webapp.runs_helpers import cache_dir, make_run
from webapp.runs.models import Checkpoint, CheckpointSource, RunStatus

_lock = threading.Lock()


def family_folder(family: str, *, extra_ids: int = 8) -> Path:
    """A checkpoint folder of a tiny random `family` model ("t5", "gpt", "elmo", "bert", "transfo_xl",
    "xlnet"), made once."""
    tok_dir = make_tokenizer(cache_dir() / f"explore-tokenizer-{extra_ids}", extra_ids=extra_ids)
    folder = cache_dir() / f"explore-{family}-{extra_ids}"
    with _lock:
        if not (folder / "model_config.json").is_file():
            tmp = folder.with_name(folder.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            make_checkpoint(family, tmp, tok_dir)
            tmp.rename(folder)
    return folder


def family_checkpoint(owner, family: str, *, run: bool = False, extra_ids: int = 8) -> Checkpoint:
    """`owner`'s checkpoint of a tiny `family` model: a step of a run (run=True, family =
    family) or an imported model."""
    source = family_folder(family, extra_ids=extra_ids)
    if run:
        parent = make_run(owner, status=RunStatus.SUCCEEDED, name=f"tiny {family} run", family=family)
        rel = Path("runs") / str(parent.id) / "checkpoints" / "step-00000010"
    else:
        parent = None
        rel = Path("imports") / "checkpoints" / str(uuid.uuid4())
    target = Path(settings.STORAGE_ROOT) / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(source, target)
    if parent is not None:
        return Checkpoint.objects.create(run=parent, step=10, path=str(rel), metrics={})
    return Checkpoint.objects.create(owner=owner, source=CheckpointSource.IMPORT, name=f"tiny {family}",
                                     path=str(rel))


def explorer_tools(html: str) -> dict:
    """The explorer page's table of its tools, {name: {"url", "compare"}}, which its scripts read."""
    import json

    return json.loads(html.split('<script id="explorer-tools" type="application/json">')[1].split("</script>")[0])
