"""Numba's cache is keyed by every kernel source (issue 27 item 13): editing a callee in another file
must not leave the caller's stale machine code in use. End to end in fresh interpreters on a toy
package whose caller (``b.py``, ``cache=True``) calls a kernel in ``a.py``."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from asyncgrpo import numba_cache

CALLER = "from numba import njit\nfrom toypkg.a import callee\n\n@njit(cache=True)\ndef caller():\n    return callee()\n"
INIT_KEYED = ("from pathlib import Path\nfrom asyncgrpo import numba_cache\n"
              "numba_cache.configure([Path(__file__).parent])\n")
RUN = "from toypkg.b import caller; print(caller())"


def _run(root: Path, cache: Path) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(Path(__file__).resolve().parents[1])]),
           "NUMBA_CACHE_DIR": str(cache)}
    r = subprocess.run([sys.executable, "-c", RUN], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout.strip()


def _package(root: Path, init: str, value: int) -> None:
    pkg = root / "toypkg"
    pkg.mkdir(exist_ok=True)
    (pkg / "__init__.py").write_text(init)
    (pkg / "a.py").write_text(f"from numba import njit\n\n@njit(cache=True)\ndef callee():\n    return {value}\n")
    if not (pkg / "b.py").exists():  # the caller's file is never touched: only the callee is edited
        (pkg / "b.py").write_text(CALLER)


def test_editing_a_callee_in_another_file_recompiles_the_caller(tmp_path):
    _package(tmp_path, INIT_KEYED, 1)
    assert _run(tmp_path, tmp_path / "cache") == "1"
    _package(tmp_path, INIT_KEYED, 2)  # only the callee's file changes
    assert _run(tmp_path, tmp_path / "cache") == "2"


def test_without_the_key_numba_runs_the_stale_caller(tmp_path):
    """The hazard is real (so the test above can fail): Numba's own per-file key keeps the old callee."""
    _package(tmp_path, "", 1)
    assert _run(tmp_path, tmp_path / "cache") == "1"
    _package(tmp_path, "", 2)
    assert _run(tmp_path, tmp_path / "cache") == "1"


def test_the_hash_covers_kernel_files_only(tmp_path):
    (tmp_path / "k.py").write_text("from numba import njit\n")
    (tmp_path / "plain.py").write_text("x = 1\n")
    h = numba_cache.sources_hash([tmp_path])
    (tmp_path / "plain.py").write_text("x = 2\n")
    assert numba_cache.sources_hash([tmp_path]) == h
    (tmp_path / "k.py").write_text("from numba import njit  # edited\n")
    assert numba_cache.sources_hash([tmp_path]) != h
