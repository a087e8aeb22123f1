"""simulate.jit_notice: the one-line warning before a cold Numba compile."""
from __future__ import annotations

import io

from simulate import jit_notice


def test_cold_cache_is_announced_and_warm_cache_is_silent(tmp_path, monkeypatch):
    import numba

    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path))  # an empty cache: everything is cold
    buf = io.StringIO()
    assert jit_notice.is_cold("simulate.training.kernel")
    assert jit_notice.announce_if_cold(("simulate.training.kernel",), stream=buf)
    assert "compiling simulation kernels, once, about 35 s" in buf.getvalue()
    d = tmp_path / "training_0123abcd"  # Numba's layout under NUMBA_CACHE_DIR: <folder>_<hash>/
    d.mkdir(parents=True)
    (d / "kernel._train_batch_nb-1.py311.nbi").write_bytes(b"")
    buf = io.StringIO()
    assert not jit_notice.announce_if_cold(("simulate.training.kernel",), stream=buf)
    assert buf.getvalue() == ""


def test_help_prints_no_compile_notice(tmp_path):
    """``--help`` compiles nothing, so a cold cache must not announce a compile (issue 27 item 16)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cold")}
    r = subprocess.run([sys.executable, "-m", "simulate", "protocol", "--help"], capture_output=True, text=True,
                       env=env, timeout=300, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert r.returncode == 0 and "usage:" in r.stdout
    assert "compiling" not in r.stderr
