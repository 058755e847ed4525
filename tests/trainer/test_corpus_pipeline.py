"""The ingest at scale (trainer.prep.pipeline): the same outputs whatever the workers, pieces and
formats; deduplication across pieces as one pass would do it; resume after a kill; the sample;
memory held to a bucket of hashes."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from trainer.prep import pipeline
from trainer.prep.corpus import CleaningOptions, ingest
from trainer.prep.sources import discover

ROOT = Path(__file__).resolve().parents[2]
WORDS = ("river stone market garden window letter summer winter engine harbor forest valley "
         "teacher doctor camera pencil island bridge castle rocket planet ocean desert canyon "
         "orange purple silver golden quiet brave gentle rapid bright ancient modern simple").split()


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 12))).capitalize() + "."


def corpus_docs(n_docs: int, seed: int = 0, repeats: bool = True) -> list[list[str]]:
    """Documents with exact duplicates, repeated three-sentence spans and near-duplicates in them."""
    rng = random.Random(seed)
    docs = [[sentence(rng) for _ in range(rng.randint(3, 9))] for _ in range(n_docs)]
    if repeats:
        for i in range(5, n_docs, 7):  # an exact copy of an earlier document
            docs[i] = list(docs[rng.randrange(i)])
        for i in range(3, n_docs, 5):  # an earlier document's span inside this one
            src = docs[rng.randrange(i)]
            if len(src) >= 3:
                j = rng.randrange(len(src) - 2)
                docs[i] = docs[i][:2] + src[j:j + 3] + docs[i][2:]
    return docs


def write_jsonl(path: Path, docs: list[list[str]]) -> Path:
    path.write_text("".join(json.dumps({"text": "\n".join(d)}) + "\n" for d in docs), encoding="utf-8")
    return path


def outputs(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file() and p.name != "stats.json"}


SPANS = CleaningOptions(dedup_spans=True, min_sentences=True)


def reference(docs: list[list[str]]) -> list[list[str]]:
    """The C4 rules as one sequential pass defines them (the single-process cleaner of before):
    drop a document seen before, then of every 3-sentence span seen before the later copy's
    sentences, then a document left under 3 sentences."""
    seen_docs, seen_spans, out = set(), set(), []
    for doc in docs:
        doc = [" ".join(s.split()) for s in doc]
        if len(doc) < 3 or tuple(doc) in seen_docs:
            continue
        seen_docs.add(tuple(doc))
        drop = set()
        for i in range(len(doc) - 2):
            span = tuple(doc[i:i + 3])
            if span in seen_spans:
                drop.update(range(i, i + 3))
            else:
                seen_spans.add(span)
        kept = [s for i, s in enumerate(doc) if i not in drop]
        if len(kept) >= 3:
            out.append(kept)
    return out


def all_docs(folder: Path) -> list[list[str]]:
    docs = []
    for name in ("train.txt", "valid.txt"):
        text = (folder / name).read_text(encoding="utf-8").strip("\n")
        docs += [block.split("\n") for block in text.split("\n\n")] if text else []
    return docs


@pytest.mark.parametrize("workers,piece_bytes", [(1, 1 << 20), (1, 700), (2, 700)])
def test_deduplication_across_pieces_is_the_one_pass_definition(tmp_path, workers, piece_bytes):
    docs = corpus_docs(120)
    src = write_jsonl(tmp_path / "c.jsonl", docs)
    result = ingest(discover([src]), tmp_path / "out", options=SPANS, workers=workers, piece_bytes=piece_bytes)
    want = reference(docs)
    assert sorted(map(tuple, all_docs(tmp_path / "out"))) == sorted(map(tuple, want))
    assert result.stats["documents"] == len(want)
    assert result.removed["duplicate_pages"] > 0 and result.removed["sentences_in_duplicate_spans"] > 0
    assert result.examples["sentences_in_duplicate_spans"]


def test_outputs_do_not_depend_on_workers_or_pieces(tmp_path):
    src = write_jsonl(tmp_path / "c.jsonl", corpus_docs(150, seed=3))
    runs = []
    for i, (workers, piece_bytes) in enumerate([(1, 1 << 20), (2, 500), (2, 2000)]):
        out = tmp_path / f"out{i}"
        ingest(discover([src]), out, options=SPANS, workers=workers, piece_bytes=piece_bytes, sample_bytes=2000)
        runs.append(outputs(out))
    assert runs[0] == runs[1] == runs[2]
    assert set(runs[0]) == {"train.txt", "valid.txt", "sample.txt"}


def test_later_occurrences_in_buckets_match_the_in_memory_answer(tmp_path):
    rng = np.random.default_rng(0)
    keys = rng.integers(0, 50, size=2000, dtype=np.uint64)
    positions = rng.permutation(2000).astype(np.int64)
    chunks = [(keys[i:i + 300], positions[i:i + 300]) for i in range(0, 2000, 300)]
    whole = pipeline.later_occurrences(iter(chunks), 2000, 2000, tmp_path / "a")
    bucketed = pipeline.later_occurrences(iter(chunks), 2000, 2000, tmp_path / "b", bucket_entries=64)
    assert (whole == bucketed).all()
    first = {}
    for k, p in sorted(zip(keys.tolist(), positions.tolist()), key=lambda kp: kp[1]):
        first.setdefault(k, p)
    expected = np.array([first[k] != p for k, p in sorted(zip(keys.tolist(), positions.tolist()),
                                                         key=lambda kp: kp[1])])
    assert (whole[np.sort(positions)] == expected).all()
    assert not list((tmp_path / "b").glob("bucket-*"))  # each bucket file removed once read


def test_a_position_holding_one_key_twice_is_not_its_own_repeat(tmp_path):
    keys = np.array([7, 7, 9], dtype=np.uint64)
    positions = np.array([0, 0, 1], dtype=np.int64)
    assert pipeline.later_occurrences(iter([(keys, positions)]), 3, 2, tmp_path).tolist() == [False, False]


def test_the_sample_is_a_seeded_share_of_the_train_split(tmp_path):
    src = write_jsonl(tmp_path / "c.jsonl", corpus_docs(300, seed=5, repeats=False))
    result = ingest(discover([src]), tmp_path / "out", options=CleaningOptions(), sample_bytes=5000)
    sample = (tmp_path / "out" / "sample.txt").read_text(encoding="utf-8").strip("\n").split("\n\n")
    train = set((tmp_path / "out" / "train.txt").read_text(encoding="utf-8").strip("\n").split("\n\n"))
    assert set(sample) <= train and 0 < len(sample) < len(train)
    share = result.stats["sample"]["share"]
    assert 0 < share < 1 and abs(result.stats["sample"]["bytes"] - 5000) < 2500
    again = tmp_path / "again"
    ingest(discover([src]), again, options=CleaningOptions(), sample_bytes=5000)
    assert (again / "sample.txt").read_bytes() == (tmp_path / "out" / "sample.txt").read_bytes()


def test_no_sample_when_the_train_split_fits(tmp_path):
    src = write_jsonl(tmp_path / "c.jsonl", corpus_docs(40, repeats=False))
    result = ingest(discover([src]), tmp_path / "out", options=CleaningOptions())
    assert not (tmp_path / "out" / "sample.txt").exists() and result.stats["sample"]["share"] == 1.0


def test_near_duplicates_go_with_minhash_on(tmp_path):
    rng = random.Random(1)
    base = [sentence(rng) for _ in range(40)]
    near = list(base)
    near[20] = near[20].replace(".", " indeed.")
    docs = [base] + [[sentence(rng) for _ in range(6)] for _ in range(10)] + [near]
    src = write_jsonl(tmp_path / "c.jsonl", docs)
    off = ingest(discover([src]), tmp_path / "off", options=CleaningOptions())
    on = ingest(discover([src]), tmp_path / "on", options=CleaningOptions(minhash=True))
    assert off.stats["documents"] == 12 and on.stats["documents"] == 11
    assert on.removed["near_duplicate_pages"] == 1
    assert "indeed" in on.examples["near_duplicate_pages"][0] or on.examples["near_duplicate_pages"]


def test_stage_details_carry_a_rate_and_an_eta(tmp_path):
    src = write_jsonl(tmp_path / "c.jsonl", corpus_docs(200))

    class Progress:
        def __init__(self):
            self.percents, self.details = [], []

        def __call__(self, percent):
            self.percents.append(percent)

        def stage(self, detail):
            self.details.append(detail)

    progress = Progress()
    ingest(discover([src]), tmp_path / "out", options=SPANS, progress=progress, piece_bytes=2000)
    assert progress.percents[0] == 0 and progress.percents[-1] == 100
    stages = [d["stage"] for d in progress.details]
    assert stages.index("read_clean") < stages.index("dedup") < stages.index("split")
    last = [d for d in progress.details if d["stage"] == "read_clean"][-1]
    assert last["done"] == last["total"] and last["unit"] == "MB" and last["eta_seconds"] == 0.0


KILL_SCRIPT = """
import sys, time
from pathlib import Path
from trainer.prep import pipeline
from trainer.prep.corpus import CleaningOptions, ingest
from trainer.prep.sources import discover
slow = pipeline.clean_piece
done = []
def clean_piece(*args, **kw):
    out = slow(*args, **kw)  # its marker is written before it returns
    done.append(out)
    print("piece", flush=True)
    if len(done) == 3:  # the test kills it in this wait, before the fourth piece starts
        time.sleep(float(sys.argv[3]))
    return out
pipeline.clean_piece = clean_piece
ingest(discover([sys.argv[1]]), Path(sys.argv[2]), options=CleaningOptions(dedup_spans=True, min_sentences=True),
       workers=1, piece_bytes=800, sample_bytes=3000)
"""


def test_a_killed_ingest_resumes_and_ends_as_an_uninterrupted_one(tmp_path):
    src = write_jsonl(tmp_path / "c.jsonl", corpus_docs(160, seed=9))
    ingest(discover([src]), tmp_path / "whole", options=SPANS, workers=1, piece_bytes=800, sample_bytes=3000)
    script = tmp_path / "kill.py"
    script.write_text(KILL_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, str(script), str(src), str(tmp_path / "out"), "30"],
                            stdout=subprocess.PIPE, text=True, env=env)
    for _ in range(3):  # three pieces done, then kill -9 in the middle of the fourth's wait
        assert proc.stdout.readline().strip() == "piece"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    work = tmp_path / "out" / pipeline.WORK_DIR
    done_before = sorted(p.name for p in (work / "pieces").glob("*.json"))
    assert len(done_before) == 3 and not (tmp_path / "out" / "stats.json").exists()

    cleaned = []
    original = pipeline.clean_piece

    def counting(piece, *args, **kw):
        cleaned.append(piece.index)
        return original(piece, *args, **kw)

    pipeline.clean_piece = counting
    try:
        ingest(discover([src]), tmp_path / "out", options=SPANS, workers=1, piece_bytes=800, sample_bytes=3000)
    finally:
        pipeline.clean_piece = original
    assert cleaned and min(cleaned) == 3  # the three finished pieces were not read again
    assert outputs(tmp_path / "out") == outputs(tmp_path / "whole")
    assert not work.exists()


def test_a_changed_file_starts_the_work_again(tmp_path):
    src = write_jsonl(tmp_path / "c.jsonl", corpus_docs(60))
    work = tmp_path / "out" / pipeline.WORK_DIR
    fp = pipeline._fingerprint(discover([src]), SPANS.to_dict(), "text", 800)
    made = pipeline._open_work(tmp_path / "out", fp)
    (made / "pieces" / "000000.json").write_text("{}")
    assert (pipeline._open_work(tmp_path / "out", fp) / "pieces" / "000000.json").exists()
    write_jsonl(src, corpus_docs(61))
    fp2 = pipeline._fingerprint(discover([src]), SPANS.to_dict(), "text", 800)
    assert not (pipeline._open_work(tmp_path / "out", fp2) / "pieces" / "000000.json").exists()
    assert work.exists()


RSS_SCRIPT = """
import sys
from pathlib import Path
from trainer.prep import pipeline
from trainer.prep.corpus import CleaningOptions, ingest
from trainer.prep.sources import discover
pipeline.BUCKET_ENTRIES = 1 << 12
ingest(discover([sys.argv[1]]), Path(sys.argv[2]), options=CleaningOptions(dedup_spans=True, minhash=True),
       workers=1, piece_bytes=1 << 20, sample_bytes=1 << 20)
# VmHWM is this program's own peak: ru_maxrss would carry the peak of the (larger) pytest process
# that forked it across the exec
print(next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:")))
"""


def test_peak_memory_does_not_grow_with_the_corpus(tmp_path):
    """A corpus 4x larger (about 1 MB -> 4 MB of JSON lines) raises the peak by less than the text
    added: the pieces stream, and the hashes are held one bucket at a time. What grows is a few
    arrays of a byte or eight per document and per sentence (0.5-0.7 MB per MB of this corpus of
    very short documents, measured; with every hash in memory, as a single bucket holds them, it
    grew 4 MB per MB)."""
    script = tmp_path / "rss.py"
    script.write_text(RSS_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    peaks = []
    for n in (2500, 10000):
        src = write_jsonl(tmp_path / f"c{n}.jsonl", corpus_docs(n, seed=n, repeats=False))
        out = subprocess.run([sys.executable, str(script), str(src), str(tmp_path / f"out{n}")],
                             capture_output=True, text=True, env=env, check=True)
        peaks.append(int(out.stdout.split()[-1]) / 1024)  # MB
    grown = (tmp_path / "c10000.jsonl").stat().st_size / 1e6 - (tmp_path / "c2500.jsonl").stat().st_size / 1e6
    assert peaks[1] - peaks[0] < grown, (peaks, grown)
