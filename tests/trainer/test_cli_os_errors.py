"""The command line turns an operating-system error (no space, not a folder, read-only, no
permission) into one sentence on stderr and exit status 2; --debug shows the traceback."""
from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

from trainer.cli import os_error_sentence

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("LMWB_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "trainer", *args], capture_output=True, text=True, env=env,
                          timeout=120)


FAILING = """
import errno, os, sys
import trainer.prep.demo as demo
def write(path):  # the disk fills up (or is read-only) while the command writes
    code = getattr(errno, sys.argv[1])
    raise OSError(code, os.strerror(code), str(path))
demo.write_demo_corpus = write
from trainer.cli import main
sys.exit(main(sys.argv[2:]))
"""


def failing(code: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("LMWB_DEBUG", None)
    return subprocess.run([sys.executable, "-c", FAILING, code, *args], capture_output=True, text=True, env=env,
                          timeout=120)


def test_a_full_disk_is_a_sentence_and_exit_2(tmp_path):
    out = failing("ENOSPC", "demo-corpus", str(tmp_path / "c.txt"))
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [
        f"error: No space is left on the disk that holds {tmp_path / 'c.txt'}; free some space and run the "
        "command again. (--debug shows the traceback)"]


def test_a_read_only_disk_is_a_sentence(tmp_path):
    out = failing("EROFS", "demo-corpus", str(tmp_path / "c.txt"))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "is on a read-only file system" in out.stderr


def test_a_path_through_a_file_is_a_sentence(tmp_path):
    (tmp_path / "afile").write_text("x")
    out = cli("demo-corpus", str(tmp_path / "afile" / "corpus.txt"))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "exists already and is in the way" in out.stderr and str(tmp_path / "afile") in out.stderr


def test_debug_shows_the_traceback(tmp_path):
    out = failing("ENOSPC", "--debug", "demo-corpus", str(tmp_path / "c.txt"))
    assert out.returncode == 1 and "Traceback" in out.stderr and "OSError" in out.stderr


def test_every_common_error_has_words_of_its_own():
    for code, words in ((errno.EROFS, "read-only file system"), (errno.EACCES, "Permission denied"),
                        (errno.ENOENT, "does not exist"), (errno.EISDIR, "is a folder, not a file"),
                        (errno.ENOTDIR, "is not a folder")):
        assert words in os_error_sentence(OSError(code, os.strerror(code), "/some/where"))
        assert "/some/where" in os_error_sentence(OSError(code, os.strerror(code), "/some/where"))
    assert os_error_sentence(OSError(errno.EIO, "Input/output error")) == "Input/output error."
