"""MFU can be trusted on a CPU: the peak is the best of several probes and the best this machine
ever measured (a busy first probe does not stick), and a figure above 100% is never reported."""
from __future__ import annotations

import json

import torch

from trainer.training import flops


def test_mfu_above_one_is_not_a_figure():
    peak = flops.Peak(1e12, "test")
    assert flops.mfu(1e6, 5e5, peak) == 0.5
    assert flops.mfu(1e6, 1e6, peak) == 1.0
    assert flops.mfu(1e6, 1.273e6, peak) is None  # the 127.3% a busy machine showed
    assert flops.utilisation(1e6, 1.273e6, peak) == 1.273


def test_the_cpu_peak_is_the_best_this_machine_measured(tmp_path, monkeypatch):
    monkeypatch.setenv("LMWB_CACHE_DIR", str(tmp_path))
    readings = iter([4e11, 3e11, 2e11,      # a quiet first run: 0.4 TFLOP/s is its best probe
                     4e10, 5e10, 3e10])     # a busy later run reads 0.05 at best
    monkeypatch.setattr(flops, "_measured", lambda *args: next(readings))
    assert flops.measured_peak("cpu", torch.float32) == 4e11
    assert flops.measured_peak("cpu", torch.float32) == 4e11  # the busy reading does not lower it
    cached = json.loads((tmp_path / "cpu-peak.json").read_text())
    assert list(cached.values()) == [4e11]


def test_a_busy_first_reading_is_replaced_by_a_quieter_one(tmp_path, monkeypatch):
    monkeypatch.setenv("LMWB_CACHE_DIR", str(tmp_path))
    readings = iter([4e10, 4e10, 4e10, 5e11, 1e11, 1e11])
    monkeypatch.setattr(flops, "_measured", lambda *args: next(readings))
    assert flops.measured_peak("cpu", torch.float32) == 4e10
    assert flops.measured_peak("cpu", torch.float32) == 5e11


def test_an_unwritable_cache_still_gives_the_measurement(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("LMWB_CACHE_DIR", str(tmp_path / "file" / "sub"))
    monkeypatch.setattr(flops, "_measured", lambda *args: 3e11)
    assert flops.measured_peak("cpu", torch.float32) == 3e11
