"""Issue 56 item 9: a weight map that ends the process (os._exit(0), os._exit(1), a signal) while
`python -m asyncgrpo.check` checks it is exit 2 with one line saying nothing was checked, never a pass."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

MAPS = textwrap.dedent("""
    import os, signal
    import numpy as np

    def exit0(ell, eps):
        os._exit(0)

    def exit1(ell, eps):
        os._exit(1)

    def killed(ell, eps):
        os.kill(os.getpid(), signal.SIGKILL)

    def tis(ell, eps):
        return np.minimum(np.exp(np.asarray(ell, dtype=float)), 1 + eps)
""")


def _check(tmp_path, spec, *extra):
    (tmp_path / "r5maps.py").write_text(MAPS)
    return subprocess.run([sys.executable, "-m", "asyncgrpo.check", spec, "--max-examples", "5", *extra],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("fn", ["exit0", "exit1", "killed"])
def test_a_map_that_ends_the_process_is_not_a_pass(tmp_path, fn):
    r = _check(tmp_path, f"r5maps:{fn}")
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "nothing was checked" in r.stderr and f"r5maps:{fn}" in r.stderr


def test_a_map_that_returns_is_judged_as_before(tmp_path):
    r = _check(tmp_path, "r5maps:tis")
    # tis is a member but not the C2 minimiser: judged, exit 1
    assert r.returncode == 1 and "=> pure" in r.stdout and "error" not in r.stderr, (r.stdout, r.stderr)
    r = _check(tmp_path, "r5maps:tis", "--eps", "-1")  # a usage error is still exit 2 with its own message
    assert r.returncode == 2 and "nothing was checked" not in r.stderr
