"""A toy piece job for tests/trainer/test_piece_workers.py: piece i "reads" (i + 1) * 100 bytes in
four steps, reporting each through its on_bytes, as the corpus and encoding pieces do."""
from __future__ import annotations

import sys
import time
from pathlib import Path

from trainer.prep.workers import done_progress, progress_file, serve

STEP_S = 0.6  # longer than a worker's progress interval, so every step is written


def size(i: int) -> int:
    return (i + 1) * 100


def do_piece(work: Path, index: int) -> None:
    on_bytes = progress_file(work, index)
    for k in range(1, 5):
        time.sleep(STEP_S)
        on_bytes(size(index) * k // 4)
    (work / f"{index}.done").write_text("ok")
    done_progress(work, index)


if __name__ == "__main__":  # python -m tests.trainer.toy_pieces serve WORK (trainer.prep.workers starts it so)
    sys.exit(serve("tests.trainer.toy_pieces", Path(sys.argv[2])))
