"""bench/serve.py at its smallest (--quick): tiny GPT and BERT checkpoints behind the real
`python -m trainer serve` processes, a few streaming completions at two client levels and a few
embedding requests, beside transformers' generate and feature-extraction pipeline in-process, so
that the benchmark's plumbing keeps working (its figures are the benchmark's, in bench/RESULTS.md)."""
from __future__ import annotations

import json
import math

import pytest

from tests.trainer.bench_helpers import bench_module


@pytest.fixture(scope="module")
def bench():
    with bench_module("serve") as module:
        yield module


def test_the_quick_run_prints_every_figure_its_ratios_and_writes_them_as_json(bench, tmp_path, capsys):
    out_file = tmp_path / "serve.json"
    code = bench.main(["--quick", "--clients", "1,2", "--out", str(out_file)])
    out = capsys.readouterr().out
    assert code == 0, out
    report = json.loads(out_file.read_text(encoding="utf-8"))

    machine = report["machine"]
    assert machine["nproc"] >= 1 and machine["torch_threads"] >= 1
    assert "CPUs" in out and "torch threads" in out and "1-minute load" in out

    gen = report["generation"]
    assert [lv["clients"] for lv in gen["levels"]] == [1, 2]
    for lv in gen["levels"]:
        assert lv["requests"] == lv["clients"] * 2  # --quick: 2 requests a client
        assert lv["tokens"] == lv["requests"] * 8 and lv["short_replies"] == 0  # end-of-text never ends one early
        assert lv["tokens_per_s"] > 0 and 0 < lv["ttft_p50_s"] <= lv["ttft_p95_s"] <= lv["latency_p95_s"]
        assert 0 < lv["latency_p50_s"] <= lv["latency_p95_s"]
    for peer in ("transformers", "ours"):
        assert gen[peer]["tokens_per_s"] > 0 and gen[peer]["short_replies"] == 0
        assert set(gen[peer]["runs"]) == {"worker thread, before", "main thread, before", "worker thread, after"}
    assert gen["same_greedy_tokens"] == "3/3"  # the exported weights decode as ours do
    assert gen["scaling"] == pytest.approx(gen["levels"][1]["tokens_per_s"] / gen["levels"][0]["tokens_per_s"])
    assert gen["vs_transformers"] == pytest.approx(gen["levels"][0]["tokens_per_s"] / gen["transformers"]["tokens_per_s"])

    emb = report["embeddings"]
    assert [(lv["texts_per_request"], lv["clients"]) for lv in emb["server"]] == [(1, 1), (1, 8), (32, 1)]
    assert [p["batch"] for p in emb["pipeline"]] == [1, 32]
    assert all(lv["embeddings_per_s"] > 0 for lv in emb["server"] + emb["pipeline"])
    assert emb["vector_max_difference"] < 1e-4  # the server and the pipeline embed the same weights alike
    assert emb["vs_pipeline_b32"] == pytest.approx(emb["server"][2]["embeddings_per_s"] /
                                                   emb["pipeline"][1]["embeddings_per_s"])
    assert set(report["goals"]["met"]) == {"scaling", "ttft_p95", "vs_transformers_generate", "vs_pipeline_b32"}

    table = out[out.index("\nwhat "):]
    for label in ("gpt  1 client(s): tokens/s", "gpt  2 client(s): TTFT p50 / p95 ms", "latency p50 / p95 ms",
                  "transformers generate (cache, batch 1", "our generate (in-process, batch 1",
                  "server 2 clients / 1 client tokens/s", "server 1 client / transformers generate tokens/s",
                  "bert server batch 32, 1 client(s): embeddings/s", "transformers pipeline batch 32",
                  "server batch 32 / pipeline batch 32 embeddings/s"):
        assert label in table, label
    for ratios in (gen["ratios"], emb["ratios"]):
        for name, value in ratios.items():
            assert math.isfinite(value) and value > 0 and f"{name}  " in table
    assert out.count("goal: ") == 4 and all(("met" in line) for line in report["goals"]["lines"])
