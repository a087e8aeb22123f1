"""The kernel fingerprint (issue 35, simulate/llm/portability/fingerprint.py): one hash per kernel on fixed inputs, stable in a
process, moved by a one-ulp change of one op and of nothing before it, and printed by ``python -m simulate.llm
kernels`` under the kernel path it names. No assertion depends on which kernels this CPU has."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import torch

from simulate.llm.portability import fingerprint as fp

ROOT = os.path.join(os.path.dirname(__file__), "..")


def test_fingerprint_has_one_stable_hash_per_op():
    a, b = fp.kernel_fingerprint(), fp.kernel_fingerprint()
    assert tuple(a) == fp.OPS and a == b
    assert all(re.fullmatch(r"[0-9a-f]{12}", v) for v in a.values())
    assert fp.kernel_fingerprint(seed=1) != a  # the seed draws other inputs


@pytest.mark.parametrize("seed", [-1, 1.5, True, "0"])
def test_a_bad_seed_is_refused_by_name(seed):
    with pytest.raises(ValueError, match="seed must be a non-negative integer"):
        fp.kernel_fingerprint(seed)


def test_a_one_ulp_change_of_one_op_moves_its_entry_and_nothing_before_it(monkeypatch):
    base = fp.kernel_fingerprint()
    real = torch.softmax
    monkeypatch.setattr(torch, "softmax", lambda x, dim: torch.nextafter(real(x, dim), torch.tensor(2.0)))
    moved = fp.kernel_fingerprint()
    i = fp.OPS.index("softmax")
    assert [moved[k] == base[k] for k in fp.OPS[:i]] == [True] * i
    assert moved["softmax"] != base["softmax"]
    assert moved["exp"] == base["exp"]  # inputs come from NumPy: later ops do not inherit the change


@pytest.mark.skipif(torch.backends.cpu.get_cpu_capability().lower() not in ("avx2", "avx512"),
                    reason="the avx2 kernel path needs a CPU with AVX2")
def test_cli_prints_the_fingerprint_under_the_kernel_path_it_names():
    env = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR")}
    out = subprocess.run([sys.executable, "-m", "simulate.llm", "kernels", "--kernels", "avx2+COMPATIBLE"], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    rep = json.loads(out.stdout)
    assert rep["kernels"]["path"] == "avx2+COMPATIBLE" and rep["kernels"]["aten"] == "avx2"
    assert rep["kernels"]["MKL_CBWR"] == "COMPATIBLE" and tuple(rep["fingerprint"]) == fp.OPS and rep["cpu"]
