"""Throughput of the Monte Carlo kernel (simulate.montecarlo) on the token MDP V=32, T=32, G=16.

Rows: the Numba kernel with ``ĝ`` tracked (full statistics) and without (scalar functionals
only), at 1 and 2 threads, and the vectorised NumPy reference (:func:`reference_mc`) of the same
computation on pre-drawn uniforms, all six estimators at one ε on the same groups. Tokens/s counts
``n_groups·G·T`` sampled tokens per wall second of one :func:`run_mc` call (tables prepared once,
kernel compiled before timing). Targets (issue 4): ≥ 50 M tokens/s per core, ≥ 5× NumPy,
≥ 1.8× from 1 to 2 threads. Timings are the best of ``repeats`` runs (other load on the machine
only slows a run down).
"""
from __future__ import annotations

import time

import numba
import numpy as np

from simulate import instances as ins
from simulate import montecarlo as mc

ESTIMATORS = ("onpolicy", "is", "tis", "tic", "gmc", "snis")


def _best(fn, repeats):
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def run(quick: bool = False, V: int = 32, T: int = 32, G: int = 16, repeats: int = 3) -> str:
    mdp = ins.token_mdp(V=V, T=T, state="count", reward="count_ge", k=2)
    theta = ins.random_theta(mdp, 0.5, seed=0)
    theta_mu = ins.stale_pair(mdp, theta, 4, 0.1)
    prep = mc.prepare(mdp, theta, theta_mu)
    n_groups = 4096 if quick else 32768
    n_ref = 256 if quick else 2048
    tokens = n_groups * G * T
    old = numba.get_num_threads()
    rows = []
    try:
        for track in (True, False):
            rates = {}
            for nt in (1, 2):
                numba.set_num_threads(nt)
                mc.run_mc(mdp, theta, theta_mu, ESTIMATORS, [0.2], G, 64, track_grad=track, prepared=prep)  # compile
                dt = _best(lambda: mc.run_mc(mdp, theta, theta_mu, ESTIMATORS, [0.2], G, n_groups, seed=1,
                                             track_grad=track, prepared=prep), repeats)
                rates[nt] = tokens / dt
                rows.append((f"numba, ĝ {'tracked' if track else 'skipped'}", nt, n_groups, rates[nt], dt))
            rows.append((f"  scaling 1→2 threads (ĝ {'tracked' if track else 'skipped'})", None, None, rates[2] / rates[1], None))
    finally:
        numba.set_num_threads(old)
    U = np.random.default_rng(0).random((n_ref, G, T))
    dt = _best(lambda: mc.reference_mc(mdp, theta, theta_mu, ESTIMATORS, [0.2], U), 1)
    np_rate = n_ref * G * T / dt
    rows.append(("numpy reference (ĝ tracked)", 1, n_ref, np_rate, dt))
    numba_1t = next(r[3] for r in rows if r[0].startswith("numba, ĝ tracked") and r[1] == 1)
    lines = [f"token MDP V={V} T={T} ({mdp.S} states), G={G}, {len(ESTIMATORS)} estimators on the same groups",
             f"{'implementation':<40} {'threads':>7} {'groups':>7} {'M tokens/s':>11} {'seconds':>8}"]
    for name, nt, n, rate, dt in rows:
        if nt is None:
            lines.append(f"{name:<40} {'':>7} {'':>7} {rate:>10.2f}x {'':>8}")
        else:
            lines.append(f"{name:<40} {nt:>7} {n:>7} {rate / 1e6:>11.2f} {dt:>8.3f}")
    lines.append(f"numba (1 thread, ĝ tracked) / numpy: {numba_1t / np_rate:.1f}x")
    return "\n".join(lines)
