"""The transformer rung's protocol t2 gives one run on every CPU (simulate/bridge/transformer.py, docs/portability.md).

Under t1 the rung trained its supervised warm start on the machine at hand, and a chaotic warm start made another
starting policy on each CPU (J₀ 0.562 on an Intel Xeon, 0.485 on an AMD EPYC). t2 loads the committed warm start and
runs in float64, so a run's exact J may differ between CPUs only by kernel round-off. The pinned values were computed
on the AMD EPYC (AVX2) of 6 Dec 2026; ``make test-portable`` runs this test again under every ATen kernel set the
machine has. The tolerance: float64 J by teacher forcing over 100 prompts after 3 updates, ~1e-15 relative kernel
round-off amplified by at most a few orders through the updates; 1e-10 is far below any change of a sampled token
(one token moves J by ≳ 1e-4) or of the start (J₀ moved by 0.08 under t1).
"""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from simulate.bridge import transformer as tr  # noqa: E402

#: J over versions 0..3 of the test-mode run (gmc, d = 2, seed 0), AMD EPYC, 6 Dec 2026.
PINNED_J = [0.4853648389464617, 0.49113820497943467, 0.4980495307813813, 0.5057546163990113]
PINNED_J_HELDOUT = [0.2650815842899275, 0.2691278718184758, 0.27483417677180555, 0.28417900051033235]


def test_a_t2_run_gives_the_pinned_exact_J(tmp_path):
    out = tr.run_cell(estimator="gmc", d=2, seed=0, mode="test", cache_dir=str(tmp_path))
    out = out.sort_values("k")
    J, Jh = out["J"].to_numpy(), out["J_heldout"].to_numpy()
    np.testing.assert_allclose(J, PINNED_J, rtol=1e-10, atol=0)
    np.testing.assert_allclose(Jh, PINNED_J_HELDOUT, rtol=1e-10, atol=0)
    assert abs(J[-1] - J[0]) > 1e-6  # non-vacuous: the updates moved J
