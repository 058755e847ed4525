"""Batches built by data worker processes (trainer.training.batch_workers, the run setting
data_workers): the stream's own batches, in its order, with its positions; a worker's error
raised in the training process as it was; no worker left once a run ends."""
from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from trainer.config import RunConfig
from trainer.errors import ConfigError
from trainer.finetune.config import FinetuneConfig
from trainer.finetune.engine import ExampleStream
from trainer.finetune.mixing import MixedStream, mixing_rates
from trainer.objectives.examples import SpecialIds
from trainer.prep.tokenization import load_tokenizer
from trainer.training import batch_workers
from trainer.training.batch_workers import BatchWorkers, resolve_workers
from trainer.training.data import DataPosition, build_train_stream
from trainer.training.engine import train
from trainer.training.sinks import ListSink
from tests.trainer.batch_helpers import assert_same_batch
from tests.trainer.batch_workers_helpers import (
    FailingCollator, Lengths, all_ended, batches_in_a_daemonic_process, wait_for_workers,
)

MESSAGE = "The collator cannot build this batch; lower mask_prob."


def _special(tokenizer_dir) -> SpecialIds:
    return SpecialIds.from_tokenizer(load_tokenizer(tokenizer_dir))


def _short(make_config, workers: int) -> RunConfig:
    return make_config(max_steps=3, warmup_steps=1, data_workers=workers)


@pytest.mark.parametrize("workers, shard", [(1, (0, 1)), (2, (0, 1)), (2, (1, 2))])
def test_workers_give_the_streams_batches_in_order_with_its_positions(tokenizer_dir, make_config, workers, shard):
    config = make_config(batch_size=8)
    special = _special(tokenizer_dir)
    size = build_train_stream(config, tokenizer_dir, special).epoch_size
    start = DataPosition(0, size - 5 * 8 * shard[1])  # a resumed stream whose epoch ends after 5 batches
    here = build_train_stream(config, tokenizer_dir, special, start, shard=shard)
    built = BatchWorkers(build_train_stream(config, tokenizer_dir, special, start, shard=shard), workers)
    try:
        for n in range(12):
            if n == 2:
                built.wait_until_ready()  # batches 0 and 1 were built here while the workers started
            batch, position = built.next_batch()
            assert_same_batch(batch, here.next_batch())
            assert position == here.position, n
        assert position.epoch == 1
        assert built.built_here == 2  # the other 10 came from the workers
    finally:
        built.close()
    assert all_ended([built])


def test_the_training_process_builds_the_first_batches_while_its_workers_start(tokenizer_dir, make_config):
    """However large the stream sent to a worker (here with 16 MB more than the socket holds),
    opening the workers does not wait for them to import torch and read it."""
    stream = build_train_stream(make_config(batch_size=8), tokenizer_dir, _special(tokenizer_dir))
    stream.ballast = np.zeros(16 * 2**20, dtype=np.uint8)
    began = time.perf_counter()
    built = BatchWorkers(stream, 1)
    try:
        opened = time.perf_counter() - began
        built.next_batch()
        assert built.built_here == 1
        built.wait_until_ready()
        started = time.perf_counter() - began
        assert opened < started / 4, (opened, started)  # a fresh interpreter importing torch: seconds
    finally:
        built.close()
    assert all_ended([built])


def test_fine_tuning_streams_give_the_same_batches_from_workers():
    examples = [{"i": i, "n": int(n)} for i, n in enumerate(np.random.default_rng(0).integers(3, 90, size=150))]
    make = lambda: ExampleStream(examples, Lengths(), batch_size=16, seed=4,  # noqa: E731
                                 position=DataPosition(0, 130), group_by_length=True)
    tasks = [[{"task": "a", "n": j} for j in range(40)], [{"task": "b", "n": j} for j in range(9)]]
    mixed = lambda: MixedStream(tasks, mixing_rates([40, 9], "equal"), list, batch_size=10, seed=1)  # noqa: E731
    pairs = [(make_stream(), BatchWorkers(make_stream(), 2)) for make_stream in (make, mixed)]
    try:
        for here, built in pairs:
            built.wait_until_ready()
            for n in range(15):  # across epochs
                batch, position = built.next_batch()
                expected = here.next_batch()
                if isinstance(expected, tuple):  # (mask, indices)
                    assert torch.equal(batch[0], expected[0]) and batch[1] == expected[1], n
                else:
                    assert batch == expected, n
                assert position == here.position, n
            assert built.built_here == 0
    finally:
        for _, built in pairs:
            built.close()


def test_workers_start_in_a_daemonic_process_from_a_folder_with_another_trainer_package(tokenizer_dir, make_config,
                                                                                        tmp_path, monkeypatch):
    """A Celery prefork pool process, where a web app run trains, is daemonic: multiprocessing
    starts no children there, the workers start all the same. And they import the training
    process's own trainer package, not one the working folder holds."""
    (tmp_path / "trainer").mkdir()
    (tmp_path / "trainer" / "__init__.py").write_text("")
    monkeypatch.chdir(tmp_path)
    config = make_config(batch_size=8)
    got = batches_in_a_daemonic_process(tokenizer_dir, config.to_dict(), 4)
    assert "error" not in got, got["error"]
    assert got["refused"] == "daemonic processes are not allowed to have children"
    here = build_train_stream(config, tokenizer_dir, _special(tokenizer_dir))
    assert all(np.array_equal(ids, here.next_batch().input_ids.numpy()) for ids in got["input_ids"])
    assert got["built_here"] == 0 and all(code is not None for code in got["exit_codes"])


def test_a_workers_error_is_raised_as_it_was(tokenizer_dir, make_config):
    config = make_config(batch_size=8)
    stream = build_train_stream(config, tokenizer_dir, _special(tokenizer_dir))
    stream.collator = FailingCollator(stream.collator, MESSAGE)
    built = BatchWorkers(stream, 1)
    try:
        built.wait_until_ready()
        with pytest.raises(ConfigError) as raised:
            built.next_batch()
    finally:
        built.close()
    assert str(raised.value) == MESSAGE and built.built_here == 0
    assert "data worker process 1 of 1" in "".join(raised.value.__notes__)
    assert all_ended([built])


def test_a_worker_that_dies_is_reported_with_what_to_do(tokenizer_dir, make_config):
    import signal

    built = BatchWorkers(build_train_stream(make_config(batch_size=8), tokenizer_dir, _special(tokenizer_dir)), 1)
    try:
        built.wait_until_ready()
        built.procs[0].send_signal(signal.SIGKILL)
        with pytest.raises(ConfigError, match=r"^Data worker process 1 of 1 ended while building batch \d \(killed by "
                                              r"SIGKILL, perhaps for lack of memory\)\. Set data_workers to 0"):
            for _ in range(built.depth + 1):  # those it had sent before it died come first
                built.next_batch()
    finally:
        built.close()


def test_a_runs_collator_error_in_a_worker_reaches_it_as_the_same_config_error(tokenizer_dir, tmp_path, make_config,
                                                                             monkeypatch):
    from trainer.training import engine

    opened = wait_for_workers(monkeypatch)
    build = engine.build_train_stream

    def failing(*args, **kwargs):
        stream = build(*args, **kwargs)
        stream.collator = FailingCollator(stream.collator, MESSAGE)
        return stream

    monkeypatch.setattr(engine, "build_train_stream", failing)
    sink = ListSink()
    with pytest.raises(ConfigError) as raised:
        train(_short(make_config, 1), data_dir=tokenizer_dir, out_dir=tmp_path, sink=sink)
    assert str(raised.value) == MESSAGE and sink.closed
    assert len(opened) == 1 and opened[0].built_here == 0 and all_ended(opened)


def test_a_run_says_how_its_batches_are_built_and_leaves_no_worker(tokenizer_dir, tmp_path, make_config, monkeypatch):
    opened = wait_for_workers(monkeypatch)
    sink = ListSink()
    train(_short(make_config, 2), data_dir=tokenizer_dir, out_dir=tmp_path / "a", sink=sink)
    start = next(line for line in sink.lines if line.startswith("Training "))
    assert start.endswith("; batches collated by 2 worker processes.")
    assert len(opened) == 1 and all_ended(opened)
    in_thread = ListSink()
    train(_short(make_config, 0), data_dir=tokenizer_dir, out_dir=tmp_path / "b", sink=in_thread)
    assert next(line for line in in_thread.lines if line.startswith("Training ")).endswith(
        "; batches collated on the training thread.")
    assert len(opened) == 1


def test_a_collator_with_a_generator_of_its_own_stays_in_the_training_process(tokenizer_dir, make_config):
    stream = build_train_stream(make_config(), tokenizer_dir, _special(tokenizer_dir))
    stream.collator.rng = np.random.default_rng(0)  # drawn from batch after batch: order matters
    with pytest.raises(batch_workers.CannotShare, match="draws from a random generator of its own"):
        BatchWorkers(stream, 2)


def test_a_generator_inside_a_wrapped_collator_is_seen_too(tokenizer_dir, make_config):
    from trainer.objectives.packing import PackingCollator

    stream = build_train_stream(make_config(), tokenizer_dir, _special(tokenizer_dir))
    assert isinstance(stream.collator, PackingCollator)  # MLM + NSP batches are packed
    stream.collator.inner.rng = np.random.default_rng(0)
    with pytest.raises(batch_workers.CannotShare, match="draws from a random generator of its own"):
        BatchWorkers(stream, 2)


def test_auto_takes_the_cores_the_training_threads_leave():
    assert resolve_workers(3, "cpu", cores=1, threads=1) == 3  # a number is taken as it is
    assert resolve_workers(-1, "cpu", cores=2, threads=1) == 1  # the CPU benchmark: one thread, one worker
    assert resolve_workers(-1, "cpu", cores=8, threads=8) == 0
    assert resolve_workers(-1, "cpu", cores=1, threads=1) == 0
    assert resolve_workers(-1, "cuda", cores=1) == 0
    assert resolve_workers(-1, "cuda", cores=16) == 4  # at most MAX_AUTO
    assert resolve_workers(-1, "cuda", 4, cores=16) == 3  # (16 - 4) // 4 for each of 4 processes
    assert resolve_workers(-1, "cpu", 4, cores=16, threads=2) == 2  # (16 - 4 x 2) // 4


def test_data_workers_is_a_runtime_setting_that_reads_auto():
    assert RunConfig().data_workers == -1 and RunConfig.from_yaml("data_workers: auto").data_workers == -1
    assert RunConfig(data_workers=2).runtime.data_workers == 2
    with pytest.raises(ConfigError, match="data_workers must be between -1 and 64, not 65"):
        RunConfig(data_workers=65)
    tune = dict(checkpoint="c", dataset="d")
    assert FinetuneConfig(**tune).data_workers == -1 and FinetuneConfig(**tune, data_workers="auto").data_workers == -1
    with pytest.raises(ConfigError, match="data_workers must be between -1 and 64"):
        FinetuneConfig(**tune, data_workers=-2)


def test_the_shards_go_to_a_worker_as_their_file_not_their_tokens(tokenizer_dir, make_config):
    import pickle

    tokens = build_train_stream(make_config(), tokenizer_dir, _special(tokenizer_dir)).source.index.tokens
    assert isinstance(tokens, np.memmap) and tokens.nbytes > 50_000
    sent = batch_workers.dumps(tokens)
    again = pickle.loads(sent)
    assert len(sent) < 1000 and isinstance(again, np.memmap) and again.filename == tokens.filename
    assert np.array_equal(again, tokens) and again.dtype == tokens.dtype
