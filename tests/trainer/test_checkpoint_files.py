"""Reading a checkpoint folder without loading its model: model_config.json.

The web app asks these (trainer.checkpoints) instead of parsing the files itself.
"""
from __future__ import annotations

import pytest

from trainer.checkpoints import checkpoint_family, read_model_meta
from trainer.errors import UserError


def checkpoint_folder(tmp_path, meta: bytes | None = b'{"family": "t5", "config": {"d_model": 64}}'):
    folder = tmp_path / "step-00000010"
    folder.mkdir()
    if meta is not None:
        (folder / "model_config.json").write_bytes(meta)
    return folder


def test_read_model_meta_returns_the_family_and_config(tmp_path):
    folder = checkpoint_folder(tmp_path)
    assert read_model_meta(folder) == {"family": "t5", "config": {"d_model": 64}}
    assert checkpoint_family(folder) == "t5"


@pytest.mark.parametrize("meta, message", [
    (None, "The checkpoint step-00000010 is incomplete: model_config.json is missing."),
    (b'{"family": "bert", "config": ', "has a broken model_config.json (not valid JSON: Expecting value at line 1)"),
    (b"\xff\xfe{}", "has a broken model_config.json (not UTF-8 text)"),
    (b'["bert"]', "does not name a model family and its config"),
    (b'{"family": "bert", "config": 3}', "does not name a model family and its config"),
    (b'{"config": {}}', "does not name a model family and its config"),
])
def test_a_missing_or_broken_model_config_is_a_sentence(tmp_path, meta, message):
    folder = checkpoint_folder(tmp_path, meta)
    with pytest.raises(UserError) as caught:
        read_model_meta(folder)
    assert message in str(caught.value)
    assert checkpoint_family(folder) is None


def test_a_folder_that_is_gone_says_so(tmp_path):
    with pytest.raises(UserError, match="^This checkpoint's files are no longer on disk.$"):
        read_model_meta(tmp_path / "deleted")
    assert checkpoint_family(tmp_path / "deleted") is None
