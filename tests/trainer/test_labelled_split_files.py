"""A labelled dataset in a file per split (issue 23): the fine-tuning YAML's {train:, validation:,
test:}, a validation split carved from train when there is no validation file, a .zip of split
files, and unknown dataset keys refused."""

import io
import zipfile

import pytest
import yaml

from trainer.cli import _labelled_dataset
from trainer.errors import ConfigError, DatasetError
from trainer.prep.labelled import iter_examples, origins, read_meta, sniff_files, unpack_split_archive


def conll(*sentences: str) -> str:
    """One sentence per argument, "word/TAG word/TAG"; a blank line between sentences."""
    return "\n\n".join("\n".join(pair.replace("/", "\t") for pair in s.split()) for s in sentences) + "\n"


TRAIN = conll(*(f"Ann/B-PER went{i}/O to/O Paris/B-LOC" for i in range(10)))
TEST = conll("Bob/B-PER saw/O Rome/B-LOC", "Oslo/B-LOC is/O cold/O")
DEV = conll("Eve/B-PER left/O")


def first_tokens(folder, split):
    return [e["tokens"][0] + e["tokens"][1] for e in iter_examples(folder, split)]


def dataset_yaml(tmp_path, text):
    return _labelled_dataset(yaml.safe_load(text)["dataset"], tmp_path, tmp_path / "out")


def test_a_train_file_and_a_test_file_are_exactly_those_splits(tmp_path, capsys):
    (tmp_path / "train.conll").write_text(TRAIN)
    (tmp_path / "test.conll").write_text(TEST)
    folder = dataset_yaml(tmp_path, "dataset: {train: train.conll, test: test.conll}\n")
    assert first_tokens(folder, "test") == ["Bobsaw", "Oslois"]  # the test file, all of it, nothing else
    train, validation = first_tokens(folder, "train"), first_tokens(folder, "validation")
    assert len(validation) == 1 and sorted(train + validation) == sorted(f"Annwent{i}" for i in range(10))
    meta = read_meta(folder)
    assert meta["split"]["strategy"] == "files" and meta["task"] == "token_classification"
    out = capsys.readouterr().out
    assert "9 train (from train.conll), 1 validation (0.1 of train.conll, at random), 2 test (from test.conll)" in out


def test_three_files_are_the_three_splits(tmp_path):
    for name, text in (("a.conll", TRAIN), ("b.conll", DEV), ("c.conll", TEST)):
        (tmp_path / name).write_text(text)
    folder = dataset_yaml(tmp_path, "dataset: {train: a.conll, validation: b.conll, test: c.conll}\n")
    assert len(first_tokens(folder, "train")) == 10
    assert first_tokens(folder, "validation") == ["Eveleft"] and first_tokens(folder, "test") == ["Bobsaw", "Oslois"]


def test_without_a_test_file_the_test_split_is_empty_and_said(tmp_path, capsys):
    (tmp_path / "train.conll").write_text(TRAIN)
    (tmp_path / "dev.conll").write_text(DEV)
    folder = dataset_yaml(tmp_path, "dataset: {train: train.conll, validation: dev.conll}\n")
    assert first_tokens(folder, "test") == [] and len(first_tokens(folder, "train")) == 10
    assert "The test split is empty (no test file)" in capsys.readouterr().out


def test_a_file_alone_is_still_split_at_random(tmp_path):
    (tmp_path / "all.conll").write_text(TRAIN)
    folder = dataset_yaml(tmp_path, "dataset: {file: all.conll, seed: 3}\n")
    assert read_meta(folder)["split"]["strategy"] == "random"
    assert sum(len(first_tokens(folder, s)) for s in ("train", "validation", "test")) == 10


@pytest.mark.parametrize("entry, message", [
    ("{train: a.conll, tset: b.conll}", "Unknown key 'tset' in dataset; the keys are demo, file, train, validation, "
                                        "test, task, mapping, seed."),
    ("{file: a.conll, test: b.conll}", "Dataset's test: file goes with train:"),
    ("{file: a.conll, train: b.conll}", "Give dataset one of demo:, file: or train:"),
    ("{test: b.conll}", "Set dataset's train: file beside its validation: and test: files."),
    ("{file: a.conll, seed: one}", "Dataset's seed: must be a whole number, not 'one'."),
    ("{file: a.conll, mapping: [tokens]}", "Dataset's mapping: maps column names to roles"),
])
def test_dataset_keys_are_checked(tmp_path, entry, message):
    (tmp_path / "a.conll").write_text(TRAIN)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        dataset_yaml(tmp_path, f"dataset: {entry}\n")
    assert not (tmp_path / "out").exists()


def test_split_files_are_in_one_format(tmp_path):
    (tmp_path / "train.conll").write_text(TRAIN)
    (tmp_path / "test.csv").write_text("text,label\na,b\n")
    with pytest.raises(DatasetError, match="The test file test.csv is CSV but the train file train.conll is CONLL"):
        sniff_files({"train": (tmp_path / "train.conll", "train.conll"), "test": (tmp_path / "test.csv", "test.csv")})


def test_origins_say_where_each_split_comes_from():
    assert origins({"strategy": "random"}, {"all": "d.csv"})["test"] == "0.1 of d.csv, at random"
    assert origins({"strategy": "column"}, {"all": "d.csv"})["train"] == "d.csv, by its split column"
    assert origins({"strategy": "files", "validation": 0}, {"train": "a", "test": "b"}) == {
        "train": "from a", "validation": "no validation file", "test": "from b"}


# --- a .zip of split files ----------------------------------------------------------------------


def zipped(tmp_path, members: dict) -> str:
    path = tmp_path / "data.zip"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, text in members.items():
            zf.writestr(name, text)
    path.write_bytes(buffer.getvalue())
    return path


def unpack(tmp_path, members, max_bytes=1 << 20):
    out = tmp_path / "unpacked"
    out.mkdir(exist_ok=True)
    return unpack_split_archive(zipped(tmp_path, members), target=lambda split, suffix: out / f"raw-{split}{suffix}",
                                max_bytes=max_bytes)


def test_an_archive_of_train_dev_and_test_gives_a_file_per_split(tmp_path):
    files = unpack(tmp_path, {"wnut/dev.conll": DEV, "wnut/train.conll": TRAIN, "wnut/test.conll": TEST,
                              "__MACOSX/wnut/._train.conll": "junk", "wnut/": ""})
    assert list(files) == ["train", "validation", "test"]
    assert files["validation"] == (tmp_path / "unpacked" / "raw-validation.conll", "dev.conll")
    assert files["test"][0].read_text() == TEST


@pytest.mark.parametrize("members, message", [
    ({"train.conll": TRAIN, "README.md": "hi"}, 'The archive holds "README.md", which is not a split file'),
    ({"train.conll": TRAIN, "a/train.conll": TRAIN}, "The archive holds two train files"),
    ({"test.conll": TEST}, "The archive holds no train file"),
    ({"train.conll": TRAIN, "test.csv": "text,label\na,b\n"}, "test file \"test.csv\" is CSV but its train file"),
    ({"train.conll": TRAIN, "test.doc": "x"}, '"test.doc" is not a supported file type'),
])
def test_an_archive_holds_only_split_files_in_one_format(tmp_path, members, message):
    with pytest.raises(DatasetError, match=message):
        unpack(tmp_path, members)
    assert not list((tmp_path / "unpacked").iterdir())


def test_an_archive_that_unpacks_past_the_bound_is_refused_and_leaves_nothing(tmp_path):
    with pytest.raises(DatasetError, match="The archive unpacks to more than"):
        unpack(tmp_path, {"train.conll": TRAIN, "test.conll": TEST}, max_bytes=len(TRAIN) + 5)
    assert not list((tmp_path / "unpacked").iterdir())


def test_the_cli_draws_a_bar_while_it_reads_the_files_in_a_terminal(tmp_path, monkeypatch):
    from tests.trainer.test_cli_verbs import Terminal

    (tmp_path / "train.conll").write_text(TRAIN)
    (tmp_path / "test.conll").write_text(TEST)
    screen = Terminal()
    monkeypatch.setattr("sys.stdout", Terminal())
    monkeypatch.setattr("sys.stderr", screen)
    dataset_yaml(tmp_path, "dataset: {train: train.conll, test: test.conll}\n")
    assert screen.getvalue().split("\r")[-1] == "Reading train.conll [" + "#" * 30 + "] 100%\n"
