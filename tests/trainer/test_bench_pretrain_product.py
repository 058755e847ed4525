"""bench/pretrain_product.py at its smallest (--smoke): `python -m trainer run` as a subprocess on a
generated corpus, its metrics.jsonl read back into real tokens/s, fill and MFU, and the model step
of bench/train_throughput.py beside it, so that the benchmark's plumbing keeps working (its figures
are the benchmark's, in bench/RESULTS.md)."""
from __future__ import annotations

import json
import math

import pytest

from tests.trainer.bench_helpers import bench_module


@pytest.fixture(scope="module")
def bench():
    with bench_module("pretrain_product") as module:
        yield module


def test_the_smoke_run_trains_through_the_cli_and_tabulates_sane_figures(bench, tmp_path, monkeypatch, capsys):
    """bert-tiny (MLM + NSP: sentence pairs padded to the longest row) and t5-tiny (span corruption:
    encoder and decoder tokens), each trained 4 steps by the CLI under the import guard that keeps
    out what the GPU machine lacks, then timed by train_throughput at the same shapes."""
    from trainer.objectives.denoising import span_corruption_lengths

    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    code = bench.main(["--smoke", "--only", "bert-tiny,t5-tiny", "--no-theirs", "--cache", str(tmp_path / "cache")])
    out = capsys.readouterr().out
    assert code == 0, out
    report = json.loads((tmp_path / "out" / "pretrain_product.json").read_text(encoding="utf-8"))
    rows = report["rows"]
    assert [(r["setup"], r["mode"], r["status"]) for r in rows] == [("bert-tiny", "eager", "ok"),
                                                                    ("t5-tiny", "eager", "ok")]
    for row in rows:
        assert row["last_step"] == 4 and row["steps_averaged"] == "2-4"  # step 1 (start-up) left out
        assert row["real_tokens_per_s"] > 0 and row["steps_per_s"] > 0
        assert 0 < row["fill"] <= 1 and row["fill_source"] in ("metric", "estimate")
        assert row["mfu"] > 0 and math.isfinite(row["final_loss"])
        assert row["vocab"] == row["model_step"]["vocab"]  # the model step ran at the run's vocabulary
        assert row["model_step"]["tokens_per_s"] > 0 and row["model_step"]["transformers_tokens_per_s"] is None
        assert row["ratio"] == pytest.approx(row["real_tokens_per_s"] / row["model_step"]["tokens_per_s"])
        assert row["steps_ratio"] > 0 and row["first_log_s"] > 0
    assert rows[0]["target_len"] == 0 and rows[1]["target_len"] == span_corruption_lengths(64)[1]
    assert rows[1]["model_step"]["tokens_per_row"] == 64 + round(64 * 114 / 512)  # train_throughput's T5 count
    assert {"numpy", "tokenizers", "torch"} <= set(report["third_party_imports"])
    assert not set(report["third_party_imports"]) & set(bench.DEVICE_MISSING)
    table = out[out.index("pretrain_product --smoke: 4 steps per run"):]
    assert "product tok/s" in table and "model step tok/s" in table and "product/model" in table
    assert len([line for line in table.splitlines() if line.startswith(("bert-tiny ", "t5-tiny "))]) == 2
    assert (tmp_path / "out" / "pretrain_product-logs" / "t5-tiny-eager.log").is_file()
    assert not (tmp_path / "cache" / "runs" / "t5-tiny-eager" / "checkpoints").exists()  # removed after reading


def test_averages_are_total_tokens_over_total_time_after_the_warm_up(bench):
    """Two intervals of 10 steps at 100 and 300 tokens/s took 10 x k/100 and 10 x k/300 seconds for
    k tokens a step: together 150 tokens/s, not the 200 of a plain mean; step 1's line is left out."""
    def line(step, rate, **extra):
        return {"step": step, "split": "train", "time": 0.0, "values": {"loss": 2.0, "tokens_per_s": rate, **extra}}

    records = [line(1, 5.0, mfu=0.01), line(10, 100.0, mfu=0.2), line(20, 100.0, mfu=0.2), line(30, 300.0, mfu=0.6)]
    fig = bench.average_after_warmup(records, skip_steps=10, tokens_seen=30 * 48, positions_per_step=64)
    assert fig.tokens_per_s == pytest.approx(150.0) and fig.mfu == pytest.approx(0.3)
    assert fig.steps_averaged == "11-30" and fig.intervals == 2
    assert (fig.fill, fig.fill_source) == (pytest.approx(0.75), "estimate")  # 48 of 64 positions a step
    assert fig.steps_per_s == pytest.approx(150.0 / 48)
    with_fill = [line(s, 100.0, fill=f) for s, f in ((1, 0.5), (10, 0.9), (20, 0.8))]
    fig = bench.average_after_warmup(with_fill, skip_steps=1, tokens_seen=20 * 48, positions_per_step=64)
    assert (fig.fill, fig.fill_source) == (pytest.approx((9 * 0.9 + 10 * 0.8) / 19), "metric")


def test_train_throughput_output_is_read_per_run_and_implementation(bench):
    text = """bert-base: 110.1M parameters, batch 256 x 128, vocab 30522, device cuda (NVIDIA H100) bf16, threads 16
MFU: 667.9 MFLOP per token (trainer/training/flops.py) over a peak of 989.40 TFLOP/s (NVIDIA H100 SXM)
         ours:     437187 tokens/s  MFU  24.1%  (75 ms/step; loss first 11.000 last 10.000)
ours compiled:     567958 tokens/s  MFU  31.3%  (58 ms/step; loss first 11.000 last 10.000)
 transformers:     322176 tokens/s  MFU  17.8%  (102 ms/step; loss first 11.000 last 10.000)
t5-tiny: 0.4M parameters, batch 4 x 64 (+ 14 target tokens), vocab 1100, device cpu fp32, threads 1, 1 warmup
MFU: trainer/training/flops.py has no FLOPs formula for t5
         ours:       5131 tokens/s  MFU    n/a  (50 ms/step; loss first 7.000 last 7.000)
"""
    runs = bench.parse_throughput(text)
    assert [(r["model"], r["batch"], r["seq_len"], r["vocab"]) for r in runs] == [("bert-base", 256, 128, 30522),
                                                                                 ("t5-tiny", 4, 64, 1100)]
    assert runs[0]["rates"] == {"ours": (437187.0, pytest.approx(0.241)), "ours compiled": (567958.0,
                                pytest.approx(0.313)), "transformers": (322176.0, pytest.approx(0.178))}
    assert runs[1]["rates"] == {"ours": (5131.0, None)}


def test_the_recompiles_after_warm_up_are_counted_from_the_run_log(bench):
    """The compiled runs' column: CompileWatch's sentences in the run's log, the warm-up's line left out."""
    log = "\n".join([
        "[12:00:01] torch.compile (inductor): the first training step and the first validation compile the model",
        "[12:00:09] torch.compile recompiled forward at step 41 (recompile 1 after warm-up), because 0/1: size.",
        "[12:00:10] torch.compile compiled encode at step 50 (compile 2 after warm-up): a part of the model",
        "[12:00:11] torch.compile gave up compiling forward at step 60: it reached the limit of 32 compilations",
    ])
    assert bench.count_recompiles(log) == (2, 1)
    assert bench.fmt_recompiles({"recompiles": 2, "eager_fallbacks": 1}) == "2 +1 eager"
    assert bench.fmt_recompiles({"recompiles": 0, "eager_fallbacks": 0}) == "0" and bench.fmt_recompiles({}) == "-"
