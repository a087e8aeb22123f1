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
