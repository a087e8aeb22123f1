"""The instance layer builds the same arrays on every CPU (docs/portability.md).

``lm-faithful-exact``'s supervised warm start was iterated on BLAS products, whose summation order is the CPU's
BLAS kernel's: on an AMD EPYC (OpenBLAS Haswell kernels) it ended at another ``w_init`` than on the Intel Xeon
that wrote the kernel's golden file, and every recorded array of that instance differed. The products are now
fixed-order loops (:mod:`simulate.instances.products`). Guarded here by (1) the products against a plain Python
reading of their definition, (2) every registered instance built under another OpenBLAS kernel
(``OPENBLAS_CORETYPE=Prescott``, SSE3, which every x86-64 CPU runs) in a subprocess, bit for bit.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from simulate.instances.products import phi_t_g, phi_w

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
from simulate.protocol.instances import INSTANCES, get_instance
out = {}
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


def _digests(coretype: str | None) -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("OPENBLAS_CORETYPE", None)
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    p = subprocess.run([sys.executable, "-c", SCRIPT], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.split("RESULT", 1)[1])


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="OPENBLAS_CORETYPE=Prescott is x86-64")
def test_registered_instances_do_not_depend_on_the_blas_kernel():
    """Each registered instance's arrays and its exact ``J(w₀)`` under this CPU's OpenBLAS kernel and under the
    SSE3 (Prescott) kernel: equal bit for bit. (Seen failing before the fixed-order products: ``w_init`` of
    ``lm-faithful-exact`` differed.)"""
    here, sse3 = _digests(None), _digests("Prescott")
    assert here.keys() == sse3.keys()
    diff = sorted(k for k in here if here[k] != sse3[k])
    assert not diff, f"built differently under another BLAS kernel: {diff}"
