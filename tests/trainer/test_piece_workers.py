"""trainer.prep.workers.run_pieces reports the bytes done as its pieces run (the progress files
its workers write) and finishes at the total, with the pieces done before counted."""
from __future__ import annotations

from tests.trainer.toy_pieces import size
from trainer.prep.workers import run_pieces


def test_the_progress_counts_running_and_finished_pieces(tmp_path):
    sizes = [size(i) for i in range(4)]
    seen: list[int] = []
    # piece 0 was done before (a resumed job): 100 bytes already
    run_pieces("tests.trainer.toy_pieces", tmp_path, [1, 2, 3], 2, sizes=sizes, done_before=sizes[0],
               on_progress=seen.append, tick=0.1)
    assert all((tmp_path / f"{i}.done").is_file() for i in (1, 2, 3))
    assert seen[0] >= sizes[0] and seen == sorted(seen)  # never backwards
    assert seen[-1] == sum(sizes)
    # reported while pieces were half done, not only as each finished
    assert any(n % 100 for n in seen)  # quarters of the pieces: reported while they ran, not only as they ended
    assert not any((tmp_path / "progress").iterdir())  # each piece's file goes when it is done
