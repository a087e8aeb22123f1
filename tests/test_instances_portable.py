"""The instance layer builds the same arrays on every CPU (docs/portability.md).

``lm-faithful-exact``'s supervised warm start was iterated on BLAS products, whose summation order is the CPU's
BLAS kernel's: on an AMD EPYC (OpenBLAS Haswell kernels) it ended at another ``w_init`` than on the Intel Xeon
that wrote the kernel's golden file, and every recorded array of that instance differed. The products are now
fixed-order loops (:mod:`simulate.instances.products`). On an AMD EPYC with AVX-512 the same warm start moved
again: NumPy's ``np.exp`` runs an AVX-512 implementation there whose last bits are not libm's; the warm start now
takes libm's ``exp`` (:func:`simulate.instances.products.exp`). Guarded here by (1) the products and ``exp``
against a plain Python reading of their definition, (2) every registered instance built under the oldest kernels
of both libraries — OpenBLAS's SSE3 kernel (``OPENBLAS_CORETYPE=Prescott``) and NumPy's baseline code, every
run-time dispatched SIMD target this CPU has disabled (``NPY_DISABLE_CPU_FEATURES``) — in a subprocess, bit for
bit. (2) can only catch a NumPy dependence on a CPU that has a dispatched target beyond the baseline (AVX2 or
AVX-512 on x86-64: every current server CPU).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from simulate.instances.products import exp, phi_t_g, phi_w

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FINITE = st.floats(-1e3, 1e3, allow_nan=False, width=64)


def _ref_phi_w(phi, w):
    out = []
    for i in range(phi.shape[0]):
        acc = 0.0
        for j in range(phi.shape[1]):
            acc += float(phi[i, j]) * float(w[j])
        out.append(acc)
    return np.array(out)


def _ref_phi_t_g(phi, g):
    return _ref_phi_w(phi.T, g)  # (Φᵀg)_j = Σ_i Φ_ij g_i, i ascending: row j of Φᵀ times g


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9).flatmap(lambda n: st.integers(1, 9).flatmap(lambda p: st.tuples(
    arrays(np.float64, (n, p), elements=FINITE), arrays(np.float64, (p,), elements=FINITE),
    arrays(np.float64, (n,), elements=FINITE)))))
def test_products_sum_in_the_documented_order(case):
    phi, w, g = case
    assert np.array_equal(phi_w(phi, w), _ref_phi_w(phi, w))
    assert np.array_equal(phi_t_g(phi, g), _ref_phi_t_g(phi, g))


@settings(max_examples=60, deadline=None)
@given(arrays(np.float64, st.integers(0, 40), elements=st.floats(-745.0, 709.0, allow_nan=False, width=64)))
def test_exp_is_libms(x):
    """:func:`exp` is ``math.exp`` (libm) value by value, whatever NumPy's ``np.exp`` runs on this CPU."""
    assert np.array_equal(exp(x), np.array([math.exp(float(v)) for v in x]))
    assert exp(x.reshape(1, -1)).shape == (1, x.shape[0])


def test_products_name_a_bad_argument():
    phi = np.ones((3, 2))
    with pytest.raises(ValueError, match="w must have 2 entries"):
        phi_w(phi, np.ones(3))
    with pytest.raises(ValueError, match="g must have 3 entries"):
        phi_t_g(phi, np.ones(2))
    with pytest.raises(ValueError, match="phi must be a 2-D array"):
        phi_w(np.ones(3), np.ones(3))


SCRIPT = r'''
import hashlib, json, numpy as np
from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
from simulate.protocol.instances import INSTANCES, get_instance
out = {"numpy targets": sorted(t for t in __cpu_dispatch__ if __cpu_features__.get(t))}
for name in sorted(INSTANCES):
    inst = get_instance(name)
    for f in ("next_state", "reward", "step_reward", "features", "starts", "w_init"):
        a = getattr(inst, f, None)
        if a is not None:
            a = np.ascontiguousarray(a)
            out[f"{name}:{f}"] = hashlib.sha256(str(a.dtype).encode() + a.tobytes()).hexdigest()
    out[f"{name}:J0"] = float(inst.exact_J_grad(np.zeros(inst.n_params) if inst.w_init is None else inst.w_init)[0]).hex()
print("RESULT" + json.dumps(out))
'''


_TARGETS = ("from numpy._core._multiarray_umath import __cpu_dispatch__ as d, __cpu_features__ as f; "
            "print(' '.join(sorted(t for t in d if f.get(t))))")
_KERNEL_VARS = ("OPENBLAS_CORETYPE", "NPY_DISABLE_CPU_FEATURES", "NPY_ENABLE_CPU_FEATURES")


def _numpy_targets() -> list[str]:
    """NumPy's run-time dispatched SIMD targets that this CPU has (e.g. ``X86_V3``, ``X86_V4``, ``AVX512_ICL``),
    asked of a fresh interpreter with none disabled (this one may run under ``NPY_DISABLE_CPU_FEATURES``)."""
    env = {k: v for k, v in os.environ.items() if k not in _KERNEL_VARS}
    p = subprocess.run([sys.executable, "-c", _TARGETS], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout.split()


def _digests(oldest: bool) -> dict:
    """Digests of every registered instance, built in a subprocess on this CPU's kernels or (``oldest``) on
    OpenBLAS's SSE3 kernel with every NumPy dispatched target disabled."""
    env = {k: v for k, v in os.environ.items() if k not in _KERNEL_VARS}
    env["PYTHONPATH"] = ROOT
    if oldest:
        env["OPENBLAS_CORETYPE"] = "Prescott"
        env["NPY_DISABLE_CPU_FEATURES"] = " ".join(_numpy_targets())
    p = subprocess.run([sys.executable, "-c", SCRIPT], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.split("RESULT", 1)[1])


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="OPENBLAS_CORETYPE=Prescott is x86-64")
def test_registered_instances_do_not_depend_on_the_cpus_kernels():
    """Each registered instance's arrays and its exact ``J(w₀)`` under this CPU's OpenBLAS and NumPy kernels and
    under the oldest ones (module docstring): equal bit for bit. (Seen failing before the fixed-order products,
    under Prescott, and before libm's ``exp``, with NumPy's AVX-512 targets disabled on an AVX-512 CPU: ``w_init``
    of ``lm-faithful-exact`` differed.)"""
    here, old = _digests(False), _digests(True)
    assert here.pop("numpy targets") == _numpy_targets()
    assert old.pop("numpy targets") == [], "NPY_DISABLE_CPU_FEATURES did not disable NumPy's dispatched targets"
    assert here.keys() == old.keys()
    diff = sorted(k for k in here if here[k] != old[k])
    assert not diff, f"built differently on the oldest kernels: {diff}"
