"""Shared by the tests that compare batches built two ways (data workers, encoding ahead)."""
from __future__ import annotations

import dataclasses

import torch


def assert_same_batch(got, want) -> None:
    """Two batches equal field for field: tensors in dtype, shape and every value."""
    assert type(got) is type(want)
    for f in dataclasses.fields(want):
        a, b = getattr(got, f.name), getattr(want, f.name)
        if isinstance(b, torch.Tensor):
            assert a.dtype == b.dtype and torch.equal(a, b), f.name
        else:
            assert a == b, f.name
