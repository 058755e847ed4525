"""Every family's presets are found from the one family registry (issue 30, point 1: a second
list of families in presets.py had drifted, so XLNet's and Transformer-XL's presets the docs
promise were missing from presets.get and list_presets)."""
from __future__ import annotations

import pytest

from models_lib.checkpoint import FAMILIES
from models_lib.core.config import PresetConfig
from models_lib.families import presets


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_registered_family_lists_its_presets_and_each_builds(family):
    names = presets.list_presets(family)
    assert names, family
    for name in names:
        assert name in presets.list_presets()
        config = presets.get(name)
        assert type(config) is FAMILIES[family].config_cls or not issubclass(FAMILIES[family].config_cls, PresetConfig)


def test_xlnet_and_transformer_xl_presets_are_found():
    assert type(presets.get("xlnet-tiny")).__name__ == "XLNetConfig"
    assert type(presets.get("transfo-xl-tiny", vocab_size=500)).__name__ == "TransfoXLConfig"
