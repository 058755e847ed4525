"""Every registered family's presets are found (issue 30, point 1: presets.py's list of the families
with config classes of their own had drifted from the registry, so XLNet's and Transformer-XL's
presets the docs promise were missing from presets.get and list_presets); presets.py now reads
every family's table from the registry (models_lib.checkpoint.register_family)."""
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


def test_a_family_with_presets_of_its_own_registers_them_from_its_config_class():
    own = {name for name, family in FAMILIES.items()
           if issubclass(family.config_cls, PresetConfig) and family.config_cls.presets}
    assert own and all(FAMILIES[name].presets == FAMILIES[name].config_cls.presets for name in own)
    assert all(FAMILIES[name].presets for name in FAMILIES)


def test_xlnet_and_transformer_xl_presets_are_found():
    assert type(presets.get("xlnet-tiny")).__name__ == "XLNetConfig"
    assert type(presets.get("transfo-xl-tiny", vocab_size=500)).__name__ == "TransfoXLConfig"
