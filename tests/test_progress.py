"""Long work in a log (stderr not a terminal) prints one line per finished stage, not tqdm's carriage-return
frames (issue 27 item 16)."""
from __future__ import annotations

from asyncgrpo.progress import StageLine, progress


def test_not_a_terminal_gives_one_line_per_stage(capsys):
    bar = progress(total=1000, desc="sweep x", unit="cell")  # pytest's captured stderr is not a terminal
    assert isinstance(bar, StageLine)
    for _ in range(1000):
        bar.update(1)
    bar.set_postfix(R="0.5")
    bar.close()
    bar.close()  # closing twice prints once
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\r" not in err and "sweep x: 1000/1000 done in" in err and "R=0.5" in err


def test_iteration_and_disable(capsys):
    assert list(progress(range(3), desc="it")) == [0, 1, 2]
    assert "it: 3/3 done" in capsys.readouterr().err
    list(progress(range(3), desc="quiet", disable=True))
    assert capsys.readouterr().err == ""
