"""bench/corpus_pipeline.py at a tiny size (3 MB of text, 1 MB of it unique): man pages and stdlib docs
rendered, written as Parquet and jsonl.zst shards, the product's pipeline run on each in a subprocess,
the tokenizers library's ceiling beside it, the table printed and the JSON written; so that the
benchmark's plumbing keeps working (its figures are the benchmark's, in bench/RESULTS.md)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.trainer.bench_helpers import bench_module

pytestmark = pytest.mark.skipif(shutil.which("groff") is None or not Path("/usr/share/man/man1").is_dir(),
                                reason="needs groff and the man pages under /usr/share/man")


@pytest.fixture(scope="module")
def bench():
    with bench_module("corpus_pipeline") as module:
        yield module


def _texts(bench, folder: Path, fmt: str) -> list[str]:
    import pyarrow.parquet as pq
    import zstandard

    texts: list[str] = []
    for path in sorted(folder.iterdir()):
        assert path.name.endswith(bench.FORMATS[fmt])
        if fmt == "parquet":
            meta = pq.ParquetFile(path).metadata
            assert meta.num_row_groups >= 1 and meta.row_group(0).num_rows <= bench.ROW_GROUP_ROWS
            texts += pq.read_table(path, columns=["text"]).column("text").to_pylist()
        else:
            raw = zstandard.ZstdDecompressor().stream_reader(path.open("rb")).read().decode("utf-8")
            texts += [json.loads(line)["text"] for line in raw.splitlines()]
    return texts


def test_a_tiny_run_prints_its_table_and_writes_its_json(bench, tmp_path, monkeypatch, capsys):
    from dataclasses import fields

    from trainer.prep.corpus import CleaningOptions

    cache, out = tmp_path / "cache", tmp_path / "out"
    monkeypatch.setenv("OUT", str(out))
    argv = ["--size", "3MB", "--unique-size", "1MB", "--formats", "parquet,jsonl.zst", "--shard-mb", "1",
            "--threads", "2", "--vocab-size", "2000", "--cache", str(cache)]
    code = bench.main(argv)
    printed = capsys.readouterr().out
    assert code == 0, printed

    table = printed[printed.index("| format | MB | kept |"):]
    header = table.splitlines()[0]
    for column in ("read+clean MB/s", "dedup MB/s", "split MB/s", "tokenizer training MB/s", "encoding MB/s",
                   "end to end MB/s", "ceiling MB/s", "ratio", "peak RSS MB"):
        assert f"| {column} |" in header
    rows = {line.split("|")[1].strip(): line for line in table.splitlines() if line.startswith("| ") and
            line.split("|")[1].strip() in ("parquet", "jsonl.zst")}
    assert len(rows) == 2
    for line in rows.values():  # every figure there
        assert all(cell.strip() not in ("", "-") for cell in line.split("|")[2:-1]), line
    busy_table = printed[printed.index("| format | ingest cores busy |"):].splitlines()
    assert {line.split("|")[1].strip() for line in busy_table[2:4]} == {"parquet", "jsonl.zst"}
    every_rule = [f.name for f in fields(CleaningOptions)]
    assert f"cleaning rules: {', '.join(every_rule)}" in printed

    report = json.loads((out / "corpus_pipeline.json").read_text(encoding="utf-8"))
    assert report["command"].endswith("bench/corpus_pipeline.py " + " ".join(argv))
    assert report["rules"] == every_rule and report["machine"]["threads"] == 2
    corpus = report["corpus"]
    assert 2.9 <= corpus["text_bytes"] / 1e6 < 3.3 and corpus["copies"] >= 3  # 1 MB of pages, repeated, varied
    assert corpus["formats"]["parquet"]["text_bytes"] == corpus["formats"]["jsonl.zst"]["text_bytes"]
    assert report["render"]["man_pages"] > 0 and report["render"]["rendered_now"] > 0
    ceiling = report["ceiling"]
    assert ceiling["from_format"] == "parquet" and ceiling["lines"] > 0 and ceiling["mb_per_s"] > 0
    assert ceiling["RAYON_NUM_THREADS"] == "2" and ceiling["TOKENIZERS_PARALLELISM"] == "true"
    for row in report["rows"]:
        assert row["status"] == "ok" and row["rc"] == 0
        fig = row["figures"]
        assert fig["input_mb"] == pytest.approx(corpus["text_bytes"] / 1e6)
        assert fig["end_to_end_mb_per_s"] == pytest.approx(fig["input_mb"] / fig["total_seconds"])
        # cores busy: the stage's CPU seconds (its ended workers' included) over its wall seconds; the
        # encode's two workers did the work, so without their CPU time it would read near 0
        busy = fig["cores_busy"]
        assert set(busy) == {"ingest", "tokenizer", "encode", "all"}
        assert all(0 < busy[k] <= 2.2 for k in busy), busy
        assert row["cpu_seconds"]["encode"] > 0.3 * row["seconds"]["encode"], row
        assert row["ratio"] == pytest.approx(fig["end_to_end_mb_per_s"] / ceiling["mb_per_s"])
        assert all(fig["stage_seconds"][k] is not None for k in ("read_clean", "dedup", "split", "tokenizer",
                                                                   "encode"))
        # the copies survive the near-duplicate and span rules: the later stages get most of the text
        assert 0.2 < fig["kept_share"] <= 1.0
        assert row["workers_passed"] == {"ingest": True, "encode_corpus": True}
        assert row["peak_rss_bytes"] > 50e6 and row["memory_samples"] > 0 and row["ru_maxrss_self_kb"] > 0
        assert row["encode_stats"]["n_tokens"] > 0 and row["tokenizer_stats"]["vocab_size"] <= 2000
        assert (out / "corpus_pipeline-logs" / f"{row['format']}.log").is_file()
    assert not (cache / "runs" / "parquet").exists()  # removed without --keep

    # the shards hold the same documents in both formats
    folder = Path(corpus["folder"])
    parquet, jsonl = _texts(bench, folder / "parquet", "parquet"), _texts(bench, folder / "jsonl.zst", "jsonl.zst")
    assert parquet == jsonl and len(parquet) == corpus["documents"] and corpus["shards"] == 3
    assert sum(t.startswith("Copy 2 of ") for t in parquet) > 0

    # a second run renders nothing and writes nothing again
    stamp = (folder / "parquet.json").stat().st_mtime_ns
    assert bench.main([*argv, "--prepare-only"]) == 0
    again = json.loads((out / "corpus_pipeline.json").read_text(encoding="utf-8"))
    assert again["render"]["rendered_now"] == 0 and again["render"]["from_cache"] > 0
    assert again["corpus"]["folder"] == corpus["folder"] and (folder / "parquet.json").stat().st_mtime_ns == stamp


def test_sizes_and_formats_are_read_as_people_write_them(bench):
    import argparse

    assert bench.parse_size("1GB") == 10**9 and bench.parse_size("200MB") == 200 * 10**6
    assert bench.parse_size("1.5gb") == 1_500_000_000 and bench.parse_size("3MB") == 3_000_000
    with pytest.raises(argparse.ArgumentTypeError):
        bench.parse_size("lots")
    assert bench.parse_formats("json.gz, parquet") == ["json.gz", "parquet"]
    with pytest.raises(argparse.ArgumentTypeError):
        bench.parse_formats("csv")


def test_copies_are_varied_words_and_keep_their_layout(bench):
    text = "\n".join(f"       Option {i} makes the program print every matching line twice." for i in range(40))
    vocab = ["zebra", "quartz", "violin"]
    varied = bench.vary_text(text, 2, "Copy 2 of ls.1", "words", vocab, 0, 7)
    title, body = varied.split("\n", 1)
    assert title == "Copy 2 of ls.1"
    assert [len(line) - len(line.lstrip()) for line in body.splitlines()] == [7] * 40  # indentation kept
    before, after = text.split(), body.split()
    changed = sum(a != b for a, b in zip(before, after))
    assert len(after) == len(before) and 0.1 * len(before) < changed <= bench.VARY_SHARE * len(before)
    assert all(b in vocab for a, b in zip(before, after) if a != b)
    assert varied == bench.vary_text(text, 2, "Copy 2 of ls.1", "words", vocab, 0, 7)  # seeded
    assert bench.vary_text(text, 2, "T", "title", vocab, 0, 7) == "T\n" + text


def test_the_plan_repeats_the_pages_in_new_orders_and_cuts_shards(bench):
    pages = [("man", f"man1/p{i}.1.gz", 100) for i in range(10)]
    shards = bench.plan_corpus(pages, 2500, 1000, 0, "words")
    docs = [d for shard in shards for d in shard]
    assert [i for i, c in docs if c == 0] == list(range(10))
    assert sorted(i for i, c in docs if c == 1) == list(range(10)) and [i for i, c in docs if c == 1] != list(range(10))
    assert {c for _, c in docs} == {0, 1, 2}
    assert all(len(shard) <= 10 for shard in shards) and len(shards) == 3
    assert bench.plan_corpus(pages, 250, 1000, 0, "words") == [[(0, 0), (1, 0), (2, 0)]]


def test_rendering_tidies_pages_skips_redirects_and_joins_paragraphs(bench):
    assert bench.tidy("\n\nNAME   \n\n\n\n   ls - list\n\n") == "NAME\n\n   ls - list"
    assert bench._is_redirect(b'.\\" comment\n.so man1/bash.1\n')
    assert not bench._is_redirect(b".TH LS 1\n.SH NAME\nls \\- list\n")
    page = ("DESCRIPTION\n       List information about the FILEs.  Sort entries\n       alphabetically.\n\n"
            "       -a, --all\n              do not ignore entries\n              starting with .\n")
    assert bench.unwrap(page) == ("DESCRIPTION\n"
                                  "       List information about the FILEs.  Sort entries alphabetically.\n\n"
                                  "       -a, --all\n              do not ignore entries starting with .\n")
