"""Bit-identity guard of the training learner kernel (issues 37, 38): every array a run records is exactly the
one recorded by the kernel at the commit that wrote ``tests/data/kernel_golden.npz``.

A refactor of :mod:`simulate.training.kernel` (named phases, shared DP passes, scratch reuse) must not change a
single bit of any output: the protocol's verdicts and the committed report are functions of these arrays. The
grid covers every code path of the kernel: tabular and feature (``θ = Φw``) policies, terminal and per-step
rewards, Bernoulli rewards, one and several start states (``n_prompts > 1``), trajectory- and token-level
estimators (plugin-free peers included), delays 0/3/8, SGD and Adam, ``adv_norm``, ``zero_tol``, a random
``θ_0`` and runs that diverge (η large). The golden file holds a 16-byte SHA-256 prefix of the bytes of each
recorded array per run (compact: the file stays far below 1 MB), so a failure names the run and the array.

Exact equality is meaningful on any CPU only because the kernel runs without ``fastmath`` (no reassociation) and
without Intel's SVML (which Numba would use for vectorised ``exp`` loops when ``icc_rt`` is installed, whose
results differ from the C library's in the last bit: :func:`test_numba_uses_no_svml`): Numba then evaluates the
same IEEE operations in the same order whatever the instruction set; the test is also run under
``NUMBA_CPU_NAME=generic`` (``make test-portable``). Regenerate (only for a *documented*
change of the numbers) with ``python tests/test_kernel_identity.py --write``.
"""
from __future__ import annotations

import functools
import hashlib
import pathlib
import sys

import numpy as np

GOLDEN = pathlib.Path(__file__).parent / "data" / "kernel_golden.npz"
INSTANCE_NAMES = ("count-frac", "count-long-bernoulli", "feature-lm-bernoulli", "prev-random-1", "lm-faithful-exact")
#: ALL_ESTIMATORS (trajectory and token level) and the plugin-free verl peers (issue 36)
ESTIMATOR_NAMES = ("onpolicy", "is", "tis", "tic", "gmc", "snis", "grpo", "gspo", "cispo", "m2po",
                   "verl_seq_tis", "verl_seq_rs", "verl_tok_tis", "verl_geo_rs")
DELAYS = (0, 3, 8)
SEEDS = (0, 1)
K = 10
FIELDS = ("J", "grad_norm2", "chi2", "clip_frac", "ess", "ghat_norm2", "zero_grad", "theta", "dtheta_norm",
          "logratio_max", "gpar_norm2", "gdot", "gneg", "delays")


def grid():
    """``(label, TrainConfig)`` pairs of the guard (module docstring), in a fixed order."""
    from simulate.delays import DelaySpec
    from simulate.protocol.instances import get_instance
    from simulate.training import TrainConfig

    out = []
    for name in INSTANCE_NAMES:
        inst = get_instance(name)
        G, n_prompts = (4, 4) if inst.starts is not None else (8, 1)
        eta = 2.0 if inst.features is not None else 1.0
        for est in ESTIMATOR_NAMES:
            for d in DELAYS:
                for seed in SEEDS:
                    out.append((f"{name}/{est}/d{d}/s{seed}",
                                TrainConfig(instance=inst, estimator=est, G=G, n_prompts=n_prompts, eta=eta, steps=K,
                                            delay=DelaySpec("fixed", d=d), seed=seed)))
        for est in ("gmc", "is", "grpo", "cispo"):  # options that change the update or the advantages
            base = TrainConfig(instance=inst, estimator=est, G=G, n_prompts=n_prompts, eta=eta, steps=K,
                               delay=DelaySpec("fixed", d=3), seed=5)
            out.append((f"{name}/{est}/adam", base.replace(optimizer="adam", eta=0.3)))
            out.append((f"{name}/{est}/adv_norm", base.replace(adv_norm=True)))
            out.append((f"{name}/{est}/zero_tol", base.replace(zero_tol=1e-12, init_scale=0.5)))
            out.append((f"{name}/{est}/diverge", base.replace(eta=50.0, theta_max=2.0, delay=DelaySpec("uniform", D=4))))
    return out


def digests(results) -> np.ndarray:
    """``(R, len(FIELDS) + 1)`` 16-byte SHA-256 prefixes: each recorded array's bytes, then ``diverged_at``."""
    out = np.empty((len(results), len(FIELDS) + 1), dtype="S16")
    for r, res in enumerate(results):
        for f, name in enumerate(FIELDS):
            a = np.ascontiguousarray(getattr(res, name))
            out[r, f] = hashlib.sha256(str(a.dtype).encode() + str(a.shape).encode() + a.tobytes()).digest()[:16]
        out[r, -1] = hashlib.sha256(repr(res.diverged_at).encode()).digest()[:16]
    return out


@functools.lru_cache(maxsize=1)
def _run():
    from simulate.training import run_many

    labels, configs = zip(*grid())
    return list(labels), run_many(list(configs))


def test_kernel_outputs_bit_identical_to_golden():
    labels, results = _run()
    gold = np.load(GOLDEN)
    assert list(gold["labels"]) == labels, "the guard's grid changed: regenerate only for a documented change"
    assert list(gold["fields"]) == list(FIELDS) + ["diverged_at"]
    now = digests(results)
    bad = [f"{labels[r]}:{(list(FIELDS) + ['diverged_at'])[f]}" for r, f in zip(*np.nonzero(now != gold["digests"]))]
    assert not bad, f"{len(bad)} recorded arrays differ from the golden kernel, e.g. {bad[:8]}"


def test_grid_exercises_divergence_and_every_estimator():
    """The guard would be weak if no run diverged or the grid missed estimators: check it covers them."""
    labels, results = _run()
    assert any(r.diverged_at is not None for r in results)
    assert any(r.diverged_at is None for lab, r in zip(labels, results) if lab.endswith("/d8/s1"))
    assert {lab.split("/")[1] for lab in labels} == set(ESTIMATOR_NAMES)


def test_numba_uses_no_svml():
    """The kernels' ``exp`` is the C library's: with SVML (``icc_rt`` installed) Numba vectorises ``exp`` loops with
    its own ``exp``, and a loop the row sharing vectorises would then differ from one it does not."""
    import numba

    assert not numba.config.USING_SVML, "Numba uses Intel SVML here: set NUMBA_DISABLE_INTEL_SVML=1"


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/test_kernel_identity.py --write   (regenerates the golden file)")
    labels, results = _run()
    GOLDEN.parent.mkdir(exist_ok=True)
    np.savez_compressed(GOLDEN, labels=np.array(labels), fields=np.array(list(FIELDS) + ["diverged_at"]),
                        digests=digests(results))
    print(f"wrote {GOLDEN} ({GOLDEN.stat().st_size} bytes, {len(labels)} runs, "
          f"{sum(r.diverged_at is not None for r in results)} diverged)")

