"""`python -m trainer import / export / evaluate / --version` (trainer/cli.py), and the progress bar
the long steps draw in a terminal (trainer.progress.TerminalBar)."""
from __future__ import annotations

import io
import json
import zipfile

import pytest
import torch

import trainer
from tests.trainer.finetune_helpers import fine_tuned, ingested_demo
from tests.trainer.importing_helpers import write_tiny_hf_bert, zip_folder
from trainer.cli import main
from trainer.progress import TerminalBar

IDS = torch.tensor([[2, 5, 6, 7, 8, 5, 9, 3], [2, 10, 12, 13, 5, 14, 26, 3]])


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"LM Workbench {trainer.__version__}"


@pytest.mark.parametrize("kind, cls, output", [("model", "BertModel", "last_hidden_state"),
                                              ("masked-lm", "BertForMaskedLM", "logits")])
def test_import_then_export_gives_the_same_model_in_transformers(tmp_path, capsys, kind, cls, output):
    import transformers

    source = write_tiny_hf_bert(tmp_path / "hf", kind=kind)
    archive = zip_folder(source, tmp_path / "hf.zip")
    assert main(["import", str(archive), str(tmp_path / "checkpoint")]) == 0
    assert "as the checkpoint" in capsys.readouterr().out
    assert main(["export", str(tmp_path / "checkpoint"), str(tmp_path / "exported"), "--format", "hf"]) == 0

    before = getattr(transformers, cls).from_pretrained(source).eval()
    after = getattr(transformers, cls).from_pretrained(tmp_path / "exported").eval()
    with torch.no_grad():
        want, got = getattr(before(IDS), output), getattr(after(IDS), output)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def test_import_of_a_folder_and_export_as_the_web_pages_zip(tmp_path, capsys):
    source = write_tiny_hf_bert(tmp_path / "hf", kind="masked-lm")
    assert main(["import", str(source), str(tmp_path / "checkpoint")]) == 0
    assert main(["export", str(tmp_path / "checkpoint"), str(tmp_path / "bert-hf.zip")]) == 0  # .zip: zipped
    names = zipfile.ZipFile(tmp_path / "bert-hf.zip").namelist()
    assert {"bert-hf/config.json", "bert-hf/model.safetensors", "bert-hf/tokenizer.json"} <= set(names)
    assert not list(tmp_path.glob(".bert-hf*"))  # the staging folder is gone

    capsys.readouterr()
    assert main(["export", str(tmp_path / "checkpoint"), str(tmp_path / "bert-hf.zip")]) == 2  # never overwritten
    assert "already exists" in capsys.readouterr().err


def test_import_refusals_are_one_line(tmp_path, capsys):
    assert main(["import", str(tmp_path / "nowhere"), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "does not exist" in err and err.count("\n") == 1
    (tmp_path / "notes.zip").write_bytes(b"not an archive")
    assert main(["import", str(tmp_path / "notes.zip"), str(tmp_path / "out")]) == 2
    assert "not an archive" in capsys.readouterr().err and not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def tuned(trained_run, tmp_path_factory):
    """A 10-step classification fine-tuning run on the demo dataset: (its checkpoint, the dataset, its folder)."""
    root = tmp_path_factory.mktemp("evaluate")
    dataset = ingested_demo("classification", root)
    checkpoint = fine_tuned(trained_run[0].last_checkpoint, dataset, root / "run", steps=10, batch_size=8)
    return checkpoint, dataset, root / "run"


def test_evaluate_gives_the_test_report_the_run_ended_with(tuned, tmp_path, capsys):
    checkpoint, dataset, run = tuned
    assert main(["evaluate", str(run), str(dataset), "--out", str(tmp_path / "report")]) == 0  # a run folder: its latest
    printed = capsys.readouterr().out
    assert "accuracy" in printed and "precision" in printed
    mine = json.loads((tmp_path / "report" / "test_metrics.json").read_text())
    theirs = json.loads((run / "test_metrics.json").read_text())
    assert mine.keys() == theirs.keys()
    for key in theirs:
        assert mine[key] == pytest.approx(theirs[key], abs=1e-6), key
    assert (tmp_path / "report" / "test_report.json").read_text() == (run / "test_report.json").read_text()
    assert (tmp_path / "report" / "predictions.jsonl").read_text() == (run / "predictions.jsonl").read_text()


def test_evaluate_and_incontext_take_the_folder_the_web_app_shows(tuned, tmp_path, capsys):
    """Issue 31, point 4: the web app keeps a dataset's prepared files in var/datasets/<id>/data; the
    folder it shows (var/datasets/<id>) is accepted as the dataset."""
    import shutil

    checkpoint, dataset, _ = tuned
    shown = tmp_path / "datasets" / "7f3e"
    shutil.copytree(dataset, shown / "data")
    assert main(["evaluate", str(checkpoint), str(shown)]) == 0
    assert "accuracy" in capsys.readouterr().out
    from trainer.prep.labelled import dataset_folder

    assert dataset_folder(shown) == shown / "data" and dataset_folder(dataset) == dataset
    assert dataset_folder(tmp_path) == tmp_path  # neither: the readers say what is missing, as before


def test_the_console_names_the_split_it_reports():
    from trainer.training.sinks import format_metrics

    assert format_metrics(90, "test", {"loss": 0.5}).startswith("test @ 90 | loss 0.5000")
    assert format_metrics(90, "valid", {"loss": 0.5}).startswith("valid @ 90 | ")


def test_evaluate_scores_every_row_of_a_file(tuned, tmp_path, capsys):
    from trainer.prep.labelled import DEMOS, read_meta, write_demo_dataset

    checkpoint, dataset, _ = tuned
    source = write_demo_dataset("classification", tmp_path / DEMOS["classification"].filename)
    assert main(["evaluate", str(checkpoint), str(source), "--batch-size", "32"]) == 0
    rows = sum(read_meta(dataset)["sizes"].values())
    assert f"{rows:,} examples" in capsys.readouterr().out


def test_evaluate_refuses_a_pre_training_checkpoint_and_another_task(tuned, trained_run, tmp_path, capsys):
    checkpoint, dataset, _ = tuned
    assert main(["evaluate", str(trained_run[0].last_checkpoint), str(dataset)]) == 2
    assert "not a checkpoint of a fine-tuning run" in capsys.readouterr().err
    other = ingested_demo("regression", tmp_path)
    assert main(["evaluate", str(checkpoint), str(other)]) == 2
    assert "fine-tuned for classification" in capsys.readouterr().err


def test_every_verb_has_a_description_and_examples_and_no_internals():
    """Issue 45, point 7: every command of the parser, walked (a new one is checked too)."""
    import argparse

    from trainer.cli import build_parser

    [commands] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert {"run", "train", "finetune", "incontext", "demo-corpus", "import", "export", "evaluate",
            "serve"} <= set(commands.choices)
    for verb, parser in commands.choices.items():
        text = parser.format_help()
        assert parser.description and parser.description.endswith("."), verb
        assert "examples:" in text and f"python -m trainer {verb} " in text, verb
        for internal in ("RunConfig", "to_yaml", "trainer.training", "Sink"):
            assert internal not in text, (verb, internal)
    run = commands.choices["run"].format_help()  # where the settings are, and their names
    assert all(f" {name}," in run for name in ("max_steps", "lr", "batch_size", "seq_len", "warmup_steps"))
    assert "corpus" in run and "output_dir" in run and "examples/*.yaml" in run


def test_evaluate_never_overwrites_a_report_folder(tuned, tmp_path, capsys):
    checkpoint, dataset, _ = tuned
    report = tmp_path / "report"
    report.mkdir()
    (report / "test_metrics.json").write_text("{}")
    assert main(["evaluate", str(checkpoint), str(dataset), "--out", str(report)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {report} already exists; name a new folder (nothing is overwritten).\n"
    assert [p.name for p in report.iterdir()] == ["test_metrics.json"] and (report / "test_metrics.json").read_text() == "{}"


def test_an_export_error_names_the_folder_the_user_gave(tmp_path, capsys, monkeypatch):
    """Issue 45, point 7: an export is staged in a hidden folder beside OUT (.NAME-xxxx/); a disk
    full there, or a writer's refusal naming it, is said of OUT."""
    import errno
    import os

    import trainer.export as export

    source = write_tiny_hf_bert(tmp_path / "hf", kind="masked-lm")
    assert main(["import", str(source), str(tmp_path / "checkpoint")]) == 0
    capsys.readouterr()

    def full(checkpoint, folder, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(folder / "tokenizer.json"))

    monkeypatch.setattr(export, "write_tokenizer_files", full)
    out = tmp_path / "exported"
    assert main(["export", str(tmp_path / "checkpoint"), str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: No space is left on the disk that holds {out / 'tokenizer.json'};"), err
    assert f"{os.sep}." not in err and not out.exists()
    assert main(["export", str(tmp_path / "checkpoint"), str(tmp_path / "exported.zip")]) == 2
    err = capsys.readouterr().err
    assert f"holds {tmp_path / 'exported.zip'};" in err and f"{os.sep}." not in err

    def refused(checkpoint, folder, **kwargs):
        raise export.ExportError(f"The tokenizer cannot be written to {folder}/tokenizer.json.")

    monkeypatch.setattr(export, "write_tokenizer_files", refused)
    assert main(["export", str(tmp_path / "checkpoint"), str(out)]) == 2
    assert capsys.readouterr().err == f"error: The tokenizer cannot be written to {out}/tokenizer.json.\n"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging folder is left


# ---------------------------------------------------------------------------- progress bars
class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_bar_draws_in_a_terminal_only(monkeypatch):
    monkeypatch.setattr("sys.stdout", Terminal())
    screen = Terminal()
    with TerminalBar("Encoding", stream=screen) as bar:
        for p in (0, 10, 10.4, 55):
            bar(p)
    lines = screen.getvalue().split("\r")[1:]
    assert len(lines) == 4  # 0, 10, 55 and the full bar at the end (10.4 is still 10 %)
    assert lines[-1] == "Encoding [" + "#" * TerminalBar.WIDTH + "] 100%\n"

    piped = io.StringIO()  # a log file or a pipe: nothing at all
    with TerminalBar("Encoding", stream=piped) as bar:
        bar(50)
    assert piped.getvalue() == ""
    monkeypatch.setattr("sys.stdout", io.StringIO())  # stdout captured: quiet as well
    with TerminalBar("Encoding", stream=screen) as bar:
        assert not bar.enabled
